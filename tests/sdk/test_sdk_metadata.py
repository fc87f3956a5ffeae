"""DRA device metadata (KEP-5304): the file's format built and read back, the allocation it gives,
its precedence over the env, and the fallback when it cannot be used (issue 33 item 5).

Fixtures follow kubernetes/dynamic-resource-allocation at 3d036712930cdac0b0d46c4c21316a78147c551f:
`devicemetadata/example_test.go` (its v1alpha1 GPU object, and its stream whose first entry is a
fictional v1000 a reader must skip), `api/metadata/v1alpha1/types.go` (field names) and
`kubeletplugin/metadata.go` (one request per file, pretty-printed entries each ending in a newline,
host and container paths, the CDI mount with options ro+bind).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from fakehost import write
from rknnlaunch._errors import SettingsError
from rknnlaunch.npu import HostRoot
from rknnlaunch.settings import (
    CONTAINER_DIR,
    MetadataDevice,
    container_file_path,
    encode_metadata,
    find_npu,
    host_file_path,
    load_settings,
    metadata_document,
    metadata_mount,
    parse_metadata,
    read_metadata,
    resolve_allocation,
)
from rknnlaunch.settings._metadata import document_cores, first_known_object

HostFactory = Callable[[str], HostRoot]

# devicemetadata/example_test.go, ExampleDecodeMetadataFromStream: a GPU, so no NPU device of ours.
UPSTREAM_GPU = (
    '{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMetadata","metadata":{"name":"my-claim",'
    '"namespace":"default","uid":"uid-1234","generation":1},"requests":[{"name":"gpu","devices":[{"driver":'
    '"gpu.example.com","pool":"worker-0","name":"gpu-0","attributes":{"model":{"string":"LATEST-GPU-MODEL"},'
    '"driverVersion":{"version":"1.0.0"},"type":{"string":"gpu"}}}]}]}'
)
# The same file's multi-version example: a newer (fictional) v1000 entry first, with other field names.
UPSTREAM_V1000 = (
    '{"apiVersion":"metadata.resource.k8s.io/v1000","kind":"DeviceMetadata","metadata":{"claimName":"my-claim",'
    '"claimNamespace":"default","uid":"uid-1234","generation":1},"requests":[{"name":"npu","devices":'
    '[{"driver":"npu.rockchip.com","pool":"worker-0","name":"npu-core-2"}]}]}'
)


def rk3588_attributes(cores: frozenset[int]) -> dict[str, dict[str, object]]:
    """A subset of the DRA driver's slice attributes (`rknpu_dra_driver._slices.device_attributes`)."""
    return {
        "soc": {"string": "rk3588"},
        "core": {"int": min(cores)},
        "cores": {"int": 3},
        "coreCount": {"int": len(cores)},
        "driverVersion": {"version": "0.9.8"},
    }


def device(name: str, *cores: int) -> MetadataDevice:
    core_set = frozenset(cores)
    return MetadataDevice("node-a", name, core_set, rk3588_attributes(core_set))


def npu_file(request: str = "npu", *devices: MetadataDevice, claim: str = "npu-claim") -> str:
    return encode_metadata(
        metadata_document("default", claim, "uid-1234", request, devices or (device("npu-core-2", 2),))
    )


# --- building --------------------------------------------------------------------------------


