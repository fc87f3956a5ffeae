"""Prepared claims: prepare/unprepare (idempotent, a claim shared by pods prepared once), the
per-claim CDI spec and the checkpoint that survives restarts, rebuilt from the specs if corrupt."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rknpu_device_plugin.devices import ResourceManager

from ._booking import conflicts
from ._cdi import (
    cdi_device_id,
    claim_spec,
    claims_in_specs,
    remove_claim_spec,
    spec_path,
    valid_uid,
    write_claim_spec,
)
from ._checkpoint import CHECKPOINT_NAME, CheckpointError, load, save
from ._claims import ClaimError, ClaimRef, PreparedClaim, our_devices
from ._kube import ApiError, KubeApi
from ._log import get_logger
from ._slices import all_offered_devices

_log = get_logger("claims")


@dataclass(frozen=True)
class PrepareResult:
    """One claim's answer: its prepared record, or the error the kubelet gets for it."""

    claim: PreparedClaim | None = None
    error: str = ""


class ClaimStore:
    """Owns the prepared claims of this node: the in-memory map, its checkpoint and the CDI specs."""

    def __init__(
        self,
        api: KubeApi,
        resources: ResourceManager,
        driver_name: str,
        node_name: str,
        plugin_dir: Path,
        cdi_dir: Path,
    ) -> None:
        self._api = api
        self._resources = resources
        self.driver_name = driver_name
        self.node_name = node_name
        self.checkpoint_path = plugin_dir / CHECKPOINT_NAME
        self.cdi_dir = cdi_dir
        self._lock = threading.Lock()
        self._claims: dict[str, PreparedClaim] = {}
        self.before_checkpoint: Callable[[str], None] = lambda uid: None
        """Test hook: called between writing a claim's spec and its checkpoint entry."""

    @property
    def claims(self) -> dict[str, PreparedClaim]:
        with self._lock:
            return dict(self._claims)

    def load(self) -> None:
        """Read the checkpoint; refuse a corrupt one (a log line) and rebuild it from our CDI specs.

        Specs without a checkpoint entry (a kill -9 between writing the two) join the checkpoint:
        the kubelet still holds those claims and will unprepare them.
        """
        try:
            claims = load(self.checkpoint_path)
            rebuilt = False
        except (CheckpointError, OSError) as exc:
            _log.error(
                "checkpoint refused; rebuilding it from the CDI specs",
                extra={"fields": {"path": str(self.checkpoint_path), "error": str(exc)}},
            )
            claims, rebuilt = {}, True
        self._remove_torn_writes()
        recovered = []
        for path, claim in claims_in_specs(self.cdi_dir, self.driver_name):
            if claim is None:
                _log.warning("unreadable CDI spec of ours left as is", extra={"fields": {"path": str(path)}})
            elif claim.ref.uid not in claims:
                claims[claim.ref.uid] = claim
                recovered.append(claim.ref.uid)
        if recovered:
            _log.info("claims recovered from their CDI specs", extra={"fields": {"uids": recovered}})
        with self._lock:
            self._claims = claims
            if rebuilt or recovered:
                save(self.checkpoint_path, self._claims)
        _log.info("prepared claims loaded", extra={"fields": {"claims": len(claims)}})

    def _remove_torn_writes(self) -> None:
        """The temporary files of writes a kill interrupted (`write_atomic` names them
        ``.<name>.<random>.tmp``); the files they were replacing are intact."""
        patterns = (
            (self.checkpoint_path.parent, f".{self.checkpoint_path.name}.*.tmp"),
            (self.cdi_dir, f".{self.driver_name}-claim_*.tmp"),
        )
        for folder, pattern in patterns:
            for temp in folder.glob(pattern) if folder.is_dir() else ():
                with contextlib.suppress(OSError):
                    temp.unlink()
                    _log.info("removed an interrupted write", extra={"fields": {"path": str(temp)}})

    # --- prepare --------------------------------------------------------------------------------

    def prepare(self, ref: ClaimRef) -> PrepareResult:
        try:
            return PrepareResult(self._prepare(ref))
        except ClaimError as exc:
            _log.error("prepare failed", extra={"fields": {"claim": ref.describe(), "error": str(exc)}})
            return PrepareResult(error=str(exc))

    def _prepare(self, ref: ClaimRef) -> PreparedClaim:
        if not valid_uid(ref.uid):
            raise ClaimError(f"{ref.describe()}: the uid is not a Kubernetes UID")
        with self._lock:
            known = self._claims.get(ref.uid)
        if known is not None:
            self._ensure_spec(known)
            return known  # prepared before (a retry, or another pod sharing the claim)
        info, state, _compatible = self._resources.snapshot()
        if info is None:
            raise ClaimError(f"{ref.describe()}: this node has no usable NPU now (the driver's log says why)")
        try:
            claim = self._api.get_claim(ref.namespace, ref.name)
        except ApiError as exc:
            raise ClaimError(
                f"cannot read {ref.describe()} from the API server ({exc}); the kubelet retries"
            ) from None
        if claim is None:
            raise ClaimError(f"{ref.describe()} does not exist on the API server (deleted?)")
        devices = our_devices(
            ref, claim, self.driver_name, self.node_name, all_offered_devices(info, state.health)
        )

        prepared = PreparedClaim(ref, devices, cdi_device_id(self.driver_name, ref.uid))
        with self._lock:
            if ref.uid in self._claims:  # a concurrent call won
                return self._claims[ref.uid]
            clash = conflicts(self._claims, prepared)
            if clash is not None:
                raise ClaimError(clash)
            path = spec_path(self.cdi_dir, self.driver_name, ref.uid)
            try:
                write_claim_spec(path, self._spec(prepared))
                self.before_checkpoint(ref.uid)
                self._claims[ref.uid] = prepared
                save(self.checkpoint_path, self._claims)
            except OSError as exc:
                self._claims.pop(ref.uid, None)
                remove_claim_spec(path)
                raise ClaimError(
                    f"{ref.describe()}: cannot write {exc.filename or path}: {exc.strerror}"
                ) from None
        _log.info(
            "claim prepared",
            extra={
                "fields": {
                    "claim": ref.describe(),
                    "devices": [d.device for d in devices],
                    "cdi": prepared.cdi_device_id,
                }
            },
        )
        return prepared

    def _spec(self, prepared: PreparedClaim) -> dict[str, object]:
        info, _state, compatible = self._resources.snapshot()
        if info is None:
            raise ClaimError(f"{prepared.ref.describe()}: this node has no usable NPU now")
        return claim_spec(self.driver_name, prepared, info, compatible, self._resources.extras)

    def _ensure_spec(self, prepared: PreparedClaim) -> None:
        """A checkpointed claim whose spec went missing (deleted by hand) gets it written again."""
        path = spec_path(self.cdi_dir, self.driver_name, prepared.ref.uid)
        if path.exists():
            return
        try:
            write_claim_spec(path, self._spec(prepared))
        except OSError as exc:
            raise ClaimError(f"{prepared.ref.describe()}: cannot write {path}: {exc.strerror}") from None

    # --- unprepare ------------------------------------------------------------------------------

    def unprepare(self, ref: ClaimRef) -> str:
        """Undo prepare; an unknown claim succeeds (already undone). Returns the error, or ''."""
        if not valid_uid(ref.uid):
            return ""  # nothing of ours can carry that name
        path = spec_path(self.cdi_dir, self.driver_name, ref.uid)
        with self._lock:
            known = self._claims.pop(ref.uid, None)
            try:
                remove_claim_spec(path)
                if known is not None:
                    save(self.checkpoint_path, self._claims)
            except OSError as exc:
                if known is not None:
                    self._claims[ref.uid] = known
                message = f"{ref.describe()}: cannot remove its state: {exc}"
                _log.error("unprepare failed", extra={"fields": {"claim": ref.describe(), "error": message}})
                return message
        if known is not None:
            _log.info("claim unprepared", extra={"fields": {"claim": ref.describe()}})
        return ""
