"""The Helm chart rendered by real helm (v4.3.1 from a pinned PyPI wheel, scripts/get_helm.py): in
every render of the CI values matrix the device plugin and the DRA driver never select one node,
values that would force both onto one are refused naming the value, and deploy/ is the chart's
default render (kustomize's objects equal the chart's). Slow: it fetches helm (38 MB) once per cache."""

from __future__ import annotations

import platform
import sys
from pathlib import Path
from typing import Any

import pytest
from test_deploy_node_split import SPLIT_LABEL, _overlaps, _satisfiable

pytestmark = pytest.mark.slow
yaml = pytest.importorskip("yaml", reason="PyYAML comes with the dev extra (kubernetes-validate)")

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))
import check_chart  # noqa: E402
import gen_deploy  # noqa: E402
import get_helm  # noqa: E402

Term = list[dict[str, Any]]


@pytest.fixture(scope="module")
def helm() -> Path:
    if platform.machine() != "x86_64":
        pytest.skip(f"the pinned helm is an x86_64 build; this machine is {platform.machine()}")
    return get_helm.fetch("helm", get_helm.default_cache())


def _terms(daemonset: dict[str, Any]) -> list[Term]:
    """The pod's node selection as ORed terms of ANDed expressions (nodeSelector ANDed into each)."""
    spec = daemonset["spec"]["template"]["spec"]
    selector = [
        {"key": key, "operator": "In", "values": [value]}
        for key, value in (spec.get("nodeSelector") or {}).items()
    ]
    required = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return [list(term.get("matchExpressions") or []) + selector for term in required["nodeSelectorTerms"]]


@pytest.mark.parametrize(
    "values", sorted(check_chart.MATRIX.glob("*-values.yaml")), ids=lambda path: path.name
)
def test_no_render_puts_both_on_one_node(helm: Path, values: Path) -> None:
    objects = check_chart.render(helm, ["-f", str(values)])
    daemonsets = {obj["metadata"]["name"]: obj for obj in objects if obj["kind"] == "DaemonSet"}
    for name, operator in (("rknpu-device-plugin", "NotIn"), ("rknpu-dra-driver", "In")):
        if name in daemonsets:
            for term in _terms(daemonsets[name]):
                assert {"key": SPLIT_LABEL, "operator": operator, "values": ["true"]} in term, (name, term)
                assert _satisfiable(term), (name, term)
    if {"rknpu-device-plugin", "rknpu-dra-driver"} <= daemonsets.keys():
        plugin, dra = _terms(daemonsets["rknpu-device-plugin"]), _terms(daemonsets["rknpu-dra-driver"])
        assert _overlaps(plugin, dra) == []


def test_own_node_terms_are_anded_with_the_split(helm: Path) -> None:
    """scheduling-values.yaml's two required terms times the two NPU labels: four terms, each split."""
    objects = check_chart.render(helm, ["-f", str(check_chart.MATRIX / "scheduling-values.yaml")])
    (plugin,) = [obj for obj in objects if obj["metadata"]["name"] == "rknpu-device-plugin"]
    terms = _terms(plugin)
    assert len(terms) == 4
    assert sum(any(e["key"] == "node-role.example.com/edge" for e in term) for term in terms) == 2


def _args(objects: list[dict[str, Any]], name: str) -> list[str]:
    (daemonset,) = [obj for obj in objects if obj["kind"] == "DaemonSet" and obj["metadata"]["name"] == name]
    args: list[str] = daemonset["spec"]["template"]["spec"]["containers"][0]["args"]
    return args


def test_vpu_values_pass_the_servers_their_video_flags(helm: Path) -> None:
    """vpu.enabled: the device plugin gets --vpu and --vpu-replicas, the DRA driver --vpu; the
    defaults pass neither (the video blocks are opt-in)."""
    on = check_chart.render(helm, ["-f", str(check_chart.MATRIX / "vpu-values.yaml")])
    assert {"--vpu", "--vpu-replicas=4"} <= set(_args(on, "rknpu-device-plugin"))
    assert "--vpu" in _args(on, "rknpu-dra-driver")
    off = check_chart.render(helm, [])
    assert not [a for a in _args(off, "rknpu-device-plugin") + _args(off, "rknpu-dra-driver") if "vpu" in a]


SPLIT_REFUSALS = [
    r
    for r in check_chart.REFUSALS
    if any(word in r.arguments[-1] for word in ("nodeSelector.", "nodeSplit."))
]


@pytest.mark.parametrize("refusal", SPLIT_REFUSALS, ids=lambda refusal: " ".join(refusal.arguments[1:]))
def test_forcing_both_onto_one_node_is_refused_naming_the_value(
    helm: Path, refusal: check_chart.Refusal
) -> None:
    assert len(SPLIT_REFUSALS) == 4
    problem, said = check_chart.refusal_problem(helm, refusal)
    assert problem is None, said
    assert "nodeSplit" in said or "nodeSelector" in said


def test_a_value_out_of_the_schema_is_refused_naming_it(helm: Path) -> None:
    (banana,) = [r for r in check_chart.REFUSALS if r.arguments == ("--set", "mode=banana")]
    problem, said = check_chart.refusal_problem(helm, banana)
    assert problem is None, said
    assert "at '/mode': value must be one of 'core', 'shared', 'whole'" in said


def test_deploy_is_the_charts_default_render(helm: Path) -> None:
    files = gen_deploy.generated(helm)
    assert {path: (REPO / path).read_text() for path in files} == files, "run python scripts/gen_deploy.py"
    kubectl = get_helm.fetch("kubectl", get_helm.default_cache())
    lines = gen_deploy.compare_kustomizations(helm, kubectl)
    assert lines[0].startswith(
        "deploy/ + deploy/dra/: 16 objects; chart (default values): 16 objects; 0 differ"
    )
    assert all(" 0 differ " in line for line in lines), lines
