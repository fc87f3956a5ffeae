"""The `rknpu-exporter` command: NPU metrics, NFD labels and a node-exporter textfile, without the plugin.

For nodes where the device plugin runs without ``--metrics-address`` (or not at all): serves the
same NPU metrics (load, clock, pod attribution) over HTTP and/or rewrites the NFD feature file and
the textfile every ``--interval`` seconds. Flags override ``RKNPU_EXPORTER_*`` variables.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings

from rknnlaunch import RknnLaunchError, __version__
from rknnlaunch.npu import HostRoot, NpuInfo, SocSpec, soc_by_name
from rknpu_node import DEFAULT_RESOURCE_NAME, discover_on_node
from rknpu_serverkit import (
    LOG_FORMATS,
    LOG_LEVELS,
    ActorGroup,
    LogFormat,
    LogLevel,
    ServerProgram,
    UsageParser,
    add_setting_flags,
    check_host_root,
    check_modules,
    check_output_folder,
    check_soc_name,
    check_writable_folder,
    describe_os_error,
    parse_address,
    server_settings_config,
    settings_from_flags,
)

from .._log import LOGGER_NAME, setup_logging
from ..telemetry import (
    DEFAULT_FEATURES_DIR,
    DEFAULT_POD_RESOURCES_SOCKET,
    PodResourcesClient,
    describe_labels,
    nfd_labels,
    remove_feature_file,
    write_feature_file,
    write_textfile,
)

if TYPE_CHECKING:  # prometheus-client loads once the settings are checked (`preflight`)
    from rknpu_serverkit import MetricsServer

ENV_PREFIX = "RKNPU_EXPORTER_"
PROG = "rknpu-exporter"
# Unless told otherwise, NFD labels outlive a dead exporter by this many write intervals (at least
# 10 minutes), then NFD drops them: a node never keeps NPU labels nobody vouches for.
_EXPIRY_INTERVALS = 10
_MIN_EXPIRY_SECONDS = 600.0
# --nfd-expiry's ceiling: a year (and a leap day). 1e14 s overflowed datetime with a traceback; a
# longer expiry is forever in all but name, and 0 says forever plainly.
_MAX_EXPIRY_SECONDS = 366 * 24 * 3600

log = logging.getLogger("rknpu_device_plugin.exporter")


class ExporterSettings(BaseSettings):
    """Everything rknpu-exporter can be told. Field descriptions are the `--help` texts."""

    model_config = server_settings_config(ENV_PREFIX)

    host_root: Path = Field(Path("/"), description="where the host's / is mounted (a DaemonSet uses /host)")
    metrics_address: str | None = Field(
        None, description='serve Prometheus metrics on "host:port" (":9102" = all interfaces)'
    )
    pod_resources_socket: str = Field(
        DEFAULT_POD_RESOURCES_SOCKET,
        description='kubelet pod-resources socket for pod attribution ("" = off)',
    )
    resource_name: str = Field(DEFAULT_RESOURCE_NAME, description="the plugin's extended resource name")
    nfd_dir: Path | None = Field(
        None, description=f"write the NFD feature file 'rknpu' here (NFD reads {DEFAULT_FEATURES_DIR})"
    )
    textfile_dir: Path | None = Field(
        None, description="write rknpu.prom here (node-exporter's --collector.textfile.directory)"
    )
    interval: float = Field(30.0, gt=0, le=3600, description="seconds between file writes and re-discovery")
    nfd_expiry: float | None = Field(
        None,
        ge=0,
        le=_MAX_EXPIRY_SECONDS,
        description="seconds NFD keeps our labels without a rewrite (0 = forever; default: 10 intervals, "
        "at least 600; forever with --once; at most 366 days because a longer expiry is forever in all "
        "but name, which 0 says plainly)",
    )
    once: bool = Field(False, description="write the files once and exit (no metrics server)")
    soc: str | None = Field(None, description="SoC to assume when the device tree cannot be read")
    log_format: LogFormat = Field("text", description="log line format")
    log_level: LogLevel = Field("info", description="log level")

    @field_validator("soc")
    @classmethod
    def _known_soc(cls, value: str | None) -> str | None:
        return check_soc_name(value)

    @model_validator(mode="after")
    def _has_output(self) -> ExporterSettings:
        if self.once and self.metrics_address:
            raise ValueError("--once writes files and exits; it cannot serve --metrics-address")
        if not (self.metrics_address or self.nfd_dir or self.textfile_dir):
            raise ValueError("nothing to do: give --metrics-address, --nfd-dir and/or --textfile-dir")
        return self

    def soc_hint(self) -> SocSpec | None:
        return soc_by_name(self.soc) if self.soc else None

    def expiry_seconds(self) -> float | None:
        """How long NFD may keep our labels after a write (None = forever)."""
        if self.nfd_expiry is not None:
            return self.nfd_expiry or None
        if self.once:
            return None
        return max(self.interval * _EXPIRY_INTERVALS, _MIN_EXPIRY_SECONDS)


HELP_DESCRIPTION = """\
NPU metrics, NFD labels and a node-exporter textfile, without the device plugin.

