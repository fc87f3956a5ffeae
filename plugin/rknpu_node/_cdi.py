"""The CDI minimum-version rule: the lowest ``cdiVersion`` a spec's content needs, decided the way
the CDI library does (container-device-interface specs-go/version.go), so older runtimes read it.

podman 4.3 (Debian 12) and containerd 1.7 before early 2024 read up to 0.5.0; 0.6.0 adds
annotations (and dots in the kind's class), 0.7.0 IntelRdt and additionalGids.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

CDI_EARLIEST = "0.3.0"
"""The earliest version the CDI library still accepts."""


def _edits(spec: Mapping[str, object]) -> Iterable[Mapping[str, object]]:
    top = spec.get("containerEdits")
    if isinstance(top, Mapping):
        yield top
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else ():
        if isinstance(device, Mapping) and isinstance(device.get("containerEdits"), Mapping):
            yield device["containerEdits"]


def _requires_060(spec: Mapping[str, object]) -> bool:
    if spec.get("annotations"):
        return True
    devices = spec.get("devices")
    if isinstance(devices, list) and any(isinstance(d, Mapping) and d.get("annotations") for d in devices):
        return True
    kind = str(spec.get("kind", ""))
    vendor, _, kind_class = kind.partition("/")
    return bool(vendor) and "." in kind_class


def _requires_050(spec: Mapping[str, object]) -> bool:
    devices = spec.get("devices")
    for device in devices if isinstance(devices, list) else ():
        name = str(device.get("name", "")) if isinstance(device, Mapping) else ""
        if name and not ("a" <= name[0].lower() <= "z"):
            return True  # a device name starting with other than an ASCII letter came with 0.5.0
    return any(
        isinstance(node, Mapping) and node.get("hostPath")
        for edits in _edits(spec)
        for node in (edits.get("deviceNodes") or ())  # type: ignore[attr-defined]
    )


def _requires_040(spec: Mapping[str, object]) -> bool:
    return any(
        isinstance(mount, Mapping) and mount.get("type")
        for edits in _edits(spec)
        for mount in (edits.get("mounts") or ())  # type: ignore[attr-defined]
    )


def _requires_070(spec: Mapping[str, object]) -> bool:
    return any(edits.get("intelRdt") is not None or edits.get("additionalGids") for edits in _edits(spec))


def minimum_cdi_version(spec: Mapping[str, object]) -> str:
    """The lowest cdiVersion whose features cover ``spec`` (its own ``cdiVersion`` is ignored)."""
    for version, required in (
        ("0.7.0", _requires_070),
        ("0.6.0", _requires_060),
        ("0.5.0", _requires_050),
        ("0.4.0", _requires_040),
    ):
        if required(spec):
            return version
    return CDI_EARLIEST


def with_minimum_version(spec: dict[str, object]) -> dict[str, object]:
    """``spec`` with ``cdiVersion`` first, set to `minimum_cdi_version`."""
    body = {key: value for key, value in spec.items() if key != "cdiVersion"}
    return {"cdiVersion": minimum_cdi_version(body), **body}