def test_the_document_has_the_libraries_shape() -> None:
    document = metadata_document(
        "default", "npu-claim", "uid-1234", "npu/pair", [device("npu-core-0", 0), device("npu-core-1", 1)]
    )
    assert document["apiVersion"] == "metadata.resource.k8s.io/v1alpha1"
    assert document["kind"] == "DeviceMetadata"
    assert document["metadata"] == {
        "name": "npu-claim",
        "namespace": "default",
        "uid": "uid-1234",
        "generation": 1,
    }
    assert "podClaimName" not in document  # omitempty, as the library's field
    (request,) = document["requests"]  # type: ignore[misc]
    assert request["name"] == "npu/pair"  # the subrequest stays in the content (metadata.go)
    assert [d["name"] for d in request["devices"]] == ["npu-core-0", "npu-core-1"]
    first = request["devices"][0]
    assert set(first) == {"driver", "pool", "name", "attributes"}
    assert first["driver"] == "npu.rockchip.com" and first["pool"] == "node-a"
    assert first["attributes"]["coreMask"] == {"int": 1}
    assert first["attributes"]["soc"] == {"string": "rk3588"}
    templated = metadata_document(
        "default", "pod-npu-x7k2", "u", "npu", [device("d", 2)], pod_claim_name="npu"
    )
    assert templated["podClaimName"] == "npu"


def test_encoded_as_a_stream_entry() -> None:
    text = npu_file()
    assert text.endswith("}\n") and text.count("\n") > 5  # pretty-printed, newline-terminated
    assert json.loads(text)["kind"] == "DeviceMetadata"


@pytest.mark.parametrize(
    ("devices", "error"),
    [
        ([MetadataDevice("p", "npu-core-0", frozenset())], "stands for no NPU core"),
        ([MetadataDevice("p", "npu-core-0", frozenset({0}), {"coreMask": {"int": 2}})], "but cores mask 1"),
    ],
)
def test_build_refuses_a_device_without_cores_or_with_a_contradicting_mask(
    devices: list[MetadataDevice], error: str
) -> None:
    with pytest.raises(ValueError, match=error):
        metadata_document("default", "c", "u", "npu", devices)


@pytest.mark.parametrize(
    ("claim", "request_name", "pod_claim", "container"),
    [
        ("npu-claim", "npu", None, "resourceclaims/npu-claim/npu/npu.rockchip.com-metadata.json"),
        ("npu-claim", "npu/pair", None, "resourceclaims/npu-claim/npu/npu.rockchip.com-metadata.json"),
        ("pod-npu-x7k2", "npu", "npu", "resourceclaimtemplates/npu/npu/npu.rockchip.com-metadata.json"),
    ],
)
def test_paths_and_the_cdi_mount(
    claim: str, request_name: str, pod_claim: str | None, container: str
) -> None:
    expected = f"{CONTAINER_DIR}/{container}"
    assert str(container_file_path(claim, request_name, pod_claim_name=pod_claim)) == expected
    plugin_dir = "/var/lib/kubelet/plugins/npu.rockchip.com"
    host = f"{plugin_dir}/dra-device-metadata/default_{claim}/npu/metadata.json"
    assert host_file_path(plugin_dir, "default", claim, request_name) == Path(host)
    mount = metadata_mount(plugin_dir, "default", claim, request_name, pod_claim_name=pod_claim)
    assert mount == {"hostPath": host, "containerPath": expected, "options": ["ro", "bind"]}


# --- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "cores", "requests"),
    [
        (npu_file(), {2}, ("npu",)),
        (npu_file("npu/pair", device("npu-core-0", 0), device("npu-core-1", 1)), {0, 1}, ("npu/pair",)),
        (npu_file("npu", device("npu-cores-0-1-2", 0, 1, 2)), {0, 1, 2}, ("npu",)),  # partitionable set
        (UPSTREAM_V1000 + "\n" + npu_file(), {2}, ("npu",)),  # an unknown newer version first: skipped
        (npu_file() + npu_file("other", device("npu-core-0", 0)), {2}, ("npu",)),  # first known entry only
        (npu_file().replace('"coreMask"', '"npu.rockchip.com/coreMask"'), {2}, ("npu",)),  # qualified name
    ],
    ids=["one-core", "pair", "whole-set", "newer-version-first", "first-entry", "qualified-attribute"],
)
def test_parse_reads_the_cores(text: str, cores: set[int], requests: tuple[str, ...]) -> None:
    reading = parse_metadata([("f.json", text)])
    assert reading.problem is None and reading.cores is not None
    assert reading.cores.cores == cores and reading.cores.requests == requests
    assert reading.cores.claims == ("default/npu-claim/uid-1234",)


