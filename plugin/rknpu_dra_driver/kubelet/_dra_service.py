"""The DRA services the kubelet calls on the driver's socket, for every API version from one table:
DRAPlugin v1 and v1beta1 (gRPC messages into `ClaimStore` calls and back) and DRAResourceHealth
v1 and v1alpha1 (the `HealthBoard`'s records as a stream)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import grpc

from .._kubeapi.dra.v1 import api_pb2 as v1
from .._kubeapi.dra.v1 import api_pb2_grpc as v1_grpc
from .._kubeapi.dra.v1beta1 import api_pb2 as v1beta1
from .._kubeapi.dra.v1beta1 import api_pb2_grpc as v1beta1_grpc
from .._kubeapi.dra_health.v1 import api_pb2 as health_v1
from .._kubeapi.dra_health.v1 import api_pb2_grpc as health_v1_grpc
from .._kubeapi.dra_health.v1alpha1 import api_pb2 as health_v1alpha1
from .._kubeapi.dra_health.v1alpha1 import api_pb2_grpc as health_v1alpha1_grpc
from ..claims import ClaimRef, ClaimStore, PreparedClaim
from ._health import CHECK_TIMEOUT_S, HealthBoard

DRA_APIS: tuple[tuple[ModuleType, ModuleType], ...] = ((v1, v1_grpc), (v1beta1, v1beta1_grpc))
"""(messages, services) of each DRAPlugin version served; the messages are alike in each."""
HEALTH_APIS: tuple[tuple[ModuleType, ModuleType], ...] = (
    (health_v1, health_v1_grpc),
    (health_v1alpha1, health_v1alpha1_grpc),
)
"""(messages, services) of each DRAResourceHealth version served."""


def add_dra_services(server: Any, store: ClaimStore, board: HealthBoard) -> None:
    """Every version of both services, on ``server``."""
    for pb, pb_grpc in DRA_APIS:
        pb_grpc.add_DRAPluginServicer_to_server(_DraService(pb, store), server)
    for pb, pb_grpc in HEALTH_APIS:
        pb_grpc.add_DRAResourceHealthServicer_to_server(_HealthService(pb, board), server)


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

    def __init__(self, pb: ModuleType, board: HealthBoard) -> None:
        self._pb = pb
        self._board = board

    def NodeWatchResources(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        return _health_answer(self._pb, self._board, context)


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


def _health_answer(pb: Any, board: HealthBoard, context: grpc.ServicerContext) -> Iterator[Any]:
    ended = threading.Event()
    context.add_callback(ended.set)  # the kubelet hung up
    for records in board.follow(ended):
        yield pb.NodeWatchResourcesResponse(
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
