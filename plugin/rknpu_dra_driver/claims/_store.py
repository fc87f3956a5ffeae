"""Prepared claims: prepare and unprepare (idempotent) and an earlier boot's stale claims dropped.

A claim shared by pods is prepared once. No state lives between calls outside the checkpoint
(`_ledger`): each call takes the node's serialize lock (every instance of a rolling update shares
it), reads the checkpoint, acts and writes it back, so a claim prepared by one instance is
unprepared by the other (a new claim's API read happens between two holds of the lock). A prepare
writes the per-claim CDI spec and the checkpoint atomically, neither fsynced (why that is enough:
`_checkpoint`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rknpu_node import ResourceManager

from .._log import get_logger
from .._metrics import DraMetrics
from .._settings import DEFAULT_MAX_SHARES
from ..apiserver import ApiError, KubeApi
from ..slices import VIDEO_DEVICE, NodeFacts, all_offered_devices
from ._booking import conflicting_holders, conflicts
from ._cdi import (
    cdi_device_id,
    claim_spec,
    remove_claim_spec,
    spec_path,
    valid_uid,
    write_claim_spec,
)
from ._checkpoint import CHECKPOINT_NAME, Entry
from ._claim import ClaimError, ClaimRef, PreparedClaim, our_devices, pod_claim_name, stale_reason
from ._ledger import Ledger
from ._metadata import metadata_paths, remove_metadata, request_metadata, write_metadata
from ._serialize import SerializeLock

_log = get_logger("claims")


@dataclass(frozen=True)
class PrepareResult:
    """One claim's answer: its prepared record, or the error the kubelet gets for it."""

    claim: PreparedClaim | None = None
    error: str = ""