def _no_npu() -> str:
    return npu_file().replace('"coreMask"', '"index"')


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "is unreadable: the file is empty"),
        (
            '{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMeta',
            "is unreadable: not a JSON stream",
        ),
        ("[1, 2]", "is unreadable: an entry of the stream is not a JSON object"),
        ('{"kind":"DeviceMetadata","metadata":{"name":"test"}}', "is unreadable: an entry has no apiVersion"),
        (UPSTREAM_V1000, "no metadata.resource.k8s.io/v1alpha1 entry (only metadata.resource.k8s.io/v1000)"),
        ('{"apiVersion":"metadata.resource.k8s.io/v1alpha1","metadata":{"name":"test"}}', "of kind None"),
        (
            '{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMetadata","metadata":{"name":"test"},'
            '"requests":"this-should-be-an-array"}',
            "requests is not a list",
        ),
        (UPSTREAM_GPU, "names no NPU device"),
        (_no_npu(), "names no NPU device"),
        (npu_file().replace('"int": 4', '"string": "4"'), "coreMask is not an int attribute"),
        (npu_file().replace('"int": 4', '"int": 0'), "coreMask 0 names no core"),
    ],
    ids=[
        "empty",
        "truncated",
        "not-an-object",
        "no-apiversion",
        "only-unknown-versions",
        "no-kind",
        "malformed",
        "upstream-gpu",
        "no-mask",
        "mask-not-int",
        "mask-zero",
    ],
)
def test_parse_says_what_is_wrong(text: str, says: str) -> None:
    reading = parse_metadata([("/m/f.json", text)])
    assert reading.cores is None and reading.problem is not None
    assert reading.problem.startswith("metadata file /m/f.json ")
    assert says in reading.problem and "\n" not in reading.problem


def test_several_files_add_up_and_one_bad_file_spoils_them_all() -> None:
    two = [
        ("a", npu_file("npu", device("npu-core-0", 0))),
        ("b", npu_file("npu", device("npu-core-1", 1), claim="b")),
    ]
    reading = parse_metadata(two)
    assert reading.cores is not None and reading.cores.cores == {0, 1}
    assert reading.cores.claims == ("default/npu-claim/uid-1234", "default/b/uid-1234")
    assert reading.cores.source == "metadata file a, b (claim default/npu-claim/uid-1234, default/b/uid-1234)"
    bad = parse_metadata([*two, ("c", "{")])
    assert bad.cores is None and bad.problem is not None and bad.problem.startswith("metadata file c ")
    assert parse_metadata([]).cores is None and parse_metadata([]).problem is None


def test_document_cores_round_trip() -> None:
    document = first_known_object(npu_file("npu", device("npu-core-0", 0), device("npu-core-2", 2)))
    assert document_cores(document) == (
        frozenset({0, 2}),
        frozenset({"rk3588"}),
        "default/npu-claim/uid-1234",
        ("npu",),
    )


# --- the files, the allocation and the precedence ---------------------------------------------


def put(root: Path, text: str, claim: str = "npu-claim", request: str = "npu") -> Path:
    return write(root, str(container_file_path(claim, request)), text)


