"""The DRA services the kubelet calls on the driver's socket, for every API version from one table:
DRAPlugin v1 and v1beta1 (gRPC messages into `ClaimStore` calls and back) and DRAResourceHealth
v1 and v1alpha1 (the `HealthBoard`'s records as a stream), as one `Servicer` for the kit's
`PluginServer` (grpc.aio, as every server of ours)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from types import ModuleType
from typing import Any

import grpc
import grpc.aio

from .._kubeapi.dra.v1 import api_pb2 as v1
from .._kubeapi.dra.v1 import api_pb2_grpc as v1_grpc
from .._kubeapi.dra.v1beta1 import api_pb2 as v1beta1
from .._kubeapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from .._kubeapi.dra_health.v1 import api_pb2 as health_v1
from .._kubeapi.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from .._kubeapi.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from .._kubeapi.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from ..claims import ClaimRef, ClaimStore, PreparedClaim
from ._health import CHECK_TIMEOUT_S, DeviceHealth, HealthBoard

DRA_APIS: tuple[tuple[ModuleType, ModuleType], ...] = ((v1, v1_grpc), (v1beta1, v1beta1_grpc))
"""(messages, services) of each DRAPlugin version served; the messages are alike in each."""
HEALTH_APIS: tuple[tuple[ModuleType, ModuleType], ...] = (
    (health_v1, health_v1_grpc),
    (health_v1alpha1, health_v1alpha1_grpc),
)
"""(messages, services) of each DRAResourceHealth version served."""


class DraServicer:
    """Both services of every version, for a `PluginServer`. Prepare and unprepare are plain
    functions (they write files under the serialize lock), so gRPC runs them on its thread pool;
    the health streams are coroutines on the event loop and hold no thread."""

    def __init__(self, store: ClaimStore, board: HealthBoard) -> None:
        self._store = store
        self._board = board
        self._streams = 0
        self._no_streams = asyncio.Event()

    def add_to(self, server: grpc.aio.Server) -> None:
        for pb, pb_grpc in DRA_APIS:
            pb_grpc.add_DRAPluginServicer_to_server(_DraService(pb, self._store), server)
        for pb, pb_grpc in HEALTH_APIS:
            pb_grpc.add_DRAResourceHealthServicer_to_server(_HealthService(pb, self._board, self), server)

    def stream_opened(self, context: grpc.aio.ServicerContext[Any, Any]) -> None:
        self._streams += 1
        self._no_streams.clear()
        # Counted until the RPC is over (its status sent), not until the generator returns: the
        # server stops only after, so each stream's OK reaches the kubelet before GOAWAY.
        context.add_done_callback(self._stream_done)  # type: ignore[arg-type]

    def _stream_done(self, _context: object) -> None:
        self._streams -= 1
        if self._streams == 0:
            self._no_streams.set()

    async def end_streams(self, timeout: float) -> None:
        """End every health stream with status OK (the board closes) and wait up to ``timeout``
        until each one's status is sent."""
        self._board.close()
        if self._streams:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._no_streams.wait(), timeout)


class _DraService:
    """DRAPlugin of one version (``pb``, its messages)."""

    def __init__(self, pb: ModuleType, store: ClaimStore) -> None:
        self._pb = pb
        self._store = store

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _prepare_answer(self._pb, self._store, request.claims)

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        return _unprepare_answer(self._pb, self._store, request.claims)


class _HealthService:
    """DRAResourceHealth of one version (``pb``, its messages)."""

    def __init__(self, pb: ModuleType, board: HealthBoard, servicer: DraServicer) -> None:
        self._pb = pb
        self._board = board
        self._servicer = servicer

    async def NodeWatchResources(
        self, request: Any, context: grpc.aio.ServicerContext[Any, Any]
    ) -> AsyncIterator[Any]:
        self._servicer.stream_opened(context)
        async for records in self._board.watch():
            yield _health_answer(self._pb, records)


def _prepare_answer(pb: Any, store: ClaimStore, claims: Any) -> Any:
    response = pb.NodePrepareResourcesResponse()
    for claim in claims:
        result = store.prepare(ClaimRef(claim.namespace, claim.name, claim.uid))
        entry = response.claims[claim.uid]
        if result.claim is None:
            entry.error = result.error
        else:
            entry.devices.extend(_devices(pb, result.claim))
    return response


def _devices(pb: Any, prepared: PreparedClaim) -> list[Any]:
    return [
        pb.Device(
            # The base request: the kubelet matches containers by it, never by "req/subrequest".
            request_names=[device.base_request] if device.request else [],
            pool_name=device.pool,
            device_name=device.device,
            cdi_device_ids=[prepared.request_cdi_id(device.request)],
        )
        for device in prepared.devices
    ]


def _unprepare_answer(pb: Any, store: ClaimStore, claims: Any) -> Any:
    response = pb.NodeUnprepareResourcesResponse()
    for claim in claims:
        error = store.unprepare(ClaimRef(claim.namespace, claim.name, claim.uid))
        response.claims[claim.uid].error = error
    return response


def _health_answer(pb: Any, records: list[DeviceHealth]) -> Any:
    return pb.NodeWatchResourcesResponse(
        devices=[
            pb.DeviceHealth(
                device=pb.DeviceIdentifier(pool_name=r.pool, device_name=r.device),
                health=pb.HEALTHY if r.healthy else pb.UNHEALTHY,
                last_updated_time=r.updated,
                health_check_timeout_seconds=CHECK_TIMEOUT_S,
                message=r.message,
            )
            for r in records
        ]
    )
