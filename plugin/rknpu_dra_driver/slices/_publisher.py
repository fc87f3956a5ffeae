"""Keeps this node's ResourceSlices true: publishes the pool at start and on every health change,
watches the driver's own slices and repairs any that someone else deleted or edited, republishes
the true state after an API outage, and leaves the slices in place on a clean stop (the next
instance, or the kubelet's wipe after an uninstall, takes over).

Overlapping devices are never stored without their counters: until the API server has shown it
keeps the partitionable fields, each write is first made with ``dryRun=All`` and read (a server
without DRAPartitionableDevices drops them silently, and the scheduler would double-book cores
until the next write). Layout "auto" then falls back to one device per core (as it does on a
server of unknown version); an explicit ``--slice-layout partitionable`` stores nothing and stops
the driver with one error line, as does a server without resource.k8s.io/v1 (Kubernetes < 1.34)."""

from __future__ import annotations

import collections
import copy
import threading
from collections.abc import Mapping
from typing import Any, cast

from rknpu_node import DeviceState, ResourceManager

from .._log import get_logger
from .._metrics import DraMetrics
from .._settings import DEFAULT_MAX_SHARES
from ..apiserver import ApiError, KubeApi
from ._desired import NodeFacts, desired_slices, fields_dropped, shared_fields_dropped
from ._layout import chosen_layout, gate_off_error, tainted, taints_kept, too_old_error

_log = get_logger("slices")
RESOURCE_V1_FROM_MINOR = 34
"""resource.k8s.io/v1 (DRA GA) is served from Kubernetes 1.34."""
RETRY_FIRST_S = 0.2
RETRY_MAX_S = 5.0
RESYNC_S = 60.0
"""A full comparison even without events: the safety net under the watch."""
WATCH_SECONDS = 300
OURS_KEPT = 64
WATCH_END_S = 0.5
"""Stopping: how long the loop waits for its watch thread, whose stream is cut by then."""
"""How many of our own writes' resourceVersions are remembered (their events are echoes)."""


class _Wake:
    """A ListAndWatch-style sink for the ResourceManager: ``put`` never blocks, it only wakes us."""

    def __init__(self, wake: threading.Event) -> None:
        self._wake = wake

    def put(self, item: DeviceState | None) -> None:
        self._wake.set()


def _comparable(obj: dict[str, Any]) -> dict[str, Any]:
    """What must match for a slice to be ours as we want it: the spec without the generation."""
    spec = copy.deepcopy(obj.get("spec") or {})
    pool = spec.get("pool")
    if isinstance(pool, dict):
        pool.pop("generation", None)
    return cast("dict[str, Any]", spec)


