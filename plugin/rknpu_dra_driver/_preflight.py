"""The DRA driver's start-up checks, before it takes the instance lock or binds a socket: the client
libraries, the host root, its folders, and how it reaches the API server (a kubeconfig that parses
and names a cluster, or an in-cluster service account). Each refusal is a `SettingsError` (exit 2)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rknnlaunch import SettingsError
from rknpu_serverkit import (
    check_host_root,
    check_kubelet_folder,
    check_modules,
    check_readable_file,
    check_writable_folder,
)

from ._settings import DraSettings

INSTALL_FIX = "pip install 'rknnlaunch[dra]' (the driver's image has it)"
# What `kubernetes.config.load_incluster_config` reads (the service account's projected volume).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
_KUBECONFIG_FIX = (
    "pass --kubeconfig (env RKNPU_DRA_KUBECONFIG or KUBECONFIG) naming a working kubeconfig "
    "(`kubectl --kubeconfig FILE version` checks it), or leave both unset in a pod with a service account"
)
_NEEDED_MODULES = {
    "kubernetes": "the Kubernetes API client",
    "yaml": "kubeconfig files",
    "grpc": "the kubelet's gRPC API",
    "google.protobuf": "the kubelet's gRPC messages",
}


def preflight(settings: DraSettings, environ: Mapping[str, str]) -> None:
    """Every input the driver uses, checked before anything is bound or registered."""
    needed = dict(_NEEDED_MODULES)
    if settings.inotify:
        needed["inotify_simple"] = "--inotify (or pass --no-inotify)"
    check_modules(needed, INSTALL_FIX)
    check_host_root(settings.host_root)
    check_kubelet_folder(settings.registration_dir, "--registration-dir")
    check_kubelet_folder(settings.resolved_plugin_dir, "--plugin-dir")
    check_writable_folder(settings.cdi_dir, "--cdi-dir")
    if settings.kubeconfig:
        check_kubeconfig(settings.kubeconfig)
    else:
        check_in_cluster(environ, Path(SERVICE_ACCOUNT_DIR))


def check_in_cluster(environ: Mapping[str, str], account_dir: Path) -> None:
    """No kubeconfig: the pod's service account must be there (its environment and token)."""
    missing = [
        name for name in ("KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT") if not environ.get(name)
    ]
    if missing:
        raise SettingsError(
            f"no kubeconfig and not in a cluster ({' and '.join(missing)} unset)", _KUBECONFIG_FIX
        )
    for name in ("token", "ca.crt"):
        if not (account_dir / name).is_file():
            raise SettingsError(
                f"no kubeconfig, and the pod has no service account token ({account_dir / name} is missing)",
                "set automountServiceAccountToken: true on the driver's pod (deploy/dra/daemonset.yaml), "
                "or pass --kubeconfig",
            )


def check_kubeconfig(value: str) -> None:
    """A kubeconfig (or kubectl's colon-separated list): each file readable YAML, merged as
    kubectl does (`rknpu_dra_driver.apiserver.read_kubeconfig`), the current context naming a
    cluster with a server URL, and the certificate files it names present."""
    from .apiserver import KubeconfigError, kubeconfig_paths, read_kubeconfig

    for path in kubeconfig_paths(value):
        check_readable_file(path, "--kubeconfig", _KUBECONFIG_FIX)
    try:
        config = read_kubeconfig(value)
    except KubeconfigError as exc:
        raise SettingsError(f"--kubeconfig {exc}", _KUBECONFIG_FIX) from None
    current = config.current_context
    if not current:
        raise SettingsError(f"--kubeconfig {value} has no current-context", _KUBECONFIG_FIX)
    context = config.contexts.get(current)
    if not isinstance(context, dict):
        raise SettingsError(
            f"--kubeconfig {value}: the current context {current!r} is not defined", _KUBECONFIG_FIX
        )
    cluster = config.clusters.get(str(context.get("cluster") or ""))
    if not isinstance(cluster, dict):
        raise SettingsError(
            f"--kubeconfig {value}: context {current!r} names cluster {context.get('cluster')!r}, "
            "which is not defined",
            _KUBECONFIG_FIX,
        )
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise SettingsError(
            f"--kubeconfig {value}: cluster {context.get('cluster')!r} has no https:// server URL "
            f"(got {server!r})",
            _KUBECONFIG_FIX,
        )
    user = config.users.get(str(context.get("user") or ""))
    sections: list[tuple[dict[str, Any], tuple[str, ...]]] = [(cluster, ("certificate-authority",))]
    if isinstance(user, dict):
        sections.append((user, ("client-certificate", "client-key", "tokenFile")))
    for section, keys in sections:
        for key in keys:
            file = config.path(section, key)
            if file is not None and not Path(file).is_file():
                raise SettingsError(f"--kubeconfig {value}: its {key} {file} does not exist", _KUBECONFIG_FIX)
