"""rknpu_serverkit: the kit of the programs that serve (the device plugin, the exporter, the DRA
driver): lifecycle actors, stop signals, log lines, settings flags, start-up checks.

- **Lifecycle** (`ActorGroup`, `ActorDied`, `closing_actor`; module `rknpu_serverkit._group`): every
  long-lived piece is an (execute, interrupt) pair; the first to return stops all, one way, and a
  thread that dies stops the server with one line (`ActorDied`), never leaving it half-running.
- **Signals** (`StopEvent`, `stop_on_signals`, `end_server_process`; `rknpu_serverkit._signals`):
  SIGTERM and SIGINT are a clean stop (exit 0); the process ends without interpreter teardown.
- **Logging** (`setup_logging`, `JsonFormatter`, `TextFormatter`, `MAX_LOG_LINE_CHARS`;
  `rknpu_serverkit._logging`): one bounded line per record, text or JSON.
- **Start-up checks** (`check_host_root`, `check_kubelet_folder`, `check_output_folder`,
  `check_writable_folder`, `check_readable_file`, `check_modules`, `os_error_with_fix`;
  `rknpu_serverkit._preflight`): every input checked before a server binds or registers anything
  (`server_main`'s ``preflight``), exit 2 with a fix; a kubelet's folder is never created.
- **The kubelet's absence** (`KubeletWaitNotice`, `KUBELET_WAIT_NOTICE_S`;
  `rknpu_serverkit._kubelet_wait`): one warning, naming the folder, when it has not come in 30 s.
- **Serving** (`Supervisor`, `Endpoint`, `Registration`, `Servicer`, `socket_answers`;
  `rknpu_serverkit._serving`, gRPC loaded on first use): serve a unix socket, register, watch the
  folder, serve again; "is anyone serving this socket" answered once.
- **Metrics** (`MetricsServer`; `rknpu_serverkit._metrics_http`, prometheus-client loaded on first
  use): /metrics, /healthz and /readyz, stopping without waiting on clients.
- **Files** (`write_atomic`, `FolderWatcher`, `quote_ids`): atomic replacement, folder watching
  (inotify, polling fallback), bounded quoting of untrusted IDs.
- **Settings flags** (`add_setting_flags`, `settings_from_flags`, `settings_error`, `LogLevel`,
  `LogFormat`, `check_soc_name`, `server_settings_config`; `rknpu_serverkit._flags`): one ``--flag``
  per pydantic-settings field, its environment twin named in ``--help`` and in errors.

The exit-code table and `run_main` stay in the SDK (`rknnlaunch.run_main`, re-exported here with
`UsageParser` and `describe_os_error`, so a server's ``main`` needs this one import): the
``rknnlaunch`` CLI ends the same way. Standard library (pydantic when settings are built) and
`rknnlaunch`'s public names only at import; gRPC and prometheus-client load with the names
that need them; no numpy.

A server's ``main`` in short::

    def _main(argv):
        settings = settings_from_flags(Settings, parser.parse_args(argv), ENV_PREFIX, PROG)
        stop_logging = setup_logging(LOGGER_NAME, settings.log_format, settings.log_level)
        try:
            group = ActorGroup(stop_timeout=1.5)
            group.add_signals()
            group.add(lambda: loop.run(stop), stop.set, name="loop")
            group.add(*closing_actor(server.stop), name="metrics")
            group.run()
            return 0
        finally:
            stop_logging()

    def main():
        end_server_process(run_main(PROG, lambda: _main(sys.argv[1:]), LOGGER_NAME))
"""

from typing import TYPE_CHECKING

from rknnlaunch import UsageParser, describe_os_error, lazy_attributes, run_main

from ._files import write_atomic
from ._flags import (
    LOG_FORMATS,
    LOG_LEVELS,
    LogFormat,
    add_setting_flags,
    check_device_paths,
    check_host_file,
    check_soc_name,
    server_settings_config,
    settings_error,
    settings_from_flags,
    settings_parser,
    split_device_list,
)
from ._group import ActorDied, ActorGroup, closing_actor
from ._kubelet_wait import KUBELET_WAIT_NOTICE_S, KubeletWaitNotice
from ._logging import MAX_LOG_LINE_CHARS, JsonFormatter, TextFormatter, setup_logging
from ._main import ServerProgram, ServerSettings, server_main
from ._preflight import (
    PERMISSION_FIX,
    check_host_root,
    check_kubelet_folder,
    check_modules,
    check_output_folder,
    check_readable_file,
    check_writable_folder,
    os_error_with_fix,
    parse_address,
)
from ._quoting import quote, quote_ids
from ._signals import STOP_SIGNALS, StopEvent, end_server_process, stop_on_signals
from ._watch import FolderWatcher

if TYPE_CHECKING:
    from ._flags import LogLevel
    from ._metrics_http import MetricsServer
    from ._serving import (
        Endpoint,
        EventLoopThread,
        FileId,
        PluginServer,
        Registration,
        Servicer,
        SocketBusyError,
        Supervisor,
        file_id,
        socket_answers,
    )

# Loaded on first use (PEP 562): LogLevel carries a pydantic validator, serving needs gRPC, the
# metrics page prometheus-client.
_LAZY = {
    "LogLevel": "._flags",
    "MetricsServer": "._metrics_http",
    "Endpoint": "._serving",
    "EventLoopThread": "._serving",
    "FileId": "._serving",
    "PluginServer": "._serving",
    "Registration": "._serving",
    "Servicer": "._serving",
    "SocketBusyError": "._serving",
    "Supervisor": "._serving",
    "file_id": "._serving",
    "socket_answers": "._serving",
}

__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "PERMISSION_FIX",
    "Endpoint",
    "EventLoopThread",
    "FileId",
    "FolderWatcher",
    "MetricsServer",
    "PluginServer",
    "Registration",
    "Servicer",
    "SocketBusyError",
    "Supervisor",
    "file_id",
    "quote",
    "quote_ids",
    "socket_answers",
    "write_atomic",
    "ActorDied",
    "check_host_root",
    "check_kubelet_folder",
    "check_modules",
    "check_output_folder",
    "check_readable_file",
    "check_writable_folder",
    "os_error_with_fix",
    "parse_address",
    "server_settings_config",
    "LOG_FORMATS",
    "LOG_LEVELS",
    "MAX_LOG_LINE_CHARS",
    "STOP_SIGNALS",
    "ActorGroup",
    "KUBELET_WAIT_NOTICE_S",
    "KubeletWaitNotice",
    "JsonFormatter",
    "LogFormat",
    "LogLevel",
    "StopEvent",
    "TextFormatter",
    "UsageParser",
    "add_setting_flags",
    "check_device_paths",
    "check_host_file",
    "check_soc_name",
    "closing_actor",
    "server_main",
    "ServerProgram",
    "ServerSettings",
    "describe_os_error",
    "end_server_process",
    "run_main",
    "settings_error",
    "settings_from_flags",
    "settings_parser",
    "split_device_list",
    "setup_logging",
    "stop_on_signals",
]
