"""samples/scheduler's rknpu-spread profile places an NPU pod on the node with the most free cores.

NodeResourcesFit with scoringStrategy LeastAllocated, as upstream documents and computes it
(kube-scheduler pkg/scheduler/framework/plugins/noderesources: least_allocated.go and
resource_allocation.go): per listed resource the pod requests, (allocatable - requested) * 100 /
allocatable in integers, the node's requests and the pod's together, 0 when they exceed it; an
extended resource the pod does not request is left out; the node score is the weighted average
(integer division). A node where the pod does not fit is filtered out first. The weights are read
from the shipped sample; the SoCs' core counts from rknnlaunch.npu (the one core model).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from rknnlaunch.npu import SOCS

yaml = pytest.importorskip("yaml", reason="PyYAML comes with the dev extra (kubernetes-validate)")

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "scheduler" / "kube-scheduler-config.yaml"
PROFILE = "rknpu-spread"
NPU = "rockchip.com/npu"
MAX_NODE_SCORE = 100
CORES = {soc.name: soc.npu_cores for soc in SOCS}
GI = 1024**3


def _scoring_strategy() -> dict[str, Any]:
    config = yaml.safe_load(SAMPLE.read_text())
    assert config["apiVersion"] == "kubescheduler.config.k8s.io/v1"
    (profile,) = [p for p in config["profiles"] if p["schedulerName"] == PROFILE]
    (fit,) = [c for c in profile["pluginConfig"] if c["name"] == "NodeResourcesFit"]
    return dict(fit["args"]["scoringStrategy"])


def shipped_weights() -> dict[str, int]:
    strategy = _scoring_strategy()
    assert strategy["type"] == "LeastAllocated"
    return {entry["name"]: int(entry["weight"]) for entry in strategy["resources"]}


# The NodeResourcesFit defaults (no pluginConfig): cpu and memory, weight 1 each.
DEFAULT_WEIGHTS = {"cpu": 1, "memory": 1}


@dataclass(frozen=True)
class Node:
    """One node's allocatable and already-requested amounts (cpu in millicores, memory in bytes)."""

    name: str
    soc: str
    npu_used: int
    cpu: int = 8000
    cpu_used: int = 0
    memory: int = 16 * GI
    memory_used: int = 0

    def allocatable(self) -> dict[str, int]:
        return {"cpu": self.cpu, "memory": self.memory, NPU: CORES[self.soc]}

    def requested(self) -> dict[str, int]:
        return {"cpu": self.cpu_used, "memory": self.memory_used, NPU: self.npu_used}

    @property
    def free_cores(self) -> int:
        return CORES[self.soc] - self.npu_used


