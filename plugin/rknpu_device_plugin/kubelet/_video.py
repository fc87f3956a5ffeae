"""The second DevicePlugin service, for the video blocks (`rockchip.com/vpu`): a fixed set of
shareable devices that all hand in the same decoder, RGA and DMA-heap nodes, and no NPU env."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import grpc
import grpc.aio

from rknpu_node import VideoBlocks, interchangeable_allocation
from rknpu_serverkit import quote_ids

from .._kubeapi.deviceplugin.v1beta1 import api_pb2 as pb
from .._log import get_logger
from ._registration import StreamingServicer
from ._service import HEALTHY

_Context = grpc.aio.ServicerContext

_log = get_logger("service")


def video_container_response(blocks: VideoBlocks) -> pb.ContainerAllocateResponse:
    """Exactly the video device nodes, read-write, at their host paths (MPP and librga open these
    names); no env: which replica a pod holds means nothing to it."""
    return pb.ContainerAllocateResponse(
        devices=[pb.DeviceSpec(container_path=p, host_path=p, permissions="rw") for p in blocks.device_paths]
    )


class VideoPluginService(StreamingServicer):
    """ListAndWatch sends the replicas once (the nodes are found at start); Allocate hands in the
    video nodes for any offered IDs. Every method a coroutine on the server's event loop."""

    def __init__(self, blocks: VideoBlocks, ids: tuple[str, ...]) -> None:
        self._blocks = blocks
        self._ids = ids
        self._ends: set[asyncio.Event] = set()
        self._no_streams = asyncio.Event()

    async def GetDevicePluginOptions(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[pb.Empty, pb.DevicePluginOptions]
    ) -> pb.DevicePluginOptions:
        return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)

    async def ListAndWatch(
        self, request: pb.Empty, context: grpc.aio.ServicerContext[pb.Empty, pb.ListAndWatchResponse]
    ) -> AsyncIterator[pb.ListAndWatchResponse]:
        end = asyncio.Event()
        self._ends.add(end)
        context.add_done_callback(lambda _context: self._stream_done(end))  # type: ignore[arg-type]
        yield pb.ListAndWatchResponse(devices=[pb.Device(ID=i, health=HEALTHY) for i in self._ids])
        await end.wait()

    def _stream_done(self, end: asyncio.Event) -> None:
        self._ends.discard(end)
        if not self._ends:
            self._no_streams.set()

    async def end_streams(self, timeout: float) -> None:
        if not self._ends:
            return
        self._no_streams.clear()
        for end in list(self._ends):
            end.set()
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._no_streams.wait(), timeout)

    async def GetPreferredAllocation(
        self,
        request: pb.PreferredAllocationRequest,
        context: grpc.aio.ServicerContext[pb.PreferredAllocationRequest, pb.PreferredAllocationResponse],
    ) -> pb.PreferredAllocationResponse:
        # Every replica is the same hardware: the must-include IDs, then the first available ones.
        responses = [
            pb.ContainerPreferredAllocationResponse(
                deviceIDs=interchangeable_allocation(
                    container.available_deviceIDs, container.must_include_deviceIDs, container.allocation_size
                )
            )
            for container in request.container_requests
        ]
        return pb.PreferredAllocationResponse(container_responses=responses)

    async def Allocate(
        self,
        request: pb.AllocateRequest,
        context: grpc.aio.ServicerContext[pb.AllocateRequest, pb.AllocateResponse],
    ) -> pb.AllocateResponse:
        responses = []
        for container in request.container_requests:
            ids = list(container.devices_ids)
            unknown = [i for i in ids if i not in self._ids]
            if not ids or unknown:
                reason = (
                    f"Allocate refused for {quote_ids(ids) if ids else 'an empty request'}: "
                    f"{'unknown IDs ' + quote_ids(unknown) if unknown else 'no IDs'}; request "
                    "rockchip.com/vpu as a whole number of replicas"
                )
                _log.error(reason)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, reason)
            responses.append(video_container_response(self._blocks))
            _log.info("allocated video blocks", extra={"fields": {"ids": ids}})
        return pb.AllocateResponse(container_responses=responses)

    async def PreStartContainer(
        self,
        request: pb.PreStartContainerRequest,
        context: grpc.aio.ServicerContext[pb.PreStartContainerRequest, pb.PreStartContainerResponse],
    ) -> pb.PreStartContainerResponse:
        return pb.PreStartContainerResponse()
