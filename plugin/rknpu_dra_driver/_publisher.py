"""Publishes this node's ResourceSlice: at start, on every health change (within the change's own
scan, well under 1 s) and again after an API failure, with backoff; deletes it on a clean stop."""

from __future__ import annotations

import threading
from typing import Any, cast

from rknpu_device_plugin.devices import DeviceState, ResourceManager

from ._kube import ApiError, KubeApi
from ._log import get_logger
from ._slices import NodeFacts, slice_body, slice_name

_log = get_logger("slices")
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0


class _Wake:
    """A ListAndWatch-style sink for the ResourceManager: ``put`` never blocks, it only wakes us."""

    def __init__(self, wake: threading.Event) -> None:
        self._wake = wake

    def put(self, item: DeviceState | None) -> None:
        self._wake.set()


class SlicePublisher:
    """Keeps the API server's slice of (node, driver) equal to what the ResourceManager sees."""

    def __init__(
        self, api: KubeApi, resources: ResourceManager, node_name: str, driver_name: str, facts: NodeFacts
    ) -> None:
        self._api = api
        self._resources = resources
        self.node_name = node_name
        self.driver_name = driver_name
        self._facts = facts
        self._wake = threading.Event()
        self._node_uid: str | None = None
        self._generation = 0
        self._published: dict[str, Any] | None = None
        self.publishes = 0
        """How many slice writes succeeded (tests and the benchmark await it)."""
        self.published = threading.Condition()

    def run(self, stop: threading.Event) -> None:
        sink = self._resources.subscribe(_Wake(self._wake))
        delay = RETRY_FIRST_S
        failing = False
        try:
            while not stop.is_set():
                # After a failure, retry after ``delay``, or at once when something changes (health,
                # the API client becoming ready).
                self._wake.wait(delay if failing else None)
                self._wake.clear()
                if stop.is_set():
                    break
                try:
                    self.publish()
                except ApiError as exc:
                    if not failing:
                        _log.error(
                            "cannot publish the ResourceSlice; retrying",
                            extra={"fields": {"error": str(exc)}},
                        )
                    else:
                        delay = min(delay * 2, RETRY_MAX_S)
                    failing = True
                    continue
                if failing:
                    _log.info("ResourceSlice published again after API errors")
                failing, delay = False, RETRY_FIRST_S
        finally:
            self._resources.unsubscribe(sink)

    def wake(self) -> None:
        self._wake.set()

    def publish(self) -> bool:
        """Make the API server's slice match the current devices; True if anything was written."""
        info, state, _compatible = self._resources.snapshot()
        if info is None:
            return False  # nothing to offer yet; the ResourceManager wakes us when an NPU appears
        if self._node_uid is None:
            node = self._api.get_node(self.node_name)
            self._node_uid = ((node or {}).get("metadata") or {}).get("uid")
        existing = self._api.list_slices(self.node_name, self.driver_name)
        name = slice_name(self.node_name, self.driver_name)
        current = next((s for s in existing if (s.get("metadata") or {}).get("name") == name), None)
        for stale in existing:
            if stale is not current:
                self._api.delete_slice(stale["metadata"]["name"])
        generations = [((s.get("spec") or {}).get("pool") or {}).get("generation", 0) for s in existing]
        self._generation = max([self._generation, *(g for g in generations if isinstance(g, int))])
        body = slice_body(
            self.node_name,
            self.driver_name,
            self._generation,
            info,
            state.health,
            self._facts,
            self._node_uid,
        )
        if current is not None and _same_devices(current, body):
            return False
        self._generation += 1
        body = slice_body(
            self.node_name,
            self.driver_name,
            self._generation,
            info,
            state.health,
            self._facts,
            self._node_uid,
        )
        if current is None:
            self._published = self._api.create_slice(body)
        else:
            metadata = cast("dict[str, Any]", body["metadata"])
            metadata["resourceVersion"] = current["metadata"].get("resourceVersion")
            self._published = self._api.replace_slice(name, body)
        devices = [d["name"] for d in body["spec"]["devices"]]  # type: ignore[index]
        _log.info(
            "ResourceSlice published",
            extra={"fields": {"slice": name, "generation": self._generation, "devices": devices}},
        )
        with self.published:
            self.publishes += 1
            self.published.notify_all()
        return True

    def delete_all(self) -> None:
        """Remove our slices (clean shutdown); API errors are logged, the kubelet also removes them."""
        try:
            for existing in self._api.list_slices(self.node_name, self.driver_name):
                self._api.delete_slice(existing["metadata"]["name"])
        except ApiError as exc:
            _log.warning("cannot delete the ResourceSlice on stop", extra={"fields": {"error": str(exc)}})
            return
        _log.info("ResourceSlice deleted")


def _same_devices(current: dict[str, Any], body: dict[str, object]) -> bool:
    spec = current.get("spec") or {}
    wanted = cast("dict[str, Any]", body["spec"])
    return bool(
        spec.get("devices") == wanted["devices"] and (spec.get("pool") or {}).get("resourceSliceCount") == 1
    )