def test_read_metadata_finds_the_file_under_the_root_and_an_explicit_one(tmp_path: Path) -> None:
    host = HostRoot(tmp_path)
    assert read_metadata(load_settings({}), host).cores is None  # no folder: quietly nothing
    assert read_metadata(load_settings({}), host).problem is None
    path = put(tmp_path, npu_file())
    reading = read_metadata(load_settings({}), host)
    assert reading.cores is not None and reading.cores.files == (str(path),)
    explicit = tmp_path / "elsewhere.json"
    explicit.write_text(npu_file("npu", device("npu-core-0", 0)))
    reading = read_metadata(load_settings({"RKNN_NPU_METADATA": str(explicit)}), host)
    assert reading.cores is not None and reading.cores.cores == {0}
    missing = read_metadata(load_settings({"RKNN_NPU_METADATA": str(tmp_path / "nope.json")}), host)
    assert missing.problem == f"metadata file {tmp_path / 'nope.json'} (RKNN_NPU_METADATA) does not exist"
    empty_dir = tmp_path / "empty"
    empty_dir.mkdir()
    reading = read_metadata(load_settings({"RKNN_NPU_METADATA": str(empty_dir)}), host)
    assert reading.problem is not None and "holds no npu.rockchip.com metadata file" in reading.problem


@pytest.mark.parametrize(
    ("env", "file_cores", "cores", "source"),
    [
        ({}, (2,), {2}, "metadata file"),
        ({"RKNN_NPU_CORE_MASK": "4"}, (2,), {2}, "metadata file"),  # agreeing env: the file is the source
        ({"RKNN_NPU_CORE_MASK": "1"}, (0, 1), {0, 1}, "metadata file"),  # env names a subset (one request)
        ({"RKNN_NPU_CORES": "0"}, None, {0}, "RKNN_NPU_CORES=0"),  # no file: the env as before
        ({}, None, {0, 1, 2}, "default: every core"),
    ],
)
def test_precedence(
    host_factory: HostFactory,
    env: dict[str, str],
    file_cores: tuple[int, ...] | None,
    cores: set[int],
    source: str,
) -> None:
    host = host_factory("rk3588-drm")
    if file_cores is not None:
        put(host.root, npu_file("npu", device("d", *file_cores)))
    target = find_npu(load_settings({"RKNNLAUNCH_ROOT": str(host.root), **env}))
    assert target.allocation.cores == cores and target.allocation.source.startswith(source)
    if file_cores is not None:
        assert target.allocation.injected and target.allocation.claim == "default/npu-claim/uid-1234"


@pytest.mark.parametrize(
    ("host_name", "env", "file_text", "says"),
    [
        (
            "rk3588-drm",
            {"RKNN_NPU_CORE_MASK": "4"},
            npu_file("npu", device("d", 0)),
            "is not within the cores of",
        ),
        ("rk3576", {}, npu_file("npu", device("d", 2)), "names core(s) 2, but this rk3576 has 2 NPU cores"),
        (
            "rk3576",
            {},
            npu_file("npu", device("d", 0)),
            "says SoC 'rk3588' but this board's device tree says rk3576",
        ),
        # the env's own checks still apply first, metadata or not
        (
            "rk3588-drm",
            {"RKNN_NPU_CORE_MASK": "3", "RKNN_NPU_CORES": "2"},
            npu_file(),
            "RKNN_NPU_CORE_MASK=3 means",
        ),
    ],
)
def test_contradictions_fail_with_the_fix(
    host_factory: HostFactory, host_name: str, env: dict[str, str], file_text: str, says: str
) -> None:
    host = host_factory(host_name)
    put(host.root, file_text)
    with pytest.raises(SettingsError) as caught:
        find_npu(load_settings({"RKNNLAUNCH_ROOT": str(host.root), **env}))
    assert says in caught.value.problem and caught.value.fix


@pytest.mark.parametrize("text", ["", "{garbled", UPSTREAM_GPU], ids=["empty", "garbled", "no-npu-device"])
def test_an_unusable_file_falls_back_to_the_env(host_factory: HostFactory, text: str) -> None:
    host = host_factory("rk3588-drm")
    put(host.root, text)
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root), "RKNN_NPU_CORE_MASK": "2"})
    target = find_npu(settings)
    assert target.allocation.cores == {1} and target.allocation.source == "RKNN_NPU_CORE_MASK=2"
    reading = read_metadata(settings, host)
    assert reading.problem is not None
    assert resolve_allocation(settings, target.info, reading).cores == {1}
