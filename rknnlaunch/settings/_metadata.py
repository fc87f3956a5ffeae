"""DRA device metadata (KEP-5304): the per-request file a DRA driver writes for a claim, built and read.

The format is kubernetes/dynamic-resource-allocation's (`api/metadata`, `kubeletplugin/metadata.go`;
docs/dra.md#device-metadata): a stream of JSON objects, the same `DeviceMetadata` once per API
version, newest first, each naming the claim and one request with its devices (driver, pool,
name, the slice's attributes). We write and read `metadata.resource.k8s.io/v1alpha1`; a reader
skips versions it does not know. The cores a device stands for are its `coreMask` attribute (the
one the ResourceSlice publishes), turned into cores by the shared mask model (`rknnlaunch.npu`).

Building (`metadata_document`, `encode_metadata`, the path helpers) is pure, for the DRA driver;
`read_metadata` is the one edge that reads the files, called where the allocation is resolved.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from .._errors import SettingsError
from ..npu import HostRoot, NpuInfo, cores_to_mask, format_cores, mask_to_cores, soc_by_name

if TYPE_CHECKING:
    from ._env import NpuSettings

METADATA_API_VERSION = "metadata.resource.k8s.io/v1alpha1"
"""The version we write and read (api/metadata/v1alpha1/register.go: group + version)."""
METADATA_KIND = "DeviceMetadata"
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
"""Where the files appear in a container (api/metadata/types.go `ContainerDir`)."""
RESOURCE_CLAIMS_SUBDIR = "resourceclaims"
"""Claims named in the pod spec (`resourceClaimName`): ``<claim name>/<request>/`` below it."""
RESOURCE_CLAIM_TEMPLATES_SUBDIR = "resourceclaimtemplates"
"""Claims from a template: ``<pod-local claim name>/<request>/`` below it."""
METADATA_FILE_SUFFIX = "-metadata.json"
"""A request's file is ``<driver name>-metadata.json`` (so several drivers never collide)."""
HOST_SUBDIR = "dra-device-metadata"
"""On the node, below the driver's plugin data dir: ``<namespace>_<claim>/<request>/metadata.json``."""
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
"""The claim annotation holding the pod-local name of a claim made from a template."""
DRA_DRIVER_NAME = "npu.rockchip.com"
"""The DRA driver's default name (`rknpu-dra-driver --driver-name`): the file name we look for."""
CORE_MASK_ATTRIBUTE = "coreMask"
"""The device attribute (as in the ResourceSlice) whose int value is the device's cores as a mask."""
SOC_ATTRIBUTE = "soc"


@dataclass(frozen=True)
class MetadataDevice:
    """One allocated device of a request, as the driver knows it: its pool and name, the cores it
    stands for, and its slice attributes (the library's advice: the same ones the slice publishes)."""

    pool: str
    name: str
    cores: frozenset[int]
    attributes: Mapping[str, Mapping[str, object]] = field(default_factory=dict)


def base_request(request: str) -> str:
    """``npu/pair`` (a firstAvailable subrequest) -> ``npu``: files are per base request."""
    return request.split("/", 1)[0]