class SlicePublisher:
    """Makes the API server's slices of (node, driver) equal to what the ResourceManager sees."""

    def __init__(
        self,
        api: KubeApi,
        resources: ResourceManager,
        node_name: str,
        driver_name: str,
        facts: NodeFacts,
        *,
        layout: str = "auto",
        server_minor: int | None = None,
        metrics: DraMetrics | None = None,
        max_shares: int = DEFAULT_MAX_SHARES,
    ) -> None:
        self._api = api
        self._resources = resources
        self.node_name = node_name
        self.driver_name = driver_name
        self._facts = facts
        self._layout = layout
        self._auto = layout == "auto"
        self.max_shares = max_shares
        self._server_minor = server_minor
        self._minor_known = server_minor is not None
        self._confirmed = False
        """A dry run showed the server keeps the partitionable fields."""
        self._metrics = metrics if metrics is not None else DraMetrics(None)
        self.taint_key = f"{driver_name}/unhealthy"
        self._taints = True
        """Until a read-back shows the API server drops device taints."""
        self._wake = threading.Event()
        self._threads: tuple[threading.Thread, ...] = ()
        self._node_uid: str | None = None
        self._generation = 0
        self._kept: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        """Slice name -> (what we sent, what the server kept of it), both `_comparable`."""
        self._ours: collections.deque[str] = collections.deque(maxlen=OURS_KEPT)
        """resourceVersions of our own writes: their watch events need no comparison."""
        self.in_sync = threading.Event()
        """Set once the API server held our slices (written by us, or already matching: a new pod
        of a rolling update finds its predecessor's); the readiness endpoint waits for it."""

    # --- loops ----------------------------------------------------------------------------------

    def run(self, stop: threading.Event) -> None:
        """Publish on every wake (health, a watch event, the client ready), retry failures with
        backoff, and compare everything every RESYNC_S; the watch runs on a thread of its own."""
        sink = self._resources.subscribe(_Wake(self._wake))
        watcher = threading.Thread(target=self._watch, args=(stop,), name="slice-watch", daemon=True)
        self._threads = (threading.current_thread(), watcher)
        watcher.start()
        delay = RETRY_FIRST_S
        failing = False
        try:
            while not stop.is_set():
                self._wake.wait(delay if failing else RESYNC_S)
                self._wake.clear()
                if stop.is_set():
                    break
                try:
                    self.publish()
                except ApiError as exc:
                    if stop.is_set():  # a stop cut the call (`stop_calls`)
                        break
                    self._metrics.api_error("publish")
                    if not failing:
                        _log.error(
                            "cannot publish the ResourceSlices; retrying",
                            extra={"fields": {"error": str(exc)}},
                        )
                    else:
                        delay = min(delay * 2, RETRY_MAX_S)
                    failing = True
                    continue
                if failing:
                    _log.info("ResourceSlices published again after API errors")
                failing, delay = False, RETRY_FIRST_S
        finally:
            self._resources.unsubscribe(sink)
            self._api.end_watches()
            watcher.join(WATCH_END_S)

    def _watch(self, stop: threading.Event) -> None:
        """Watch our slices; any change not of our own making wakes the publisher. A broken watch
        is re-opened with backoff, and its first events (the current slices) resync everything."""
        delay = RETRY_FIRST_S
        while not stop.is_set():
            try:
                for kind, obj in self._api.watch_slices(self.node_name, self.driver_name, WATCH_SECONDS):
                    delay = RETRY_FIRST_S
                    if stop.is_set():
                        return
                    version = (obj.get("metadata") or {}).get("resourceVersion")
                    if kind == "BOOKMARK" or (kind != "DELETED" and version in self._ours):
                        continue
                    self._wake.set()
            except ApiError as exc:
                if stop.is_set():
                    return
                self._metrics.api_error("watch")
                _log.debug("slice watch broke; re-opening", extra={"fields": {"error": str(exc)}})
                self._wake.set()  # after an outage: publish the true state as soon as the API answers
                stop.wait(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    def wake(self) -> None:
        self._wake.set()

    def stop_calls(self) -> None:
        """Stopping: the API calls the loop and its watch wait on fail now, and so do their later
        ones (a slow API server must not hold the loop past its stop budget)."""
        self._api.stop_calls_of(*self._threads)

    # --- one pass -------------------------------------------------------------------------------

    def _layout_slices(self, info: Any, health: Any) -> list[dict[str, Any]]:
        layout = chosen_layout(self._layout, self._server_minor)
        wanted = desired_slices(
            self.node_name,
            self.driver_name,
            self._generation,
            info,
            health,
            self._facts,
            self._node_uid,
            layout,
            server_minor=self._server_minor,
            max_shares=self.max_shares,
        )
        return cast("list[dict[str, Any]]", wanted)

    def _desired(self, info: Any, health: Mapping[str, bool]) -> list[dict[str, Any]]:
        """The pool for this health. Where the API server keeps device taints (KEP-5055), an
        unhealthy core's devices stay in the slice with a NoSchedule taint (users see why; a
        DeviceTaintRule or toleration can act on it); where it drops them, they leave the slice."""
        offered = self._layout_slices(info, health)
        if not self._taints or all(health.values()):
            return offered
        return tainted(self._layout_slices(info, dict.fromkeys(health, True)), offered, self.taint_key)

    def _matches(self, current: dict[str, Any] | None, wanted: dict[str, Any]) -> bool:
        if current is None:
            return False
        have, want = _comparable(current), _comparable(wanted)
        if have == want:
            return True
        kept = self._kept.get(wanted["metadata"]["name"])
        return kept is not None and kept[0] == want and kept[1] == have

    def publish(self) -> bool:
        """Make the API server's slices match the current devices; True if anything was written."""
        info, state, _compatible = self._resources.snapshot()
        if info is None:
            return False  # nothing to offer yet; the ResourceManager wakes us when an NPU appears
        if not self._minor_known:
            # Asked until told (a failed /version is None): meanwhile "auto" offers per-core.
            self._server_minor = self._api.server_minor()
            self._minor_known = self._server_minor is not None
            if self._server_minor is not None and self._server_minor < RESOURCE_V1_FROM_MINOR:
                raise too_old_error(self._server_minor)
        if self._node_uid is None:
            node = self._api.get_node(self.node_name)
            self._node_uid = ((node or {}).get("metadata") or {}).get("uid")
        try:
            listed = self._api.list_slices(self.node_name, self.driver_name)
        except ApiError as exc:
            if exc.status == 404:  # the collection itself is missing: no resource.k8s.io/v1
                raise too_old_error(self._server_minor) from None
            raise
        existing = {str((s.get("metadata") or {}).get("name")): s for s in listed}
        generations = [
            ((s.get("spec") or {}).get("pool") or {}).get("generation", 0) for s in existing.values()
        ]
        self._generation = max([self._generation, *(g for g in generations if isinstance(g, int))])
        wanted = self._desired(info, state.health)
        if self._unconfirmed(wanted) and self._dry_run_drops(wanted, existing):
            wanted = self._desired(info, state.health)  # per-core now
        names = {w["metadata"]["name"] for w in wanted}
        stale = [name for name in existing if name not in names]
        if not stale and all(self._matches(existing.get(w["metadata"]["name"]), w) for w in wanted):
            self.in_sync.set()
            return False
        # Something differs: write the whole pool at a new generation (a consumer then never mixes
        # slices of two generations).
        repaired = [
            w["metadata"]["name"]
            for w in wanted
            if self._sent_before(w["metadata"]["name"])
            and not self._matches(existing.get(w["metadata"]["name"]), w)
        ]
        self._generation += 1
        wanted = self._desired(info, state.health)
        for body in wanted:
            name = body["metadata"]["name"]
            current = existing.get(name)
            if current is None:
                kept = self._api.create_slice(body)
            else:
                body["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
                kept = self._api.replace_slice(name, body)
            self._ours.append(str((kept.get("metadata") or {}).get("resourceVersion")))
            self._kept[name] = (_comparable(body), _comparable(kept))
            if self._dropped(body, kept):
                return True
            if self._taints_dropped(body, kept):
                return True
        for name in stale:
            self._api.delete_slice(name)
        devices = [d.get("name") for w in wanted for d in (w.get("spec") or {}).get("devices") or []]
        _log.info(
            "ResourceSlices repaired" if repaired else "ResourceSlices published",
            extra={
                "fields": {
                    "slices": sorted(names),
                    "generation": self._generation,
                    "devices": devices,
                    **({"repaired": repaired} if repaired else {}),
                }
            },
        )
        self._metrics.slice_published(repaired=bool(repaired))
        self.in_sync.set()
        return True

    def _sent_before(self, name: str) -> bool:
        return name in self._kept

    def _unconfirmed(self, wanted: list[dict[str, Any]]) -> bool:
        """About to offer partitionable devices the server has not yet been seen to keep (layout
        "auto" or an explicit "partitionable": either must never store them without counters)."""
        if self._layout == "per-core" or self._confirmed:
            return False
        # {} "drops" whatever body carries
        return any(fields_dropped(body, {}) or shared_fields_dropped(body, {}) for body in wanted)

    def _dry_run_drops(self, wanted: list[dict[str, Any]], existing: Mapping[str, dict[str, Any]]) -> bool:
        """Create/replace every slice with ``dryRun=All`` and read the answers: True (and per-core
        from now on) when the server would drop the partitionable fields; else they are confirmed.
        Nothing is stored, so the overlapping devices never exist without their counters. The
        explicit layout "partitionable" has no fallback: the driver stops (`gate_off_error`)."""
        for body in wanted:
            name = body["metadata"]["name"]
            current = existing.get(name)
            trial = copy.deepcopy(body)
            if current is None:
                kept = self._api.create_slice(trial, dry_run=True)
            else:
                trial["metadata"]["resourceVersion"] = (current.get("metadata") or {}).get("resourceVersion")
                kept = self._api.replace_slice(name, trial, dry_run=True)
            if self._dropped(body, kept, dry_run=True):
                return True
        self._confirmed = True
        _log.debug("the API server keeps the %s fields (dry run)", self._feature())
        return False

    def _feature(self) -> str:
        return "consumable-capacity" if self._layout == "shared" else "partitionable-device"

    def _dropped(self, sent: dict[str, Any], kept: dict[str, Any], *, dry_run: bool = False) -> bool:
        """The server dropped the partitionable fields: layout "auto" -> per-core for good; the
        explicit "partitionable" (no fallback) -> the driver stops; "shared": `_shares_dropped`."""
        if self._layout == "shared":
            return self._shares_dropped(sent, kept, dry_run=dry_run)
        if self._layout == "per-core" or not fields_dropped(sent, kept):
            return False
        if not self._auto:
            self._metrics.api_error("publish")
            if not dry_run:
                # Stored (the server changed since the dry run): take the uncountered devices away.
                try:
                    self._api.delete_slice(sent["metadata"]["name"])
                except ApiError as exc:
                    _log.warning(
                        "cannot delete the slice stored without its counters",
                        extra={"fields": {"slice": sent["metadata"]["name"], "error": str(exc)}},
                    )
            raise gate_off_error()
        return self._per_core_from_now_on(
            "the API server dropped the partitionable-device fields (feature gate "
            "DRAPartitionableDevices off?); publishing one device per core from now on",
            sent,
            dry_run=dry_run,
        )

    def _shares_dropped(self, sent: dict[str, Any], kept: dict[str, Any], *, dry_run: bool) -> bool:
        """Layout "shared" on a server without DRAConsumableCapacity: one device per core from now
        on (what the server would store anyway, minus the capacity no claim could use), said once.
        Safe either way: without allowMultipleAllocations each core is one claim's."""
        if not shared_fields_dropped(sent, kept):
            return False
        return self._per_core_from_now_on(
            "--slice-layout shared: the API server dropped allowMultipleAllocations / the shares' "
            "requestPolicy (feature gate DRAConsumableCapacity off; on by default from Kubernetes "
            "1.36); publishing one device per core from now on: share a core through one "
            "ResourceClaim named by every pod (deploy/dra/samples/shared-core.yaml)",
            sent,
            dry_run=dry_run,
        )

    def _per_core_from_now_on(self, warning: str, sent: dict[str, Any], *, dry_run: bool) -> bool:
        """The server dropped a layout's fields: ``warning``, then one device per core from now on."""
        _log.warning(warning, extra={"fields": {"slice": sent["metadata"]["name"]}})
        self._layout = "per-core"
        self._kept.clear()
        if not dry_run:
            self._wake.set()  # republish in the new layout at once
        return True

    def _taints_dropped(self, sent: dict[str, Any], kept: dict[str, Any]) -> bool:
        """Read-back: a tainted device came back without its taints (DRADeviceTaints off) ->
        unhealthy devices leave the slice from now on."""
        if taints_kept(sent, kept):
            return False
        _log.warning(
            "the API server dropped the device taints (feature gate DRADeviceTaints off?); "
            "unhealthy cores leave the slice instead",
            extra={"fields": {"slice": sent["metadata"]["name"]}},
        )
        self._taints = False
        self._kept.clear()
        self._wake.set()
        return True

    def delete_all(self) -> None:
        """Remove our slices (--delete-slices-on-stop: an uninstall); API errors are logged."""
        try:
            for existing in self._api.list_slices(self.node_name, self.driver_name):
                self._api.delete_slice(existing["metadata"]["name"])
        except ApiError as exc:
            _log.warning("cannot delete the ResourceSlices on stop", extra={"fields": {"error": str(exc)}})
            return
        _log.info("ResourceSlices deleted")
