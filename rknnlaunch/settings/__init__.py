"""What this container was given: its settings (injected env) and the NPU allocation they resolve to."""

from typing import TYPE_CHECKING

from .._lazy import lazy_attributes

if TYPE_CHECKING:
    from ._allocation import (
        Allocation,
        NpuTarget,
        discover_npu,
        find_npu,
        normalised_env,
        requested_cores,
        resolve_allocation,
        select_cores,
    )
    from ._env import ENV_NAMES, NpuSettings, load_settings

# What other layers may use, by defining module; imported on first use (PEP 562), so importing
# the package costs nothing.
_LAZY = {
    "requested_cores": "._allocation",
    "Allocation": "._allocation",
    "ENV_NAMES": "._env",
    "NpuSettings": "._env",
    "NpuTarget": "._allocation",
    "discover_npu": "._allocation",
    "find_npu": "._allocation",
    "load_settings": "._env",
    "normalised_env": "._allocation",
    "resolve_allocation": "._allocation",
    "select_cores": "._allocation",
}


__getattr__ = lazy_attributes(__name__, _LAZY)


__all__ = [
    "requested_cores",
    "Allocation",
    "ENV_NAMES",
    "NpuSettings",
    "NpuTarget",
    "discover_npu",
    "find_npu",
    "load_settings",
    "normalised_env",
    "resolve_allocation",
    "select_cores",
]
