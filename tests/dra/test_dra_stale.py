"""Claims prepared in an earlier boot: the kubelet never unprepares them, so the driver drops each
one whose claim the API server no longer allocates here (deleted, re-created, deallocated, moved),
asks again periodically while any remain, and asks about a holder before refusing a claim for its
cores. The store runs against an in-memory API (no HTTP): only `get_claim` is used."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from fakehost import make_host
from rknnlaunch.npu import HostRoot
from rknpu_dra_driver.apiserver._api import ApiError, KubeApi
from rknpu_dra_driver.claims._claim import ClaimRef
from rknpu_dra_driver.claims._stale import clean_stale_loop as _clean_stale
from rknpu_dra_driver.claims._store import ClaimStore
from rknpu_node import NullEvents, ResourceManager

DRIVER = "npu.rockchip.com"
NODE = "node-a"


def _uid(n: int) -> str:
    return f"0b9a6f44-5c1e-4d0e-9c55-2f0a3c9d1e{n:02d}"


def _claim(uid: str, *devices: str, pool: str = NODE, driver: str = DRIVER) -> dict[str, Any]:
    results = [{"request": "npu", "driver": driver, "pool": pool, "device": d} for d in devices]
    status = {"allocation": {"devices": {"results": results}}} if devices else {}
    return {"metadata": {"uid": uid}, "status": status}


class Claims:
    """The API server's claims by name, and every name asked for."""

    def __init__(self) -> None:
        self.claims: dict[str, dict[str, Any]] = {}
        self.asked: list[str] = []
        self.failing: set[str] = set()
        """Names whose read fails (a flaky API server)."""

    def get_claim(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.asked.append(name)
        if name in self.failing:
            raise ApiError("connection refused")
        return self.claims.get(name)


class Node:
    def __init__(self, root: Path) -> None:
        make_host("rk3588-drm", root / "host")
        (root / "plugin").mkdir()  # the kubelet's folder (the driver never creates it)
        self.root = root
        self.api = Claims()
        self.resources = ResourceManager(HostRoot(root / "host"), NullEvents())
        self.resources.scan()

    def store(self, boot: str) -> ClaimStore:
        return ClaimStore(
            cast(KubeApi, self.api),
            self.resources,
            DRIVER,
            NODE,
            self.root / "plugin",
            self.root / "cdi",
            boot_id=boot,
        )

    def prepare(self, store: ClaimStore, name: str, uid: str, *devices: str) -> str:
        self.api.claims[name] = _claim(uid, *devices)
        return store.prepare(ClaimRef("default", name, uid)).error


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    yield Node(tmp_path)


def _earlier_boot(node: Node, claims: dict[str, tuple[str, str]]) -> ClaimStore:
    """``claims`` (name -> uid, device) prepared in boot-1; the store of boot-2."""
    first = node.store("boot-1")
    for name, (uid, device) in claims.items():
        assert node.prepare(first, name, uid, device) == ""
    first.close()
    return node.store("boot-2")


def test_clean_stale_drops_claims_no_longer_allocated_here_and_counts_the_rest(node: Node) -> None:
    store = _earlier_boot(
        node,
        {
            "kept": (_uid(1), "npu-core-0"),
            "deleted": (_uid(2), "npu-core-1"),
            "recreated": (_uid(3), "npu-core-2"),
        },
    )
    del node.api.claims["deleted"]
    node.api.claims["recreated"] = _claim(_uid(9), "npu-core-2")
    assert store.clean_stale() == 1  # only "kept" of boot-1 remains
    assert set(store.claims) == {_uid(1)}
    assert [p.name for p in (node.root / "cdi").glob("*.json")] == [f"{DRIVER}-claim_{_uid(1)}.json"]
    # Deallocated (no results), then allocated on another node: both stale.
    node.api.claims["kept"] = _claim(_uid(1))
    assert store.clean_stale() == 0 and store.claims == {}
    store.close()


def test_a_claim_reallocated_to_another_pool_or_driver_is_stale(node: Node) -> None:
    store = _earlier_boot(node, {"a": (_uid(1), "npu-core-0"), "b": (_uid(2), "npu-core-1")})
    node.api.claims["a"] = _claim(_uid(1), "npu-core-0", pool="node-b")
    node.api.claims["b"] = _claim(_uid(2), "gpu-0", driver="gpu.example.com")
    assert store.clean_stale() == 0 and store.claims == {}
    store.close()


def test_claims_of_this_boot_are_never_asked_about(node: Node) -> None:
    store = node.store("boot-1")
    assert node.prepare(store, "a", _uid(1), "npu-core-0") == ""
    node.api.asked.clear()
    del node.api.claims["a"]
    assert store.clean_stale() == 0 and node.api.asked == []
    assert set(store.claims) == {_uid(1)}  # the kubelet unprepares it
    store.close()


class _Counting:
    """A store whose clean_stale reports ``remaining`` in turn (an ApiError for None)."""

    def __init__(self, remaining: list[int | None]) -> None:
        self.remaining = remaining
        self.calls = 0
        self.finished = threading.Event()

    def clean_stale(self) -> int:
        value = self.remaining[min(self.calls, len(self.remaining) - 1)]
        self.calls += 1
        if self.calls >= len(self.remaining):
            self.finished.set()
        if value is None:
            raise ApiError("down")
        return value


class _Ready:
    def wait_ready(self, timeout: float) -> bool:
        return True


def test_the_clean_up_repeats_while_earlier_claims_remain_then_stops_asking(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import rknpu_dra_driver.claims._stale as cli

    monkeypatch.setattr(cli, "STALE_RETRY_S", 0.01)
    store = _Counting([None, 2, 1, 0])
    stop = threading.Event()
    actor = threading.Thread(
        target=_clean_stale, args=(cast(ClaimStore, store), cast(KubeApi, _Ready()), stop, 0.01)
    )
    actor.start()
    assert store.finished.wait(10)
    # Nothing of an earlier boot is left: it asks no more, and only ``stop`` ends it.
    assert actor.is_alive() and store.calls == 4
    stop.set()
    actor.join(5)
    assert not actor.is_alive() and store.calls == 4


def test_prepare_asks_about_an_earlier_boots_holder_before_refusing(node: Node) -> None:
    store = _earlier_boot(node, {"old": (_uid(1), "npu-core-0"), "live": (_uid(2), "npu-core-1")})
    # "old" was deallocated while the node was down; the scheduler gave core 0 to "new".
    node.api.claims["old"] = _claim(_uid(1))
    assert node.prepare(store, "new", _uid(3), "npu-core-0") == ""
    assert set(store.claims) == {_uid(2), _uid(3)}
    # "live" is still allocated here: its core stays refused (naming it).
    error = node.prepare(store, "clash", _uid(4), "npu-core-1")
    assert "held by ResourceClaim default/live" in error
    assert set(store.claims) == {_uid(2), _uid(3)}
    store.close()


def test_a_holder_of_this_boot_or_an_unreachable_api_keeps_the_refusal(node: Node) -> None:
    store = _earlier_boot(node, {"old": (_uid(1), "npu-core-0")})
    assert node.prepare(store, "mine", _uid(2), "npu-core-1") == ""
    node.api.claims["old"] = _claim(_uid(1))  # stale, but reading it fails
    node.api.failing = {"old"}
    assert "held by ResourceClaim default/old" in node.prepare(store, "x", _uid(3), "npu-core-0")
    node.api.failing = set()
    assert node.prepare(store, "x", _uid(3), "npu-core-0") == ""  # the kubelet's retry
    # This boot's holder: refused without asking about it.
    node.api.asked.clear()
    assert "held by ResourceClaim default/mine" in node.prepare(store, "y", _uid(4), "npu-core-1")
    assert node.api.asked == ["y"]
    store.close()