class ClaimStore:
    """Owns the prepared claims of this node: the checkpoint, the CDI specs and the lock around them."""

    def __init__(
        self,
        api: KubeApi,
        resources: ResourceManager,
        driver_name: str,
        node_name: str,
        plugin_dir: Path,
        cdi_dir: Path,
        *,
        boot_id: str = "",
        metrics: DraMetrics | None = None,
        facts: NodeFacts | None = None,
        max_shares: int = DEFAULT_MAX_SHARES,
    ) -> None:
        self._api = api
        self._resources = resources
        self.driver_name = driver_name
        self.node_name = node_name
        self.plugin_dir = plugin_dir
        """Also the metadata files' root (``<plugin dir>/dra-device-metadata/``, the library's place)."""
        self._facts = facts if facts is not None else NodeFacts()
        self.max_shares = max_shares
        """A shared core's ``shares`` capacity (``--max-shares``): prepare never books more."""
        self.checkpoint_path = plugin_dir / CHECKPOINT_NAME
        self.cdi_dir = cdi_dir
        self.boot_id = boot_id
        self._metrics = metrics if metrics is not None else DraMetrics(None)
        self._lock = SerializeLock(plugin_dir)
        self._ledger = Ledger(self.checkpoint_path, cdi_dir, driver_name, boot_id)
        self.before_checkpoint: Callable[[str], None] = lambda uid: None
        """Test hook: called between writing a claim's spec and its checkpoint entry."""

    @property
    def claims(self) -> dict[str, PreparedClaim]:
        with self._lock.held():
            return {uid: entry.claim for uid, entry in self._ledger.read().items()}

    def load(self) -> None:
        """At start: the checkpoint recovered (`Ledger.recover`), and how many claims it holds logged."""
        with self._lock.held():
            entries = self._ledger.recover()
            earlier = sum(1 for entry in entries.values() if entry.boot_id != self.boot_id)
        _log.info(
            "prepared claims loaded",
            extra={"fields": {"claims": len(entries), "from_an_earlier_boot": earlier}},
        )

    def count(self) -> int:
        """Prepared claims now (the metrics gauge; no lock: a torn read counts as the last good)."""
        return self._ledger.count()

    def clean_stale(self) -> int:
        """Drop the claims of an earlier boot that no longer hold their cores on the API server
        (`stale_reason`: the kubelet will never unprepare those); how many of an earlier boot
        remain. Raises ApiError (the caller retries later)."""
        with self._lock.held():
            entries = self._ledger.read()
        earlier = [entry.claim for entry in entries.values() if entry.boot_id != self.boot_id]
        remaining = len(earlier)
        for claim in earlier:
            reason = self._stale_on_api(claim)  # the API read outside the lock: prepares go on
            if reason is None:
                continue
            with self._lock.held():
                entries = self._ledger.read()
                if self._drop_earlier(entries, claim.ref.uid, reason):
                    self._ledger.save(entries)
            remaining -= 1
        return remaining

    def _stale_on_api(self, claim: PreparedClaim) -> str | None:
        """`stale_reason` for ``claim`` from the API server's copy. Raises ApiError."""
        try:
            found = self._api.get_claim(claim.ref.namespace, claim.ref.name)
        except ApiError:
            self._metrics.api_error("get_claim")
            raise
        return stale_reason(claim.ref, found, self.driver_name, self.node_name)

    def _drop_earlier(self, entries: dict[str, Entry], uid: str, reason: str) -> bool:
        """Remove an earlier boot's entry and its spec from ``entries`` (the caller holds the lock
        and saves); False when it was unprepared, or prepared again in this boot, meanwhile."""
        entry = entries.get(uid)
        if entry is None or entry.boot_id == self.boot_id:
            return False
        del entries[uid]
        remove_claim_spec(spec_path(self.cdi_dir, self.driver_name, uid))
        remove_metadata(self.plugin_dir, entry.claim.ref)
        _log.info(
            "stale claim of an earlier boot removed",
            extra={"fields": {"claim": entry.claim.ref.describe(), "reason": reason}},
        )
        return True

    # --- prepare --------------------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> PrepareResult:
        began = time.perf_counter()
        try:
            result = PrepareResult(self._prepare(ref))
        except ClaimError as exc:
            _log.error("prepare failed", extra={"fields": {"claim": ref.describe(), "error": str(exc)}})
            result = PrepareResult(error=str(exc))
        except OSError as exc:  # the lock or the checkpoint's folder
            result = PrepareResult(error=f"{ref.describe()}: cannot prepare: {exc}")
            _log.error("prepare failed", extra={"fields": {"claim": ref.describe(), "error": result.error}})
        self._metrics.request("prepare", time.perf_counter() - began, result.error)
        return result

    def _prepare(self, ref: ClaimRef) -> PreparedClaim:
        if not valid_uid(ref.uid):
            raise ClaimError(f"{ref.describe()}: the uid is not a Kubernetes UID")
        with self._lock.held():
            known = self._prepared_in_this_boot(ref)
            if known is not None:
                return known  # prepared before (a retry, or another pod sharing the claim)
        # New, or prepared in an earlier boot (its CDI spec went with the tmpfs): prepare it now.
        # The API read (most of a prepare's time) runs outside the node's lock, so concurrent
        # prepares and unprepares wait only for each other's file writes, not for the API server.
        prepared = self._allocated(ref)
        with self._lock.held():
            entries = self._ledger.read()
            known_entry = entries.get(ref.uid)
            if known_entry is not None and known_entry.boot_id == self.boot_id:
                self._ensure_spec(known_entry.claim)
                return known_entry.claim  # another call prepared it meanwhile
            others = {uid: e.claim for uid, e in entries.items() if uid != ref.uid}
            if self._drop_stale_holders(entries, others, prepared):
                others = {uid: e.claim for uid, e in entries.items() if uid != ref.uid}
            refusal = conflicts(others, prepared, self.max_shares)
            if refusal:
                raise ClaimError(refusal)
            path = spec_path(self.cdi_dir, self.driver_name, ref.uid)
            try:
                self._write_metadata(prepared)
                write_claim_spec(path, self._spec(prepared), durable=False)
                self.before_checkpoint(ref.uid)
                entries[ref.uid] = Entry(prepared, self.boot_id)
                self._ledger.save(entries)
            except OSError as exc:
                remove_claim_spec(path)
                remove_metadata(self.plugin_dir, ref)
                raise ClaimError(
                    f"{ref.describe()}: cannot write {exc.filename or path}: {exc.strerror}"
                ) from None
        _log.info(
            "claim prepared",
            extra={
                "fields": {
                    "claim": ref.describe(),
                    "devices": [d.device for d in prepared.devices],
                    "cdi": prepared.cdi_device_id,
                    **({"earlier_boot": True} if known_entry is not None else {}),
                }
            },
        )
        return prepared

    def _prepared_in_this_boot(self, ref: ClaimRef) -> PreparedClaim | None:
        """The claim's record when this boot prepared it (its spec written again if missing);
        call with the lock held."""
        known = self._ledger.read().get(ref.uid)
        if known is None or known.boot_id != self.boot_id:
            return None
        self._ensure_spec(known.claim)
        return known.claim

    def _drop_stale_holders(
        self, entries: dict[str, Entry], others: dict[str, PreparedClaim], candidate: PreparedClaim
    ) -> bool:
        """Before refusing ``candidate`` for a core an earlier boot's claim holds: ask the API
        server about that holder (the periodic clean-up may not have come round yet) and drop it
        when stale, saving the checkpoint. A holder of this boot is never asked: the kubelet
        unprepares it. An API error keeps the holder (refusing is the safe answer; the kubelet
        retries). True if any holder went. Called with the lock held (rare: a conflict)."""
        dropped = False
        for uid, holder in conflicting_holders(others, candidate, self.max_shares).items():
            if entries[uid].boot_id == self.boot_id:
                continue
            try:
                reason = self._stale_on_api(holder)
            except ApiError as exc:
                _log.warning(
                    "cannot check a holder of an earlier boot; refusing",
                    extra={"fields": {"claim": holder.ref.describe(), "error": str(exc)}},
                )
                continue
            if reason is not None and self._drop_earlier(entries, uid, reason):
                dropped = True
        if dropped:
            self._ledger.save(entries)
        return dropped

    def _allocated(self, ref: ClaimRef) -> PreparedClaim:
        """The claim's devices of ours from the API server, checked against what we offer."""
        info, state, _compatible = self._resources.snapshot()
        if info is None:
            raise ClaimError(f"{ref.describe()}: this node has no usable NPU now (the driver's log says why)")
        try:
            claim = self._api.get_claim(ref.namespace, ref.name)
        except ApiError as exc:
            self._metrics.api_error("get_claim")
            raise ClaimError(
                f"cannot read {ref.describe()} from the API server ({exc}); the kubelet retries"
            ) from None
        if claim is None:
            raise ClaimError(f"{ref.describe()} does not exist on the API server (deleted?)")
        offered = all_offered_devices(info, state.health)
        if self._facts.video is not None:
            offered = (*offered, VIDEO_DEVICE)
        devices = our_devices(ref, claim, self.driver_name, self.node_name, offered)
        return PreparedClaim(
            ref, devices, cdi_device_id(self.driver_name, ref.uid), pod_claim_name(ref, claim)
        )

    def _spec(self, prepared: PreparedClaim) -> dict[str, object]:
        info, _state, compatible = self._resources.snapshot()
        if info is None:
            raise ClaimError(f"{prepared.ref.describe()}: this node has no usable NPU now")
        try:
            return claim_spec(
                self.driver_name,
                prepared,
                info,
                compatible,
                self._resources.extras,
                plugin_dir=self.plugin_dir,
                video=self._facts.video,
            )
        except ValueError as exc:
            raise ClaimError(f"{prepared.ref.describe()}: {exc}") from None

    def _metadata(self, prepared: PreparedClaim) -> dict[str, tuple[Path, str]]:
        info, _state, _compatible = self._resources.snapshot()
        if info is None:
            raise ClaimError(f"{prepared.ref.describe()}: this node has no usable NPU now")
        return request_metadata(self.driver_name, prepared, info, self._facts, self.plugin_dir)

    def _write_metadata(self, prepared: PreparedClaim) -> None:
        """Each request's metadata file (KEP-5304), before the CDI spec that mounts it. Raises OSError."""
        write_metadata(self._metadata(prepared))

    def _ensure_spec(self, prepared: PreparedClaim) -> None:
        """A checkpointed claim whose spec or metadata file went missing (deleted by hand) gets it
        written again."""
        path = spec_path(self.cdi_dir, self.driver_name, prepared.ref.uid)
        if path.exists() and all(file.exists() for file in metadata_paths(self.plugin_dir, prepared)):
            return
        try:
            write_metadata(self._metadata(prepared))
            write_claim_spec(path, self._spec(prepared), durable=False)
        except OSError as exc:
            raise ClaimError(f"{prepared.ref.describe()}: cannot write {path}: {exc.strerror}") from None

    # --- unprepare ------------------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> str:
        """Undo prepare; an unknown claim succeeds (already undone). Returns the error, or ''."""
        began = time.perf_counter()
        error = self._unprepare(ref)
        self._metrics.request("unprepare", time.perf_counter() - began, error)
        return error

    def _unprepare(self, ref: ClaimRef) -> str:
        if not valid_uid(ref.uid):
            return ""  # nothing of ours can carry that name
        path = spec_path(self.cdi_dir, self.driver_name, ref.uid)
        try:
            with self._lock.held():
                entries = self._ledger.read()
                known = entries.pop(ref.uid, None)
                remove_claim_spec(path)
                remove_metadata(self.plugin_dir, ref)
                if known is not None:
                    self._ledger.save(entries)
        except OSError as exc:
            message = f"{ref.describe()}: cannot remove its state: {exc}"
            _log.error("unprepare failed", extra={"fields": {"claim": ref.describe(), "error": message}})
            return message
        if known is not None:
            _log.info("claim unprepared", extra={"fields": {"claim": ref.describe()}})
        return ""

    def close(self) -> None:
        self._lock.close()
