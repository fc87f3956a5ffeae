"""The `rknpu-device-plugin` entry point: settings, wiring, and the actor group (`rknpu_serverkit`)
that runs the long-lived pieces and stops them one way."""

from __future__ import annotations

import importlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rknnlaunch import UsageError, __version__
from rknnlaunch.npu import HostRoot, soc_by_name
from rknpu_serverkit import (
    ActorGroup,
    check_host_root,
    check_kubelet_folder,
    check_modules,
    check_readable_file,
    check_writable_folder,
    closing_actor,
    parse_address,
    server_main,
)

from ._events import NullEvents, PluginEvents, TeeEvents
from ._files import write_atomic
from ._log import LOGGER_NAME, get_logger, setup_logging
from ._settings import PluginSettings, build_parser, settings_from
from .devices import cdi_spec

if TYPE_CHECKING:
    from .devices import ResourceManager

PROG = "rknpu-device-plugin"
SHUTDOWN_JOIN_SECONDS = 1.5
_log = get_logger()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the plugin until SIGTERM/SIGINT (`rknpu_serverkit.server_main`: exit codes, and the
    process ends there when run as the program)."""
    return server_main(
        argv,
        prog=PROG,
        logger_name=LOGGER_NAME,
        build_parser=build_parser,
        settings_from=settings_from,
        setup_logging=setup_logging,
        run=run,
        preflight=preflight,
    )


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
    # gRPC is imported here, not at module level, so `--help` and bad settings answer fast.
    from .devices import ResourceManager
    from .kubelet import DevicePluginService, Endpoint, KubeletRegistration, Supervisor

    resources = ResourceManager(
        host,
        events,
        mode=settings.mode,
        replicas=settings.replicas,
        soc_hint=soc_by_name(settings.soc) if settings.soc else None,
        health_interval=settings.health_interval,
        use_inotify=settings.inotify,
        extra_devices=settings.extra_device,
        host_librknnrt=settings.host_librknnrt,
    )
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
        return 1

    # One budget for all actors, not one each: SIGTERM must end the process within 2 s.
    group = ActorGroup(stop_timeout=SHUTDOWN_JOIN_SECONDS)
    group.add_signals(lambda signum: _log.info("stopping", extra={"fields": {"signal": signum}}))
    if metrics_module is not None:
        # Pod attribution matches a "{soc}" resource name template itself (any SoC's name).
        metrics_server = metrics_module.start_metrics_server(
            settings.metrics_address,
            metrics,
            host,
            lambda: resources.info,
            settings.pod_resources_socket,
            settings.resource_name,
        )
        group.add(*closing_actor(metrics_server.stop), name="metrics")

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

    supervisor = Supervisor(
        settings.device_plugin_dir,
        endpoint_for,
        service,
        KubeletRegistration(events, settings.kubelet_wait_notice),
        before_serve=before_serve,
        use_inotify=settings.inotify,
    )
    resources.on_ready = supervisor.wake
    # The loops share one stop flag; each actor's interrupt sets it and wakes its own loop.
    # Interrupts run in the order added: health first (no new scans), then the probe (a child in
    # flight is killed, not awaited), the supervisor last (it unregisters from kubelet).
    stop = threading.Event()

    def stop_health() -> None:
        stop.set()
        resources.close()

    group.add(lambda: resources.run(stop), stop_health, name="health")
    if settings.probe_model is not None:
        from .devices import ProbeLoop, ProbeRunner
        from .telemetry import held_cores_asker

        probe = ProbeLoop(
            resources,
            events,
            ProbeRunner(settings.probe_timeout, settings.host_root),
            settings.resolved_probe_model,
            held_cores_asker(settings.pod_resources_socket, settings.resource_name),
            settings.probe_interval,
        )
        probe.begin()  # before serving: no core is offered until its first verdict
        wake_supervisor = resources.on_ready

        def on_ready() -> None:  # an NPU found late: hold its cores back before they are served
            probe.begin()
            wake_supervisor()

        resources.on_ready = on_ready

        def stop_probe() -> None:
            stop.set()
            probe.close()

        group.add(lambda: probe.run(stop), stop_probe, name="probe")

    def stop_supervisor() -> None:
        stop.set()
        supervisor.wake()

    group.add(lambda: supervisor.run(stop), stop_supervisor, name="supervisor")
    try:
        group.run()
    finally:
        _log.info("stopped")
    return 0


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
