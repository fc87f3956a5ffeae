"""Claims: the pure booking and device choice, the store (prepare, unprepare, stale claims) with its
checkpoint ledger and serialize lock, and the per-claim CDI specs."""

from typing import TYPE_CHECKING

from rknnlaunch import lazy_attributes

if TYPE_CHECKING:
    from ._booking import conflicts
    from ._cdi import claim_from_spec, claim_spec
    from ._checkpoint import CHECKPOINT_NAME, boot_id
    from ._claim import AllocatedDevice, ClaimError, ClaimRef, PreparedClaim
    from ._stale import clean_stale_loop
    from ._store import ClaimStore

# What other rooms use, by defining module; imported on first use (PEP 562).
_LAZY = {
    "AllocatedDevice": "._claim",
    "ClaimError": "._claim",
    "ClaimRef": "._claim",
    "PreparedClaim": "._claim",
    "conflicts": "._booking",
    "claim_from_spec": "._cdi",
    "claim_spec": "._cdi",
    "CHECKPOINT_NAME": "._checkpoint",
    "boot_id": "._checkpoint",
    "ClaimStore": "._store",
    "clean_stale_loop": "._stale",
}

__getattr__ = lazy_attributes(__name__, _LAZY)

__all__ = [
    "AllocatedDevice",
    "ClaimError",
    "ClaimRef",
    "PreparedClaim",
    "conflicts",
    "claim_from_spec",
    "claim_spec",
    "CHECKPOINT_NAME",
    "boot_id",
    "ClaimStore",
    "clean_stale_loop",
]
