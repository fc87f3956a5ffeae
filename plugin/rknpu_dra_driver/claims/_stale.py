"""The clean-up of claims an earlier boot prepared: once the API answers, and again while any
remain (a claim the API still had at start may be deleted or deallocated later, and the kubelet
never unprepares an earlier boot's claim)."""

from __future__ import annotations

import threading

from .._log import get_logger
from ..apiserver import ApiError, KubeApi
from ._store import ClaimStore

_log = get_logger()

STALE_RETRY_S = 30.0
STALE_RECHECK_S = 60.0
"""How often claims of an earlier boot that the API server still had are asked about again."""


def clean_stale_loop(
    store: ClaimStore, api: KubeApi, stop: threading.Event, recheck: float = STALE_RECHECK_S
) -> None:
    """Once the API answers: drop the claims of an earlier boot that no longer hold their cores,
    again every ``recheck`` seconds while any remain (a claim the API still had at start may be
    deleted or deallocated later, and the kubelet never unprepares an earlier boot's claim); then
    wait for ``stop`` (an actor that returns would end the group)."""
    while not stop.is_set() and not api.wait_ready(1.0):
        pass
    while not stop.is_set():
        try:
            remaining = store.clean_stale()
        except ApiError as exc:
            _log.debug("stale claims not checked yet", extra={"fields": {"error": str(exc)}})
            stop.wait(STALE_RETRY_S)
            continue
        if remaining == 0:  # no claim of an earlier boot can appear in this one
            break
        stop.wait(recheck)
    stop.wait()
