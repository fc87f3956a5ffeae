"""The DevicePlugin gRPC service: turns the resource manager's state and the pure device logic
into kubelet API messages."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import grpc.aio

from rknpu_node import (
    AllocationError,
    ContainerPlan,
    DeviceState,
    Mode,
    PluginEvents,
    ResourceManager,
    check_preferred_request,
    check_request,
    check_shared_request,
    container_plan,
    preferred_allocation,
)
from rknpu_serverkit import quote_ids

from .._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb
from .._log import get_logger
from ._registration import StreamingServicer

_Context = grpc.aio.ServicerContext
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


class _LoopSink:
    """A stream's inbox on the server's event loop; `put` may be called from any thread."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self.queue: asyncio.Queue[DeviceState | None] = asyncio.Queue()

    def put(self, item: DeviceState | None) -> None:
        # FIFO through the loop's ready queue, from the loop's own thread or the health thread.
        with contextlib.suppress(RuntimeError):  # the loop is closed: the stream is gone
            self._loop.call_soon_threadsafe(self.queue.put_nowait, item)


class DevicePluginService(StreamingServicer):
    """The kubelet API, every method a coroutine on the server's event loop: none blocks (state
    is a snapshot under a lock, logging goes through a queue), so no call waits for a thread."""

    def __init__(
        self,
        resources: ResourceManager,
        events: PluginEvents,
        mode: Mode,
        cdi: bool,
        max_replicas_per_request: int | None = None,
    ) -> None:
        self._max_replicas_per_request = max_replicas_per_request if mode == "shared" else None
        self._streams: set[_LoopSink] = set()
        self._no_streams = asyncio.Event()
        self._resources = resources
        self._events = events
        self._mode: Mode = mode
        self.cdi = cdi
        """Return cdi_devices too (set once the CDI spec is written)."""

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: _Context[pb.Empty, pb.DevicePluginOptions]
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    async def ListAndWatch(
        self, request: pb.Empty, context: _Context[pb.Empty, pb.ListAndWatchResponse]
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        # A coroutine on the server's event loop, not a worker thread: any number of open streams
        # leaves Allocate answering (a thread per stream let 16 idle clients starve kubelet).
        sink = _LoopSink(asyncio.get_running_loop())
        self._resources.subscribe(sink)
        self._streams.add(sink)
        # Counted until the RPC is over (status sent), not until this generator returns: the
        # server stops only after, so a stream's OK always reaches the client before GOAWAY.
        context.add_done_callback(lambda _context: self._stream_done(sink))  # type: ignore[arg-type]
        _log.debug("ListAndWatch stream opened")
        try:
            while True:
                state = await sink.queue.get()
                if state is None:
                    return
                yield list_response(state)
        finally:
            self._resources.unsubscribe(sink)
            _log.debug("ListAndWatch stream closed")

    def _stream_done(self, sink: _LoopSink) -> None:
        self._streams.discard(sink)
        if not self._streams:
            self._no_streams.set()

    async def end_streams(self, timeout: float) -> None:
        """End every open ListAndWatch stream with status OK and wait (up to ``timeout``) until
        each one's status is sent. Call on the server's loop before stopping the server."""
        if not self._streams:
            return
        self._no_streams.clear()
        for sink in list(self._streams):
            sink.queue.put_nowait(None)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._no_streams.wait(), timeout)

    async def GetPreferredAllocation(
        self,
        request: pb.PreferredAllocationRequest,
        context: _Context[pb.PreferredAllocationRequest, pb.PreferredAllocationResponse],
    ) -> pb.PreferredAllocationResponse:
        info, state, _compatible = self._resources.snapshot()
        responses = []
        for container in request.container_requests:
            must = list(container.must_include_deviceIDs)
            try:
                check_preferred_request(must, state.ids)
            except AllocationError as exc:
                reason = f"GetPreferredAllocation refused: {exc}"
                _log.error(reason)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, reason)
            if info is None:
                chosen = must  # nothing offered: only an empty must-include gets here
            else:
                chosen = preferred_allocation(
                    info.soc,
                    info.core_count,
                    list(container.available_deviceIDs),
                    must,
                    container.allocation_size,
                    self._mode,
                    offered=state.ids,
                )
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=chosen))
        return pb.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(
        self, request: pb.AllocateRequest, context: _Context[pb.AllocateRequest, pb.AllocateResponse]
    ) -> pb.AllocateResponse:
        info, state, compatible = self._resources.snapshot()
        responses = []
        plans = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            try:
                if info is None:
                    raise AllocationError("no NPU has been discovered on this node")
                check_request(ids, state.ids, state.health)
                check_shared_request(ids, self._max_replicas_per_request)
            except AllocationError as exc:
                reason = f"Allocate refused for {quote_ids(ids) if ids else 'an empty request'}: {exc}"
                _log.error(reason)
                self._events.allocation_failed(str(exc))
                await context.abort(
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

    async def PreStartContainer(
        self,
        request: pb.PreStartContainerRequest,
        context: _Context[pb.PreStartContainerRequest, pb.PreStartContainerResponse],
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
