#!/usr/bin/env bash
# CI: validate every Kubernetes manifest under deploy/ and samples/ against the Kubernetes schemas
# (kubernetes-validate, strict: unknown fields fail), for the oldest Kubernetes we support and the
# newest the tool knows, and Kubernetes 1.36 and 1.37 (DRA's consumable capacity, device taints
# GA) whatever the newest is. kustomization.yaml files and kinds with no bundled schema (CRDs such
# as monitoring.coreos.com PodMonitor) are skipped with a printed note; the Helm chart's sources
# (deploy/helm/) are templates, checked by rendering them (.ci/checks/helm.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
exec python - "$@" <<'PY'
import pathlib
import sys

import kubernetes_validate
import yaml

OLDEST = "1.28"  # oldest Kubernetes we support (first with CDI devices in the device plugin API)
ALSO = ("1.36", "1.37")  # named Kubernetes releases every manifest must also be valid for
NEWEST = ".".join(kubernetes_validate.latest_version().split(".")[:2])  # "1.37.0" -> "1.37"


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


versions = sorted({OLDEST, *ALSO, NEWEST}, key=_release)
# deploy/dra/ (the DRA driver) needs resource.k8s.io/v1, GA in Kubernetes 1.34: checked against
# 1.34 and the newest, and every kind there is built in, so a missing schema fails, never skips.
DRA_FOLDER = pathlib.Path("deploy/dra")
DRA_OLDEST = "1.34"
dra_versions = sorted({DRA_OLDEST, *ALSO, NEWEST}, key=_release)
CHART_SOURCES = pathlib.Path("deploy/helm")
files = sorted(p for folder in ("deploy", "samples") for p in pathlib.Path(folder).rglob("*.yaml"))
files += sorted(p for folder in ("deploy", "samples") for p in pathlib.Path(folder).rglob("*.yml"))
failures = checked = 0
for path in files:
    if CHART_SOURCES in path.parents:
        continue  # templates and values, not manifests: .ci/checks/helm.sh validates their renders
    if path.name in ("kustomization.yaml", "kustomization.yml"):
        print(f"skip {path}: kustomization file (not a Kubernetes resource)")
        continue
    try:
        documents = [doc for doc in yaml.safe_load_all(path.read_text()) if doc is not None]
    except yaml.YAMLError as exc:
        print(f"FAIL {path}: not valid YAML: {exc}")
        failures += 1
        continue
    for index, doc in enumerate(documents):
        if not isinstance(doc, dict) or "apiVersion" not in doc or "kind" not in doc:
            print(f"FAIL {path} (document {index + 1}): not a Kubernetes resource (no apiVersion/kind)")
            failures += 1
            continue
        name = (doc.get("metadata") or {}).get("name", "?")
        where = f"{path} (document {index + 1}, {doc['kind']} {name})"
        if doc["kind"] == "Kustomization":
            print(f"skip {where}: kustomization")
            continue
        if str(doc["apiVersion"]).startswith("kubescheduler.config.k8s.io/"):
            print(f"skip {where}: a component's configuration file (tests/samples/test_scheduler_profile.py)")
            continue
        is_dra = DRA_FOLDER in path.parents
        for version in dra_versions if is_dra else versions:
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                if is_dra:
                    print(f"FAIL {where}: no Kubernetes {version} schema for {doc['apiVersion']} {doc['kind']}")
                    failures += 1
                    break
                print(f"skip {where}: no schema for {doc['apiVersion']} {doc['kind']} (a CRD?)")
                break
            except kubernetes_validate.ValidationError as exc:
                location = "/".join(str(part) for part in exc.path) or "(top)"
                print(f"FAIL {where} against Kubernetes {version}: {location}: {exc.message}")
                failures += 1
                break
        else:
            checked += 1
            print(f"ok   {where} (Kubernetes {', '.join(dra_versions if is_dra else versions)})")
print(f"{checked} resource(s) valid, {failures} failure(s)")
sys.exit(1 if failures else 0)
PY