For nodes where the device plugin runs without --metrics-address (or not at all): serves the
same NPU metrics (load, clock, pod attribution) over HTTP and/or rewrites the NFD feature file and
the textfile every --interval seconds. Flags override RKNPU_EXPORTER_* variables.
"""


def build_parser() -> argparse.ArgumentParser:
    """One flag per settings field; unset flags fall back to RKNPU_EXPORTER_* and then defaults."""
    parser = UsageParser(
        prog=PROG,
        description=HELP_DESCRIPTION,
        argument_default=argparse.SUPPRESS,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    choices = {"log_level": LOG_LEVELS, "log_format": LOG_FORMATS}
    add_setting_flags(parser, ExporterSettings, ENV_PREFIX, choices=choices)
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    return parser


def settings_from(args: argparse.Namespace) -> ExporterSettings:
    return settings_from_flags(ExporterSettings, args, ENV_PREFIX, PROG)


def parse_settings(argv: Sequence[str]) -> ExporterSettings:
    """Flags override the environment; raises UsageError naming what is wrong."""
    return settings_from(build_parser().parse_args(list(argv)))


def preflight(settings: ExporterSettings) -> None:
    """Every input checked before the first discovery or the metrics port is bound (exit 2)."""
    needed = {"prometheus_client": "metrics and the textfile"}
    if settings.pod_resources_socket and (settings.metrics_address or settings.textfile_dir):
        needed |= {
            "grpc": "pod attribution (or --pod-resources-socket '')",
            "google.protobuf": "pod attribution",
        }
    check_modules(needed, "pip install 'rknnlaunch[plugin]'")
    check_host_root(settings.host_root)
    if settings.metrics_address:
        parse_address(settings.metrics_address)
    if settings.nfd_dir is not None:
        check_writable_folder(settings.nfd_dir, "--nfd-dir")
    if settings.textfile_dir is not None:
        check_output_folder(settings.textfile_dir, "--textfile-dir")


class Discovery:
    """The latest discovery result, refreshed by the write loop and read by scrapes (thread-safe)."""

    def __init__(self, host: HostRoot, soc_hint: SocSpec | None, say_missing: bool = True) -> None:
        self.host = host
        self.soc_hint = soc_hint
        self.say_missing = say_missing
        """False (--once): the caller ends with the error, so it is said once, not also as a warning."""
        self._lock = threading.Lock()
        self._info: NpuInfo | None = None
        self._error: RknnLaunchError | None = None
        self._said_error: str | None = None

    def refresh(self) -> NpuInfo | None:
        error: RknnLaunchError | None = None
        try:
            info: NpuInfo | None = discover_on_node(self.host, self.soc_hint, ENV_PREFIX)
        except RknnLaunchError as exc:
            info, error = None, exc
        with self._lock:
            before, self._info, self._error = self._info, info, error
        # Say what changed, not the same thing every interval.
        if info is not None:
            if info != before:
                log.info("NPU found: %s", describe_labels(nfd_labels(info)))
                for note in info.notes:
                    log.warning("%s", note)
        elif str(error) != self._said_error and self.say_missing:
            log.warning("no usable NPU: %s", error)
        self._said_error = None if error is None else str(error)
        return info

    def current(self) -> NpuInfo | None:
        with self._lock:
            return self._info

    @property
    def error(self) -> RknnLaunchError | None:
        with self._lock:
            return self._error


class Exporter:
    """The write loop and the optional metrics server, sharing one collector."""

    def __init__(self, settings: ExporterSettings, now: Callable[[], datetime] | None = None) -> None:
        from ..telemetry import NpuCollector, build_registry

        self.settings = settings
        self.host = HostRoot(settings.host_root)
        self.discovery = Discovery(self.host, settings.soc_hint(), say_missing=not settings.once)
        self._now = now or (lambda: datetime.now(timezone.utc))
        socket_path = settings.pod_resources_socket
        self.pod_resources = PodResourcesClient(socket_path, settings.resource_name) if socket_path else None
        self.collector = NpuCollector(self.host, self.discovery.current, self.pod_resources)
        # node-exporter brings its own process_* series: the textfile must not repeat them.
        self.textfile_registry = build_registry(self.collector, process_metrics=False)
        self.server: MetricsServer | None = None

    def start(self) -> None:
        self.discovery.refresh()
        if self.settings.metrics_address:
            from rknpu_serverkit import MetricsServer

            from ..telemetry import build_registry

            self.server = MetricsServer(self.settings.metrics_address, build_registry(self.collector))

    def write_outputs(self) -> NpuInfo | None:
        """Re-discover, then rewrite (or, with no NPU, remove) the NFD file and rewrite the textfile."""
        info = self.discovery.refresh()
        settings = self.settings
        nfd_dir, textfile_dir = settings.nfd_dir, settings.textfile_dir
        if nfd_dir is not None:
            with _writing("the NFD feature file", "--nfd-dir", nfd_dir):
                if info is not None:
                    expiry = settings.expiry_seconds()
                    expires_at = self._now() + timedelta(seconds=expiry) if expiry else None
                    write_feature_file(nfd_dir, info, expires_at)
                elif remove_feature_file(nfd_dir):
                    log.info("removed %s/rknpu: no NPU, so no NPU labels", nfd_dir)
        if textfile_dir is not None:
            with _writing("the node-exporter textfile", "--textfile-dir", textfile_dir):
                write_textfile(textfile_dir, self.textfile_registry)
        return info

    def run(self, stop: threading.Event) -> None:
        """Write every interval until ``stop`` is set."""
        while True:
            try:
                self.write_outputs()
            except OutputError as exc:
                log.error("%s (will retry)", exc.problem)
            if stop.wait(self.settings.interval):
                return

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.pod_resources is not None:
            self.pod_resources.close()


class OutputError(RknnLaunchError):
    """An output folder cannot be written."""


@contextlib.contextmanager
def _writing(what: str, flag: str, folder: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise OutputError(
            f"cannot write {what} in {folder}: {describe_os_error(exc)}",
            f"make {flag} a folder the exporter may write (a read-write hostPath mount; the "
            f"exporter's user must own it or be in its group), or point {flag} elsewhere",
        ) from None


def run(settings: ExporterSettings) -> int:
    exporter = Exporter(settings)
    try:
        if settings.once:
            info = exporter.write_outputs()
            error = exporter.discovery.error
            if info is None and error is not None:
                raise error
            return 0
        # Two actors: the write loop (which starts the metrics server first; `close` below stops
        # it) and the stop signals, so a SIGTERM during the first discovery is a clean stop too.
        group = ActorGroup()
        group.add_signals(_said_stopping)
        stop = threading.Event()

        def write_loop() -> None:
            exporter.start()
            exporter.run(stop)

        group.add(write_loop, stop.set, name="writer")
        group.run()
        return 0
    finally:
        exporter.close()


def _said_stopping(signum: int) -> None:
    log.info("signal %d: stopping", signum)


PROGRAM = ServerProgram(PROG, LOGGER_NAME, build_parser, settings_from, setup_logging, run, preflight)


def main(argv: Sequence[str] | None = None) -> int:
    """Run rknpu-exporter (`rknpu_serverkit.server_main`): exit codes as in `rknnlaunch.run_main`
    (0 ok or a clean stop on SIGTERM/SIGINT, 1 no usable NPU with --once or an unwritable output,
    2 bad settings); run as the program (``argv`` None), the process ends there."""
    return PROGRAM.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
