"""What this container was given: its settings (injected env, DRA metadata file) and the NPU allocation
they resolve to."""

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
    from ._metadata import (
        CONTAINER_DIR,
        DRA_DRIVER_NAME,
        METADATA_API_VERSION,
        MetadataCores,
        MetadataDevice,
        MetadataReading,
        container_file_path,
        encode_metadata,
        host_file_path,
        metadata_document,
        metadata_mount,
        parse_metadata,
        read_metadata,
    )

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
    # DRA device metadata (KEP-5304): the DRA driver builds the file with these, the SDK reads it.
    "CONTAINER_DIR": "._metadata",
    "DRA_DRIVER_NAME": "._metadata",
    "METADATA_API_VERSION": "._metadata",
    "MetadataCores": "._metadata",
    "MetadataDevice": "._metadata",
    "MetadataReading": "._metadata",
    "container_file_path": "._metadata",
    "encode_metadata": "._metadata",
    "host_file_path": "._metadata",
    "metadata_document": "._metadata",
    "metadata_mount": "._metadata",
    "parse_metadata": "._metadata",
    "read_metadata": "._metadata",
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
    "CONTAINER_DIR",
    "DRA_DRIVER_NAME",
    "METADATA_API_VERSION",
    "MetadataCores",
    "MetadataDevice",
    "MetadataReading",
    "container_file_path",
    "encode_metadata",
    "host_file_path",
    "metadata_document",
    "metadata_mount",
    "parse_metadata",
    "read_metadata",
]
