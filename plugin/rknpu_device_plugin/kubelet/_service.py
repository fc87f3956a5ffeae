"""The DevicePlugin gRPC service: turns the resource manager's state and the pure device logic
into kubelet API messages."""

from __future__ import annotations

from collections.abc import Iterator

import grpc

from .._events import PluginEvents
from .._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb
from .._kubeapi.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from .._log import get_logger
from ..devices._manager import DeviceState, ResourceManager
from ..devices._policy import (
    AllocationError,
    ContainerPlan,
    Mode,
    check_request,
    container_plan,
    preferred_allocation,
)

HEALTHY = "Healthy"
UNHEALTHY = "Unhealthy"

_log = get_logger("service")


def list_response(state: DeviceState) -> pb.ListAndWatchResponse:
    return pb.ListAndWatchResponse(
        devices=[pb.Device(ID=i, health=HEALTHY if ok else UNHEALTHY) for i, ok in state.devices()]
    )


def container_response(plan: ContainerPlan) -> pb.ContainerAllocateResponse:
    return pb.ContainerAllocateResponse(
        envs=dict(plan.envs),
        devices=[
            pb.DeviceSpec(container_path=d.container_path, host_path=d.host_path, permissions=d.permissions)
            for d in plan.devices
        ],
        mounts=[
            pb.Mount(container_path=m.container_path, host_path=m.host_path, read_only=m.read_only)
            for m in plan.mounts
        ],
        cdi_devices=[pb.CDIDevice(name=name) for name in plan.cdi_devices],
    )


class DevicePluginService(pb_grpc.DevicePluginServicer):
    def __init__(self, resources: ResourceManager, events: PluginEvents, mode: Mode, cdi: bool) -> None:
        self._resources = resources
        self._events = events
        self._mode: Mode = mode
        self.cdi = cdi
        """Return cdi_devices too (set once the CDI spec is written)."""

    def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    def ListAndWatch(
        self, request: pb.Empty, context: grpc.ServicerContext
    ) -> Iterator[pb.ListAndWatchResponse]:
        subscription = self._resources.subscribe()
        # When kubelet goes away or our server stops, wake this stream's thread so it ends.
        context.add_callback(lambda: subscription.put(None))
        _log.debug("ListAndWatch stream opened")
        try:
            while True:
                state = subscription.get()
                if state is None or not context.is_active():
                    return
                yield list_response(state)
        finally:
            self._resources.unsubscribe(subscription)
            _log.debug("ListAndWatch stream closed")

    def GetPreferredAllocation(
        self, request: pb.PreferredAllocationRequest, context: grpc.ServicerContext
    ) -> pb.PreferredAllocationResponse:
        info = self._resources.info
        responses = []
        for container in request.container_requests:
            if info is None:
                chosen = list(container.must_include_deviceIDs)
            else:
                chosen = preferred_allocation(
                    info.soc,
                    info.core_count,
                    list(container.available_deviceIDs),
                    list(container.must_include_deviceIDs),
                    container.allocation_size,
                    self._mode,
                )
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: pb.AllocateRequest, context: grpc.ServicerContext) -> pb.AllocateResponse:
        info, state, compatible = self._resources.snapshot()
        responses = []
        plans = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            try:
                if info is None:
                    raise AllocationError("no NPU has been discovered on this node")
                check_request(ids, state.ids, state.health)
            except AllocationError as exc:
                reason = f"Allocate refused for {', '.join(ids) or 'an empty request'}: {exc}"
                _log.error(reason)
                self._events.allocation_failed(str(exc))
                context.abort(
                    grpc.StatusCode.FAILED_PRECONDITION
                    if exc.unhealthy
                    else grpc.StatusCode.INVALID_ARGUMENT,
                    reason,
                )
            plan = container_plan(info, ids, compatible, cdi=self.cdi, extras=self._resources.extras)
            plans.append(plan)
            responses.append(container_response(plan))
        for plan in plans:
            _log.info(
                "allocated",
                extra={
                    "fields": {"ids": list(plan.device_ids), "mask": plan.mask, "cores": sorted(plan.cores)}
                },
            )
            self._events.allocated(plan.device_ids, plan.mask)
        return pb.AllocateResponse(container_responses=responses)

    def PreStartContainer(
        self, request: pb.PreStartContainerRequest, context: grpc.ServicerContext
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