def metadata_document(
    namespace: str,
    claim_name: str,
    claim_uid: str,
    request: str,
    devices: Sequence[MetadataDevice],
    *,
    driver: str = DRA_DRIVER_NAME,
    pod_claim_name: str | None = None,
    generation: int = 1,
) -> dict[str, object]:
    """The `DeviceMetadata` object a driver writes for one request of a prepared claim (``request``
    as the allocation result names it, subrequest included). Each device gets its ``coreMask``
    attribute from ``cores``; raises ValueError when its attributes already say another mask or
    it stands for no core."""
    listed: list[dict[str, object]] = []
    for device in devices:
        if not device.cores:
            raise ValueError(f"device {device.name} stands for no NPU core")
        mask = cores_to_mask(device.cores)
        attributes = {key: dict(value) for key, value in device.attributes.items()}
        given = attributes.get(CORE_MASK_ATTRIBUTE)
        if given is not None and given != {"int": mask}:
            raise ValueError(
                f"device {device.name}: attribute {CORE_MASK_ATTRIBUTE}={given} but cores mask {mask}"
            )
        attributes[CORE_MASK_ATTRIBUTE] = {"int": mask}
        listed.append({"driver": driver, "pool": device.pool, "name": device.name, "attributes": attributes})
    meta: dict[str, object] = {
        "name": claim_name,
        "namespace": namespace,
        "uid": claim_uid,
        "generation": generation,
    }
    document: dict[str, object] = {
        "apiVersion": METADATA_API_VERSION,
        "kind": METADATA_KIND,
        "metadata": meta,
    }
    if pod_claim_name:
        document["podClaimName"] = pod_claim_name
    document["requests"] = [{"name": request, "devices": listed}]
    return document


def encode_metadata(document: Mapping[str, object]) -> str:
    """The file's text: the stream of one object per version (we write one), each ending in a newline."""
    return json.dumps(document, indent=2) + "\n"


def container_file_path(
    claim_name: str, request: str, *, driver: str = DRA_DRIVER_NAME, pod_claim_name: str | None = None
) -> PurePosixPath:
    """Where the container sees a request's file: under ``resourceclaimtemplates/<pod claim name>``
    for a claim from a template (its real name is generated), else ``resourceclaims/<claim name>``."""
    if pod_claim_name:
        folder = PurePosixPath(CONTAINER_DIR, RESOURCE_CLAIM_TEMPLATES_SUBDIR, pod_claim_name)
    else:
        folder = PurePosixPath(CONTAINER_DIR, RESOURCE_CLAIMS_SUBDIR, claim_name)
    return folder / base_request(request) / f"{driver}{METADATA_FILE_SUFFIX}"


def host_file_path(plugin_data_dir: str | Path, namespace: str, claim_name: str, request: str) -> Path:
    """Where the driver writes a request's file on the node (the library's layout)."""
    return Path(
        plugin_data_dir, HOST_SUBDIR, f"{namespace}_{claim_name}", base_request(request), "metadata.json"
    )


def metadata_mount(
    plugin_data_dir: str | Path,
    namespace: str,
    claim_name: str,
    request: str,
    *,
    driver: str = DRA_DRIVER_NAME,
    pod_claim_name: str | None = None,
) -> dict[str, object]:
    """The CDI mount that shows a request's file read-only in the container (for the request's
    CDI device's ``containerEdits.mounts``; needs cdiVersion 0.3.0, no mount ``type``)."""
    return {
        "hostPath": str(host_file_path(plugin_data_dir, namespace, claim_name, request)),
        "containerPath": str(
            container_file_path(claim_name, request, driver=driver, pod_claim_name=pod_claim_name)
        ),
        "options": ["ro", "bind"],
    }


# --- reading ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MetadataCores:
    """What metadata files say this container was allocated: cores, SoCs, claims and requests."""

    files: tuple[str, ...]
    cores: frozenset[int]
    socs: frozenset[str]
    claims: tuple[str, ...]
    """``<namespace>/<name>/<uid>`` of each claim, in file order."""
    requests: tuple[str, ...]

    @property
    def source(self) -> str:
        """For messages and doctor: which file(s) and claim(s)."""
        return f"metadata file {', '.join(self.files)} (claim {', '.join(self.claims)})"


@dataclass(frozen=True)
class MetadataReading:
    """The outcome of looking for metadata: cores to use, or why the file(s) were not used."""

    cores: MetadataCores | None = None
    problem: str | None = None
    """One line: the file and what is wrong with it (the caller falls back to the env)."""


