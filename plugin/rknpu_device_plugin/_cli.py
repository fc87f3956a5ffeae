"""The `rknpu-device-plugin` entry point: settings, wiring, and the actor group (`rknpu_serverkit`)
that runs the long-lived pieces and stops them one way."""

from __future__ import annotations

import importlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rknnlaunch import UsageError, __version__
from rknnlaunch.npu import HostRoot
from rknpu_node import NullEvents, PluginEvents, TeeEvents, cdi_spec
from rknpu_serverkit import (
    ActorGroup,
    ServerProgram,
    check_host_root,
    check_kubelet_folder,
    check_modules,
    check_readable_file,
    check_writable_folder,
    closing_actor,
    parse_address,
    write_atomic,
)

from ._log import LOGGER_NAME, get_logger, setup_logging
from ._settings import PluginSettings, build_parser, settings_from

if TYPE_CHECKING:
    from rknpu_node import Actor, ResourceManager
    from rknpu_serverkit import Supervisor

PROG = "rknpu-device-plugin"
VIDEO_SOCKET_NAME = "rockchip.com-vpu.sock"
SHUTDOWN_JOIN_SECONDS = 1.5
_log = get_logger()


_PROBE_FIX = (
    "use the probe image (images/plugin-probe), which has /opt/rknpu-probe/probe-<soc>.rknn, or point "
    "--probe-model at a readable .rknn file (or leave it unset)"
)


def preflight(settings: PluginSettings) -> None:
    """Every input checked before the plugin scans, binds or registers anything (exit 2)."""
    needed = {"grpc": "the kubelet's gRPC API", "google.protobuf": "the kubelet's gRPC messages"}
    if settings.inotify:
        needed["inotify_simple"] = "--inotify (or pass --no-inotify)"
    if settings.metrics_address:
        needed["prometheus_client"] = "--metrics-address"
    check_modules(needed, "pip install 'rknnlaunch[plugin]' (the plugin's image has it)")
    check_host_root(settings.host_root)
    check_kubelet_folder(settings.device_plugin_dir, "--device-plugin-dir")
    if settings.cdi:
        check_writable_folder(settings.cdi_dir, "--cdi-dir")
    if settings.nfd_dir is not None:
        check_writable_folder(settings.nfd_dir, "--nfd-dir")
    if settings.metrics_address:
        parse_address(settings.metrics_address)
    if settings.probe_model is not None:
        model = Path(settings.probe_model)
        if "{soc}" not in settings.probe_model:
            check_readable_file(model, "--probe-model", _PROBE_FIX)
        elif not model.parent.is_dir():  # the file is per SoC, known after discovery: its folder now
            check_readable_file(model.parent, "--probe-model's folder", _PROBE_FIX)


def run(settings: PluginSettings) -> int:
    # gRPC's C core prints INFO lines of its own (e.g. "Got goaway" when kubelet restarts) that
    # would break --log-format json; keep its errors. Must be set before grpc is imported.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    host = HostRoot(settings.host_root)
    metrics_module = _metrics_module() if settings.metrics_address else None
    metrics: PluginEvents = metrics_module.PluginMetrics() if metrics_module is not None else NullEvents()
    events: PluginEvents = metrics
    labels = None
    if settings.nfd_dir is not None:
        from .telemetry import PluginLabels

        labels = PluginLabels(settings.nfd_dir, settings.mode)
        events = TeeEvents(metrics, labels)
    try:
        return _serve(settings, host, metrics_module, metrics, events)
    finally:
        if labels is not None:  # after every actor ended: nothing writes the labels any more
            labels.close()


def _serve(
    settings: PluginSettings, host: HostRoot, metrics_module: Any, metrics: PluginEvents, events: PluginEvents
) -> int:
    """Scan, then run the plugin's actors until a signal (or the first actor's end) stops them all."""
    from rknpu_node import health_actor, probe_actor

    resources = _scanned(settings, events)
    if resources is None:
        return 1
    # One budget for all actors, not one each: SIGTERM must end the process within 2 s.
    group = ActorGroup(stop_timeout=SHUTDOWN_JOIN_SECONDS)
    group.add_signals(lambda signum: _log.info("stopping", extra={"fields": {"signal": signum}}))
    if metrics_module is not None:
        group.add(*_metrics_actor(settings, host, metrics_module, metrics, resources), name="metrics")
    supervisor = _supervisor(settings, resources, events)
    resources.on_ready = supervisor.wake
    # Interrupts run in the order added: health first (no new scans), then the probe (a child in
    # flight is killed, not awaited), the supervisor last (it unregisters from kubelet).
    group.add(*health_actor(resources), name="health")
    if settings.probe_model is not None:
        from .telemetry import held_cores_asker

        held = held_cores_asker(settings.pod_resources_socket, settings.resource_name)
        group.add(*probe_actor(resources, events, settings, held), name="probe")
    group.add(*supervisor.actor(), name="supervisor")
    if settings.vpu:
        video = _video_supervisor(settings, host)
        if video is not None:
            group.add(*video.actor(), name="vpu-supervisor")
    try:
        group.run()
    finally:
        _log.info("stopped")
    return 0


def _metrics_actor(
    settings: PluginSettings,
    host: HostRoot,
    metrics_module: Any,
    metrics: PluginEvents,
    resources: ResourceManager,
) -> Actor:
    """The metrics endpoint, serving from now on; the actor's interrupt stops it."""
    # Pod attribution matches a "{soc}" resource name template itself (any SoC's name).
    metrics_server = metrics_module.start_metrics_server(
        settings.metrics_address,
        metrics,
        host,
        lambda: resources.info,
        settings.pod_resources_socket,
        settings.resource_name,
    )
    return closing_actor(metrics_server.stop)


