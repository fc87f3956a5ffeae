"""deploy/: the device plugin's and the DRA driver's DaemonSets never select the same node (both
would hand out the same cores as `rockchip.com/npu`). Their required node affinities are compared
term by term: two terms overlap when one node's labels could satisfy both; the split label is
`rockchip.com/npu.dra=true` (docs/dra.md, "Migrating a node from the device plugin")."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML comes with the dev extra (kubernetes-validate)")

REPO = Path(__file__).resolve().parents[2]
PLUGIN = REPO / "deploy" / "daemonset.yaml"
DRA = REPO / "deploy" / "dra" / "daemonset.yaml"
SPLIT_LABEL = "rockchip.com/npu.dra"

Term = list[dict[str, Any]]


def _daemonset(path: Path) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "DaemonSet"]
    return dict(doc)


def _terms(daemonset: dict[str, Any]) -> list[Term]:
    spec = daemonset["spec"]["template"]["spec"]
    assert "nodeSelector" not in spec, "the split lives in the node affinity alone"
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    terms = [list(term.get("matchExpressions") or []) for term in required["nodeSelectorTerms"]]
    assert all(not term.get("matchFields") for term in required["nodeSelectorTerms"])
    return terms


def _satisfiable(expressions: Term) -> bool:
    """Could one node's labels match every expression (In, NotIn, Exists, DoesNotExist)?"""
    for key in {e["key"] for e in expressions}:
        on_key = [e for e in expressions if e["key"] == key]
        ops = {e["operator"] for e in on_key}
        assert ops <= {"In", "NotIn", "Exists", "DoesNotExist"}, ops
        must_have = bool(ops & {"In", "Exists"})
        if must_have and "DoesNotExist" in ops:
            return False
        if "In" in ops:
            allowed = set.intersection(*(set(e["values"]) for e in on_key if e["operator"] == "In"))
            refused = {v for e in on_key if e["operator"] == "NotIn" for v in e["values"]}
            if not allowed - refused:
                return False
    return True


def _overlaps(first: list[Term], second: list[Term]) -> list[tuple[Term, Term]]:
    return [(a, b) for a in first for b in second if _satisfiable(a + b)]


def test_the_plugin_and_the_dra_driver_never_select_the_same_node() -> None:
    plugin, dra = _terms(_daemonset(PLUGIN)), _terms(_daemonset(DRA))
    assert _overlaps(plugin, dra) == []
    # Each still runs somewhere: every term is satisfiable on its own.
    assert all(_satisfiable(term) for term in plugin + dra)


def test_every_term_carries_the_split_label() -> None:
    """The label docs/dra.md's migration steps set: In for the DRA driver, NotIn for the plugin."""
    for path, operator in ((PLUGIN, "NotIn"), (DRA, "In")):
        for term in _terms(_daemonset(path)):
            assert {"key": SPLIT_LABEL, "operator": operator, "values": ["true"]} in term, (path, term)
    migration = (REPO / "docs" / "dra.md").read_text()
    assert f"{SPLIT_LABEL}=true" in migration


def test_the_check_catches_daemonsets_sharing_nodes() -> None:
    """The control: without the split label, the two selections overlap (the old manifests)."""
    unsplit = [
        [e for e in term if e["key"] != SPLIT_LABEL] for term in copy.deepcopy(_terms(_daemonset(DRA)))
    ]
    assert _overlaps(_terms(_daemonset(PLUGIN)), unsplit)
    assert not _satisfiable([{"key": "k", "operator": "Exists"}, {"key": "k", "operator": "DoesNotExist"}])
    assert _satisfiable(
        [{"key": "k", "operator": "NotIn", "values": ["x"]}, {"key": "k", "operator": "DoesNotExist"}]
    )