def first_known_object(text: str) -> Mapping[str, object]:
    """The first object of a metadata stream whose apiVersion we read; unknown versions skipped (a
    newer driver writes newer versions first). Raises ValueError saying what is wrong."""
    decoder = json.JSONDecoder()
    position, seen = 0, []
    while True:
        while position < len(text) and text[position].isspace():
            position += 1
        if position >= len(text):
            break
        try:
            value, position = decoder.raw_decode(text, position)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON stream ({exc.msg} at character {exc.pos})") from None
        if not isinstance(value, dict):
            raise ValueError("an entry of the stream is not a JSON object")
        version = value.get("apiVersion")
        if version == METADATA_API_VERSION:
            if value.get("kind") != METADATA_KIND:
                raise ValueError(
                    f"{METADATA_API_VERSION} entry of kind {value.get('kind')!r}, not {METADATA_KIND}"
                )
            return value
        if not isinstance(version, str) or not version:
            raise ValueError("an entry has no apiVersion")
        seen.append(version)
    if not seen:
        raise ValueError("the file is empty")
    raise ValueError(f"no {METADATA_API_VERSION} entry (only {', '.join(seen)})")


def document_cores(
    document: Mapping[str, object],
) -> tuple[frozenset[int], frozenset[str], str, tuple[str, ...]]:
    """(cores, SoCs, ``<namespace>/<name>/<uid>``, request names) of one DeviceMetadata object: the
    union of its NPU devices' ``coreMask``. Raises ValueError if malformed or naming no NPU device."""
    meta = document.get("metadata")
    if not isinstance(meta, Mapping):
        raise ValueError("no metadata (claim name, namespace, uid)")
    claim = "/".join(str(meta.get(key, "?")) for key in ("namespace", "name", "uid"))
    requests = document.get("requests", [])
    if not isinstance(requests, list):
        raise ValueError("requests is not a list")
    cores: set[int] = set()
    socs: set[str] = set()
    names: list[str] = []
    for request in requests:
        if not isinstance(request, Mapping) or not isinstance(request.get("name"), str):
            raise ValueError("a request has no name")
        names.append(str(request["name"]))
        devices = request.get("devices", [])
        if not isinstance(devices, list):
            raise ValueError(f"request {request['name']}: devices is not a list")
        for device in devices:
            if not isinstance(device, Mapping):
                raise ValueError(f"request {request['name']}: a device is not an object")
            attributes = device.get("attributes") or {}
            if not isinstance(attributes, Mapping):
                raise ValueError(f"device {device.get('name')}: attributes is not an object")
            mask = _int_attribute(attributes, CORE_MASK_ATTRIBUTE)
            if mask is None:
                continue  # not an NPU device of ours (another driver's, or no cores named)
            if mask <= 0:
                raise ValueError(f"device {device.get('name')}: {CORE_MASK_ATTRIBUTE} {mask} names no core")
            cores |= mask_to_cores(mask)
            soc = attributes.get(SOC_ATTRIBUTE)
            if isinstance(soc, Mapping) and isinstance(soc.get("string"), str):
                socs.add(str(soc["string"]))
    if not cores:
        raise ValueError(f"names no NPU device (no device with a {CORE_MASK_ATTRIBUTE} attribute)")
    return frozenset(cores), frozenset(socs), claim, tuple(names)


def _int_attribute(attributes: Mapping[str, object], name: str) -> int | None:
    # Unqualified names are the driver's domain; a reader may also meet the qualified form.
    for key, value in attributes.items():
        if key == name or key.endswith("/" + name):
            number = value.get("int") if isinstance(value, Mapping) else None
            if isinstance(number, int) and not isinstance(number, bool):
                return number
            raise ValueError(f"attribute {key} is not an int attribute ({value!r})")
    return None


