"""The DRA driver's start-up checks, before it takes the instance lock or binds a socket: the client
libraries, the host root, its folders, and how it reaches the API server (a kubeconfig that parses
and names a cluster, or an in-cluster service account). Each refusal is a `SettingsError` (exit 2)."""

from __future__ import annotations

import os
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
    kubectl does (the first file naming a context or cluster wins), the current context naming a
    cluster with a server URL, and the certificate files it names present."""
    import yaml

    contexts: dict[str, Any] = {}
    clusters: dict[str, Any] = {}
    users: dict[str, Any] = {}
    current = ""
    for part in [p for p in value.split(os.pathsep) if p]:
        path = Path(part).expanduser()
        check_readable_file(path, "--kubeconfig", _KUBECONFIG_FIX)
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or type(exc).__name__
            raise SettingsError(
                f"--kubeconfig {path} is not valid YAML{where}: {problem}", _KUBECONFIG_FIX
            ) from None
        if not isinstance(document, dict):
            raise SettingsError(
                f"--kubeconfig {path} is not a kubeconfig (not a YAML mapping)", _KUBECONFIG_FIX
            )
        for key, into in (("contexts", contexts), ("clusters", clusters), ("users", users)):
            _merge(path, key, document.get(key), into)
        current = current or str(document.get("current-context") or "")
    if not current:
        raise SettingsError(f"--kubeconfig {value} has no current-context", _KUBECONFIG_FIX)
    context = contexts.get(current)
    if not isinstance(context, dict):
        raise SettingsError(
            f"--kubeconfig {value}: the current context {current!r} is not defined", _KUBECONFIG_FIX
        )
    cluster = clusters.get(str(context.get("cluster") or ""))
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
    user = users.get(str(context.get("user") or ""))
    _check_files(cluster, ("certificate-authority",), value)
    if isinstance(user, dict):
        _check_files(user, ("client-certificate", "client-key", "tokenFile"), value)


def _merge(path: Path, key: str, entries: object, into: dict[str, Any]) -> None:
    if entries is None:
        return
    if not isinstance(entries, list):
        raise SettingsError(f"--kubeconfig {path}: {key} is not a list", _KUBECONFIG_FIX)
    inner = key[:-1]  # contexts -> context, clusters -> cluster, users -> user
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") and str(entry["name"]) not in into:
            body = entry.get(inner)
            # A relative certificate path is relative to the kubeconfig's folder (as kubectl reads it).
            into[str(entry["name"])] = {**body, "_dir": path.parent} if isinstance(body, dict) else body


def _check_files(section: dict[str, Any], keys: tuple[str, ...], value: str) -> None:
    for key in keys:
        named = section.get(key)
        if not named:
            continue
        file = Path(str(named)).expanduser()
        if not file.is_absolute():
            file = Path(section["_dir"]) / file
        if not file.is_file():
            raise SettingsError(f"--kubeconfig {value}: its {key} {file} does not exist", _KUBECONFIG_FIX)