def _scanned(settings: PluginSettings, events: PluginEvents) -> ResourceManager | None:
    """The node's NPU, scanned; None when none is found and --fail-on-init-error says to exit 1."""
    from rknpu_node import node_resources

    resources = node_resources(settings, events, settings.mode, settings.replicas)
    _log.info(
        "starting",
        extra={
            "fields": {
                "version": __version__,
                "host_root": str(settings.host_root),
                "device_plugin_dir": str(settings.device_plugin_dir),
                "mode": settings.mode,
                "replicas": settings.replicas,
            }
        },
    )
    if settings.fail_on_init_error:
        resources.when_missing = "exiting with status 1 (--fail-on-init-error)"
    resources.scan()
    if resources.info is None and settings.fail_on_init_error:
        return None
    return resources


def _supervisor(settings: PluginSettings, resources: ResourceManager, events: PluginEvents) -> Supervisor:
    """Serve the DevicePlugin service on our socket and Register it with the kubelet, again after
    every kubelet restart (the kit's `Supervisor`; the socket's name follows the SoC found)."""
    from rknpu_serverkit import Endpoint, Supervisor

    from .kubelet import DevicePluginService, KubeletRegistration

    service = DevicePluginService(
        resources,
        events,
        settings.mode,
        cdi=False,
        max_replicas_per_request=1 if settings.fail_requests_greater_than_one else None,
    )

    def endpoint_for() -> Endpoint | None:
        info = resources.info
        if info is None:
            return None
        return Endpoint(
            settings.device_plugin_dir,
            settings.resolved_socket_name(info.soc.name),
            settings.resolved_resource_name(info.soc.name),
        )

    def before_serve() -> None:
        if settings.cdi:
            service.cdi = _write_cdi_spec(settings, resources)

    return Supervisor(
        settings.device_plugin_dir,
        endpoint_for,
        service,
        KubeletRegistration(events, settings.kubelet_wait_notice),
        before_serve=before_serve,
        use_inotify=settings.inotify,
    )


def _video_supervisor(settings: PluginSettings, host: HostRoot) -> Supervisor | None:
    """--vpu: the video blocks as `rockchip.com/vpu`, served and registered like the NPU (the kit's
    `Supervisor`, its own socket); None, with one line, when the node has no MPP service."""
    from rknpu_node import VIDEO_RESOURCE_NAME, discover_video, video_device_ids
    from rknpu_serverkit import Endpoint, Supervisor

    from .kubelet import KubeletRegistration, VideoPluginService

    try:
        blocks = discover_video(host)
    except OSError as exc:
        blocks = None
        _log.error("cannot read the video device nodes", extra={"fields": {"error": str(exc)}})
    if blocks is None:
        _log.warning(
            "--vpu: no /dev/mpp_service on this node; not offering rockchip.com/vpu (load the vendor "
            "MPP driver, or mount the host's /dev under --host-root)",
            extra={"fields": {"host_root": str(settings.host_root)}},
        )
        return None
    _log.info(
        "offering the video blocks",
        extra={
            "fields": {
                "resource": VIDEO_RESOURCE_NAME,
                "devices": list(blocks.device_paths),
                "replicas": settings.vpu_replicas,
                "sysfs_confirmed": blocks.sysfs_confirmed,
            }
        },
    )
    endpoint = Endpoint(settings.device_plugin_dir, VIDEO_SOCKET_NAME, VIDEO_RESOURCE_NAME)
    # NullEvents: the plugin's registration metrics count the NPU's resource only.
    return Supervisor(
        settings.device_plugin_dir,
        lambda: endpoint,
        VideoPluginService(blocks, video_device_ids(settings.vpu_replicas)),
        KubeletRegistration(NullEvents()),
        use_inotify=settings.inotify,
    )


def _metrics_module() -> Any:
    """The telemetry helper's metrics module, imported lazily (prometheus-client is optional)."""
    try:
        return importlib.import_module("rknpu_device_plugin.telemetry._http")
    except ImportError as exc:
        raise UsageError(
            f"--metrics-address is set but metrics are unavailable: {exc}",
            "install rknnlaunch[plugin] (prometheus-client), or leave --metrics-address unset",
        ) from None


def _write_cdi_spec(settings: PluginSettings, resources: ResourceManager) -> bool:
    """Write the CDI spec atomically; False (and an error line) if it cannot be written."""
    info, _state, compatible = resources.snapshot()
    if info is None:
        return False
    path = Path(settings.cdi_dir) / "rockchip.com-npu.json"
    try:
        write_atomic(path, json.dumps(cdi_spec(info, compatible, resources.extras), indent=2))
    except OSError as exc:
        _log.error(
            "cannot write the CDI spec; Allocate returns device nodes only",
            extra={"fields": {"path": str(path), "error": str(exc)}},
        )
        return False
    _log.info("wrote CDI spec", extra={"fields": {"path": str(path), "device": "rockchip.com/npu=npu"}})
    return True


PROGRAM = ServerProgram(PROG, LOGGER_NAME, build_parser, settings_from, setup_logging, run, preflight)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the plugin until SIGTERM/SIGINT (`rknpu_serverkit.server_main`: exit codes, and the
    process ends there when run as the program)."""
    return PROGRAM.main(argv)