def parse_metadata(files: Iterable[tuple[str, str]]) -> MetadataReading:
    """Pure: the reading of ``(path, text)`` pairs. Every file must be good: one bad file (garbled,
    or naming no NPU device) makes the whole reading a problem, so a partial allocation is never used."""
    paths: list[str] = []
    cores: set[int] = set()
    socs: set[str] = set()
    claims: list[str] = []
    requests: list[str] = []
    for path, text in files:
        try:
            file_cores, file_socs, claim, names = document_cores(first_known_object(text))
        except ValueError as exc:
            return MetadataReading(problem=f"metadata file {path} {_problem(exc)}")
        paths.append(path)
        cores |= file_cores
        socs |= file_socs
        if claim not in claims:
            claims.append(claim)
        requests.extend(names)
    if not paths:
        return MetadataReading()
    return MetadataReading(
        MetadataCores(tuple(paths), frozenset(cores), frozenset(socs), tuple(claims), tuple(requests))
    )


def _problem(exc: ValueError) -> str:
    text = str(exc)
    return text if text.startswith("names ") else f"is unreadable: {text}"


def metadata_files(location: str | None, host: HostRoot) -> tuple[list[Path], str | None]:
    """The files to read: ``location`` (RKNN_NPU_METADATA: a file, or a folder searched like the
    default) or the container folder under the host root; plus a problem when an explicit location
    is missing. No file under the default folder is no problem: the pod has no DRA metadata."""
    if location is not None:
        folder = Path(location)
        if folder.is_file():
            return [folder], None
        if not folder.is_dir():
            return [], f"metadata file {location} (RKNN_NPU_METADATA) does not exist"
    else:
        folder = host.local(CONTAINER_DIR)
        if not folder.is_dir():
            return [], None
    pattern = f"*/*/{DRA_DRIVER_NAME}{METADATA_FILE_SUFFIX}"
    found = sorted(
        path
        for sub in (RESOURCE_CLAIMS_SUBDIR, RESOURCE_CLAIM_TEMPLATES_SUBDIR)
        for path in (folder / sub).glob(pattern)
    )
    if not found and location is not None:
        return [], f"metadata folder {location} (RKNN_NPU_METADATA) holds no {DRA_DRIVER_NAME} metadata file"
    return found, None


def read_metadata(settings: NpuSettings, host: HostRoot) -> MetadataReading:
    """The edge: find and read this container's metadata files (see `metadata_files`)."""
    paths, problem = metadata_files(settings.metadata, host)
    if problem is not None:
        return MetadataReading(problem=problem)
    texts: list[tuple[str, str]] = []
    for path in paths:
        try:
            texts.append((str(path), path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            return MetadataReading(problem=f"metadata file {path} cannot be read: {reason}")
    return parse_metadata(texts)


def checked_metadata_cores(
    metadata: MetadataCores, info: NpuInfo, env_cores: frozenset[int] | None, env_source: str
) -> frozenset[int]:
    """The metadata's cores, checked against this NPU and against the env (which may name a subset,
    e.g. one request's CDI env in a container given two requests, never a core outside them)."""
    all_cores = frozenset(range(info.core_count))
    beyond = sorted(metadata.cores - all_cores)
    if beyond:
        raise SettingsError(
            f"{metadata.source} names core(s) {format_cores(beyond)}, but this {info.soc.name} has "
            f"{info.core_count} NPU core{'s' if info.core_count != 1 else ''}",
            "the file belongs to another node's allocation: check the DRA driver's slices for this node",
        )
    for name in metadata.socs:
        soc = soc_by_name(name)
        if soc is None or soc.npu_family != info.soc.npu_family:
            raise SettingsError(
                f"{metadata.source} says SoC {name!r} but this board's device tree says {info.soc.name}",
                "the file belongs to another node's allocation: check the DRA driver's slices for this node",
            )
    if env_cores is not None and not env_cores <= metadata.cores:
        raise SettingsError(
            f"{env_source} (cores {format_cores(env_cores)}) is not within the cores of "
            f"{metadata.source}: {format_cores(metadata.cores)}",
            "the env and the metadata file describe different allocations: unset RKNN_NPU_CORE_MASK / "
            "RKNN_NPU_CORES (the metadata file wins), or point RKNN_NPU_METADATA at this container's file",
        )
    return metadata.cores
