"""The shared NPU model: SoC table, core-mask algebra and host discovery (plugin and SDK both use it).

Pure standard library on purpose: the device plugin image and the workload image both import it.
"""

from ._discovery import (
    COMPATIBLE_PATH,
    DRIVER_DIRS,
    DeviceNode,
    HostRoot,
    NpuInfo,
    discover,
    parse_driver_version,
    parse_frequency,
    parse_load,
    read_frequency,
    read_load,
    version_tuple,
)
from ._masks import (
    ALL,
    AUTO,
    CoreSet,
    cores_to_mask,
    format_cores,
    is_runnable,
    mask_name,
    mask_to_cores,
    parse_mask,
    rknnlite_mask,
    runnable_core_sets,
    runnable_groups,
    runtime_effective_mask,
)
from ._soc import SOCS, SocSpec, models_compatible, soc_by_name, soc_from_compatible, split_compatible

__all__ = [
    "ALL",
    "AUTO",
    "COMPATIBLE_PATH",
    "DRIVER_DIRS",
    "SOCS",
    "CoreSet",
    "DeviceNode",
    "HostRoot",
    "NpuInfo",
    "SocSpec",
    "cores_to_mask",
    "discover",
    "format_cores",
    "is_runnable",
    "mask_name",
    "mask_to_cores",
    "models_compatible",
    "parse_driver_version",
    "parse_frequency",
    "parse_load",
    "parse_mask",
    "read_frequency",
    "read_load",
    "rknnlite_mask",
    "runnable_core_sets",
    "runnable_groups",
    "runtime_effective_mask",
    "soc_by_name",
    "soc_from_compatible",
    "split_compatible",
    "version_tuple",
]
