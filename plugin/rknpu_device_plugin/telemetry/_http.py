"""The device plugin's metrics page: its event counters and the NPU's readings, served by the
kit's `MetricsServer` (with pod attribution through the kubelet's PodResources API)."""

from __future__ import annotations

from collections.abc import Callable

from rknnlaunch.npu import HostRoot, NpuInfo
from rknpu_serverkit import MetricsServer, parse_address

from ._collector import NpuCollector, build_registry
from ._podresources import PodResourcesClient
from ._sink import PluginMetrics

__all__ = ["parse_address", "start_metrics_server"]


def start_metrics_server(
    address: str,
    metrics: PluginMetrics,
    host: HostRoot,
    current_info: Callable[[], NpuInfo | None],
    pod_resources_socket: str,
    resource_name: str,
) -> MetricsServer:
    """Serve the plugin's and the NPU's metrics on ``address`` ("host:port"; ":9101" = all interfaces).

    Returns the running server; calling it stops it (the plugin treats it as ``Callable[[], None]``).
    An empty ``pod_resources_socket`` turns pod attribution off. Raises `UsageError` when the
    address is malformed or cannot be bound.
    """
    client = PodResourcesClient(pod_resources_socket, resource_name) if pod_resources_socket else None
    registry = build_registry(NpuCollector(host, current_info, client), metrics)
    try:
        return MetricsServer(address, registry, on_stop=[client.close] if client is not None else [])
    except BaseException:
        if client is not None:
            client.close()
        raise
