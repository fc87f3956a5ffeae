"""The one kubeconfig reader: a file, or kubectl's colon-separated list (``KUBECONFIG=a:b``) merged
as kubectl merges it: the first file naming a context, cluster or user wins, and the first
current-context. The start-up checks and the light transport both read it here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_SECTIONS = ("contexts", "clusters", "users")


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; the message names the file and what is wrong with it."""


@dataclass(frozen=True)
class Kubeconfig:
    """The merged kubeconfig. Each context, cluster and user body carries ``_dir``, its file's
    folder: a relative certificate path is relative to it (as kubectl reads it)."""

    current_context: str
    contexts: Mapping[str, Any]
    clusters: Mapping[str, Any]
    users: Mapping[str, Any]

    def named(self, kind: str, name: str) -> dict[str, Any]:
        """The body of context, cluster or user ``name``; KubeconfigError when none is defined."""
        found = {"context": self.contexts, "cluster": self.clusters, "user": self.users}[kind].get(name)
        if not isinstance(found, dict):
            raise KubeconfigError(f"the kubeconfig has no {kind} {name!r}")
        return found

    def path(self, section: Mapping[str, Any], key: str) -> str | None:
        """The file ``section[key]`` names, relative to the folder of the file that defined it."""
        named = section.get(key)
        if not named:
            return None
        return os.path.join(str(section.get("_dir") or "."), os.path.expanduser(str(named)))


def kubeconfig_paths(value: str) -> list[Path]:
    """The files of a kubeconfig setting: one path, or kubectl's ``os.pathsep``-separated list."""
    return [Path(part).expanduser() for part in value.split(os.pathsep) if part]


def read_kubeconfig(value: str) -> Kubeconfig:
    """Read and merge the files ``value`` names (OSError when one cannot be read)."""
    import yaml

    sections: dict[str, dict[str, Any]] = {key: {} for key in _SECTIONS}
    current = ""
    for path in kubeconfig_paths(value):
        try:
            document = yaml.safe_load(path.read_text(encoding="utf-8", errors="replace"))
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" (line {mark.line + 1})" if mark is not None else ""
            problem = getattr(exc, "problem", None) or getattr(exc, "reason", None) or type(exc).__name__
            raise KubeconfigError(f"{path} is not valid YAML{where}: {problem}") from None
        if not isinstance(document, dict):
            raise KubeconfigError(f"{path} is not a kubeconfig (not a YAML mapping)")
        for key in _SECTIONS:
            _merge(path, key, document.get(key), sections[key])
        current = current or str(document.get("current-context") or "")
    return Kubeconfig(current, sections["contexts"], sections["clusters"], sections["users"])


def _merge(path: Path, key: str, entries: object, into: dict[str, Any]) -> None:
    if entries is None:
        return
    if not isinstance(entries, list):
        raise KubeconfigError(f"{path}: {key} is not a list")
    inner = key[:-1]  # contexts -> context, clusters -> cluster, users -> user
    for entry in entries:
        if isinstance(entry, dict) and entry.get("name") and str(entry["name"]) not in into:
            body = entry.get(inner)
            into[str(entry["name"])] = {**body, "_dir": path.parent} if isinstance(body, dict) else body