POD = {"cpu": 1000, "memory": GI // 2, NPU: 1}


def least_requested_score(requested: int, allocatable: int) -> int:
    if allocatable == 0 or requested > allocatable:
        return 0
    return (allocatable - requested) * MAX_NODE_SCORE // allocatable


def fits(node: Node, pod: dict[str, int]) -> bool:
    allocatable, requested = node.allocatable(), node.requested()
    return all(requested[name] + amount <= allocatable[name] for name, amount in pod.items())


def score(node: Node, pod: dict[str, int], weights: dict[str, int]) -> int:
    allocatable, requested = node.allocatable(), node.requested()
    total = weight_sum = 0
    for name, weight in weights.items():
        if name not in ("cpu", "memory") and not pod.get(name):
            continue  # an extended resource the pod does not request is not scored
        if not allocatable.get(name):
            continue
        total += least_requested_score(requested[name] + pod.get(name, 0), allocatable[name]) * weight
        weight_sum += weight
    return total // weight_sum if weight_sum else 0


def pick(nodes: list[Node], pod: dict[str, int], weights: dict[str, int]) -> list[str]:
    """The names of the feasible nodes with the top score (the scheduler picks one of them)."""
    scores = {node.name: score(node, pod, weights) for node in nodes if fits(node, pod)}
    best = max(scores.values())
    return sorted(name for name, value in scores.items() if value == best)


# A mixed fleet: the RK3588 with the most free cores is the busiest in CPU and memory.
FLEET = [
    Node("rk3588-busy", "rk3588", npu_used=0, cpu_used=5500, memory_used=12 * GI),
    Node("rk3588-half", "rk3588", npu_used=2, cpu_used=1000, memory_used=2 * GI),
    Node("rk3576", "rk3576", npu_used=1, cpu_used=2000, memory_used=4 * GI),
    Node("rk3568-idle", "rk3568", npu_used=0, cpu=4000, memory=8 * GI),
    Node("rk3568-full", "rk3568", npu_used=1, cpu=4000, memory=8 * GI),
    Node("rk3566", "rk3566", npu_used=0, cpu=4000, cpu_used=3000, memory=4 * GI, memory_used=3 * GI),
]


def test_the_sample_is_least_allocated_with_the_npu_weighted_above_cpu_and_memory() -> None:
    weights = shipped_weights()
    assert set(weights) == {"cpu", "memory", NPU}
    assert all(1 <= weight <= 100 for weight in weights.values())  # the scheduler's valid range
    assert weights[NPU] > weights["cpu"] + weights["memory"]


def test_the_profile_picks_the_node_with_the_most_free_cores() -> None:
    assert pick(FLEET, POD, shipped_weights()) == ["rk3588-busy"]
    # The control: the default weights (no NPU) send it to the idlest CPU, which has one core left.
    assert pick(FLEET, POD, DEFAULT_WEIGHTS) == ["rk3568-idle"]


def test_the_table_of_scores_as_upstream_computes_them() -> None:
    """Worked by hand: rk3588-busy npu (3-1)*100//3 = 66, cpu (8000-6500)*100//8000 = 18, memory
    (16-12.5)*100//16 = 21 -> (66*20 + 18 + 21) // 22 = 61; rk3568-idle npu (1-1)*100//1 = 0, cpu
    (4000-1000)*100//4000 = 75, memory (8-0.5)*100//8 = 93 -> (0 + 75 + 93) // 22 = 7."""
    weights = shipped_weights()
    assert weights == {"cpu": 1, "memory": 1, NPU: 20}  # the figures below are for these weights
    scores = {node.name: score(node, POD, weights) for node in FLEET if fits(node, POD)}
    assert scores == {"rk3588-busy": 61, "rk3588-half": 7, "rk3576": 6, "rk3568-idle": 7, "rk3566": 0}
    assert not fits(FLEET[4], POD)  # rk3568-full: filtered, never scored


def test_replicas_placed_one_by_one_go_where_most_cores_are_left() -> None:
    weights = shipped_weights()
    fleet = {node.name: node for node in FLEET}
    placed = []
    while any(fits(node, POD) for node in fleet.values()):
        (name, *ties) = pick(list(fleet.values()), POD, weights)
        most_free = max(node.free_cores for node in fleet.values() if fits(node, POD))
        assert fleet[name].free_cores == most_free
        assert all(fleet[tie].free_cores == most_free for tie in ties)
        node = fleet[name]
        fleet[name] = replace(
            node,
            npu_used=node.npu_used + POD[NPU],
            cpu_used=node.cpu_used + POD["cpu"],
            memory_used=node.memory_used + POD["memory"],
        )
        placed.append(name)
    # Two replicas on the busy RK3588 (3, then 2 free cores); a third does not fit its CPU (Filter).
    assert placed[:2] == ["rk3588-busy", "rk3588-busy"] and "rk3588-busy" not in placed[2:]
    # Then one replica on each node with a core left, the idlest CPU and memory first.
    assert placed[2:] == ["rk3568-idle", "rk3588-half", "rk3576", "rk3566"]


def test_one_free_core_more_always_wins_whatever_cpu_and_memory_say() -> None:
    """Every pair of node states over the SoCs, cores in use and CPU/memory load (0-90 %): a node
    with more free cores always scores higher with the sample's weights."""
    weights = shipped_weights()
    loads = (0.0, 0.3, 0.6, 0.9)
    states = [
        Node(
            f"{soc}-{used}-{cpu}-{memory}",
            soc,
            used,
            cpu_used=int(8000 * cpu),
            memory_used=int(16 * GI * memory),
        )
        for soc in sorted(CORES)
        for used in range(CORES[soc])
        for cpu, memory in itertools.product(loads, loads)
    ]
    states = [node for node in states if fits(node, POD)]
    assert len(states) > 90  # 8 (SoC, cores in use) x 16 loads, less those the pod's CPU does not fit
    for first, second in itertools.product(states, states):
        if first.free_cores > second.free_cores:
            assert score(first, POD, weights) > score(second, POD, weights), (first, second)


def test_a_pod_without_the_npu_is_scored_on_cpu_and_memory_alone() -> None:
    weights = shipped_weights()
    no_npu = {"cpu": 1000, "memory": GI // 2}
    assert score(FLEET[0], no_npu, weights) == score(FLEET[0], no_npu, DEFAULT_WEIGHTS)
