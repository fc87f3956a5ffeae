"""Checks the Helm chart with real helm: lint, the values matrix rendered and schema-validated, refusals.

1. `helm lint --strict`, with the default values and with each file of the matrix
   (deploy/helm/rknpu/ci/*-values.yaml: each component alone, both modes, shared, whole, the DRA
   slice layouts, custom images, scheduling, no metrics).
2. `helm template` of each matrix file; every object validated (kubernetes-validate, strict:
   unknown fields fail) against Kubernetes 1.34, 1.36 and the newest schemas the tool has, and
   against 1.28 too when the render holds no DRA object. Only the CRD kinds named in CRD_KINDS may
   lack a schema (printed); any other missing schema fails.
3. `helm install --dry-run=client` (no cluster) of each bad value in REFUSALS: helm must refuse
   it, and its message must name the value.

Usage: python scripts/check_chart.py [--cache DIR]   (helm from scripts/get_helm.py)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kubernetes_validate  # type: ignore[import-untyped]
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from get_helm import FetchError, default_cache, fetch

REPO = Path(__file__).resolve().parent.parent
CHART = REPO / "deploy" / "helm" / "rknpu"
MATRIX = CHART / "ci"
NAMESPACE = "kube-system"
OLDEST = "1.28"  # the device plugin's oldest (CDI devices in the device plugin API)
DRA_OLDEST = "1.34"  # resource.k8s.io/v1
ALSO = ("1.36", "1.37")
NEWEST = ".".join(kubernetes_validate.latest_version().split(".")[:2])
DRA_GROUP = "resource.k8s.io/"
# Custom resources of other projects: no bundled schema (the Prometheus Operator's, NFD's).
CRD_KINDS = {
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
    ("monitoring.coreos.com/v1", "PrometheusRule"),
    ("nfd.k8s-sigs.io/v1alpha1", "NodeFeatureRule"),
}


@dataclass(frozen=True)
class Refusal:
    """A bad install: these helm arguments, refused with a message holding `says`. `helm install
    --dry-run=client` (no cluster), or `helm template` for what only it can say (--kube-version)."""

    arguments: tuple[str, ...]
    says: str
    command: str = "install"


REFUSALS = (
    Refusal(("--set", "mode=banana"), "at '/mode': value must be one of 'core', 'shared', 'whole'"),
    Refusal(("--set", "dra.sliceLayout=diagonal"), "at '/dra/sliceLayout'"),
    Refusal(("--set", "replicas=65", "--set", "mode=shared"), "at '/replicas'"),
    Refusal(("--set", "devicePlugin.image.digest=sha256:beef"), "at '/devicePlugin/image/digest'"),
    Refusal(("--set", "resourceName=npu"), "at '/resourceName'"),
    Refusal(("--set", "devicePlugin.nodeSelecter.a=b"), "additional properties 'nodeSelecter' not allowed"),
    # Both the device plugin and the DRA driver forced onto the same nodes:
    Refusal(
        ("--set-string", "devicePlugin.nodeSelector.rockchip\\.com/npu\\.dra=true"),
        "devicePlugin.nodeSelector.rockchip.com/npu.dra=true forces the device plugin onto the DRA driver",
    ),
    Refusal(
        ("--set-string", "dra.nodeSelector.rockchip\\.com/npu\\.dra=false"),
        "dra.nodeSelector.rockchip.com/npu.dra=false forces the DRA driver onto the device plugin's nodes",
    ),
    Refusal(("--set", "nodeSplit.draLabel="), "nodeSplit.draLabel is empty"),
    Refusal(
        ("--set", "nodeSplit.npuLabels={rockchip.com/npu.dra}"),
        "nodeSplit.npuLabels names rockchip.com/npu.dra, the DRA label",
    ),
    Refusal(("--set", "replicas=4"), "replicas=4 only applies to mode=shared"),
    Refusal(("--set", "mode=shared"), "mode=shared with replicas=1"),
    Refusal(("--set", "probe.enabled=true", "--set", "devicePlugin.enabled=false"), "probe.enabled needs"),
    Refusal(
        ("--set", "resourceName=rockchip.com/npu-{soc}"), "resourceName=rockchip.com/npu-{soc} names one"
    ),
    Refusal(
        ("--kube-version", "1.33.0"), "dra.enabled needs resource.k8s.io/v1 (Kubernetes 1.34+)", "template"
    ),
)


# Installs that must go through: the defaults (a client-side dry run), the oldest Kubernetes the DRA
# driver serves, and a distribution's version string.
ACCEPTED = (
    ("install", ()),
    ("template", ("--kube-version", "1.34.0")),
    ("template", ("--kube-version", "v1.34.1+k3s1")),
)


class CheckError(Exception):
    """helm could not run at all; the message says what to do."""


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def helm_run(helm: Path, arguments: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(helm), *arguments], capture_output=True, text=True, check=False, cwd=REPO)


def render(helm: Path, arguments: Sequence[str]) -> list[dict[str, Any]]:
    """The objects of `helm template` with these arguments (CheckError when helm refuses)."""
    done = helm_run(helm, ["template", "rknpu", str(CHART), "--namespace", NAMESPACE, *arguments])
    if done.returncode != 0:
        raise CheckError(f"helm template {' '.join(arguments)} failed: {done.stderr.strip()}")
    return [document for document in yaml.safe_load_all(done.stdout) if document]


def versions_for(objects: list[dict[str, Any]]) -> list[str]:
    """The Kubernetes versions a render must be valid for: 1.28 too when it holds no DRA object."""
    has_dra = any(
        str(obj.get("apiVersion", "")).startswith(DRA_GROUP)
        or obj.get("metadata", {}).get("name") == "rknpu-dra-driver"
        for obj in objects
    )
    chosen = {DRA_OLDEST, *ALSO, NEWEST} | (set() if has_dra else {OLDEST})
    return sorted(chosen, key=_release)


def validate(objects: list[dict[str, Any]], versions: list[str]) -> tuple[int, list[str], list[str]]:
    """(objects valid, failure lines, skip lines) of one render."""
    valid, failures, skips = 0, [], []
    for obj in objects:
        where = f"{obj.get('kind')} {obj.get('metadata', {}).get('name')}"
        if (obj.get("apiVersion"), obj.get("kind")) in CRD_KINDS:
            skips.append(f"{where}: {obj['apiVersion']} is a CRD (no bundled schema)")
            continue
        for version in versions:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                failures.append(f"{where}: no Kubernetes {version} schema for {obj.get('apiVersion')}")
                break
            except kubernetes_validate.ValidationError as exc:
                location = "/".join(str(part) for part in exc.path) or "(top)"
                failures.append(f"{where} against Kubernetes {version}: {location}: {exc.message}")
                break
        else:
            valid += 1
    return valid, failures, skips


def _command_line(command: str, arguments: Sequence[str]) -> list[str]:
    """`helm install --dry-run=client` (no cluster) or `helm template` of the chart with arguments."""
    line = [command, "rknpu", str(CHART), "--namespace", NAMESPACE]
    if command == "install":
        line.append("--dry-run=client")
    return [*line, *arguments]


def refusal_problem(helm: Path, refusal: Refusal) -> tuple[str | None, str]:
    """(what is wrong or None, helm's refusal line) for one bad install."""
    done = helm_run(helm, _command_line(refusal.command, refusal.arguments))
    said = " ".join(line.strip() for line in done.stderr.splitlines() if line.strip())
    if done.returncode == 0:
        return f"helm installed {' '.join(refusal.arguments)} (a dry run), expected a refusal", said
    if refusal.says not in said:
        return f"helm refused {' '.join(refusal.arguments)} without saying {refusal.says!r}", said
    return None, said


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, help="where get_helm.py unpacks helm")
    args = parser.parse_args(argv)
    try:
        helm = fetch("helm", args.cache or default_cache())
        problems: list[str] = []
        print(helm_run(helm, ["version", "--short"]).stdout.strip() or "helm: no version")
        matrix = sorted(MATRIX.glob("*-values.yaml"))
        if not matrix:
            raise CheckError(f"no values files in {MATRIX}")
        for values in (None, *matrix):
            lint = ["lint", "--strict", str(CHART), *(["-f", str(values)] if values else [])]
            done = helm_run(helm, lint)
            if done.returncode != 0:
                problems.append(f"helm lint --strict {values.name if values else ''}: {done.stdout.strip()}")
        print(f"helm lint --strict: default values and {len(matrix)} values files, {len(problems)} failed")
        total = 0
        for values in matrix:
            objects = render(helm, ["-f", str(values)])
            versions = versions_for(objects)
            valid, failures, skips = validate(objects, versions)
            total += 1
            print(
                f"render {values.name}: {len(objects)} objects, {valid} valid against Kubernetes "
                f"{', '.join(versions)}, {len(skips)} CRD objects unchecked, {len(failures)} invalid"
            )
            problems += [f"{values.name}: {line}" for line in failures]
        print(f"{total} renders over the values matrix")
        for command, arguments in ACCEPTED:
            done = helm_run(helm, _command_line(command, arguments))
            what = f"helm {command} {' '.join(arguments) or '(default values)'}"
            print(f"{what}: {'accepted' if done.returncode == 0 else 'REFUSED'}")
            if done.returncode != 0:
                problems.append(f"{what} refused: {done.stderr.strip()}")
        for refusal in REFUSALS:
            problem, said = refusal_problem(helm, refusal)
            print(f"helm {refusal.command} {' '.join(refusal.arguments)}: {said}")
            if problem:
                problems.append(problem)
    except (CheckError, FetchError, OSError, yaml.YAMLError) as exc:
        print(f"check_chart: {exc}", file=sys.stderr)
        return 1
    for problem in problems:
        print(f"FAIL {problem}")
    print(f"chart: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
