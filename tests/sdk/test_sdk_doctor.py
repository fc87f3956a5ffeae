"""`rknnlaunch doctor`: every check on fixture hosts, the JSON schema and the exit codes."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import pytest
from rknnfile_builder import write_rknn

from fakehost import link, write
from rknnlaunch.cli._main import main
from rknnlaunch.npu import HostRoot
from rknnlaunch.npu._librknnrt import find_librknnrt, parse_librknnrt_version
from rknnlaunch.preflight._checks import NPU_RUNTIME_CHECKS, CheckResult, exit_code, report_text, run_checks
from rknnlaunch.settings._env import load_settings

HostFactory = Callable[[str], HostRoot]
VERSION_LINE = b"librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)"


def add_librknnrt(host: HostRoot, line: bytes = VERSION_LINE, path: str = "/usr/lib/librknnrt.so") -> None:
    # An ELF-ish blob with the version string buried past the first read chunk boundary.
    write(host.root, path, b"\x7fELF" + b"\x00" * ((1 << 20) - 10) + line + b"\x00" + b"\x01" * 4096)


def ok_opener(path: Path) -> None:
    assert path.exists()


def by_id(results: list[CheckResult]) -> dict[str, CheckResult]:
    return {result.id: result for result in results}


def checks(
    host: HostRoot,
    model: Path | None = None,
    opener: Callable[[Path], None] = ok_opener,
    toolkit: str | None = "2.3.2",
    **env: str,
) -> dict[str, CheckResult]:
    settings = load_settings({"RKNNLAUNCH_ROOT": str(host.root), **env})
    return by_id(run_checks(settings, None, model, opener=opener, toolkit_version=lambda: toolkit))


def test_ready_rk3588_without_injection(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-drm")
    add_librknnrt(host)
    results = checks(host)
    assert {k: r.status for k, r in results.items()} == {
        "settings": "ok",
        "npu": "ok",
        "allocation": "warn",
        "device-nodes": "ok",
        "driver": "ok",
        "librknnrt": "ok",
        "rknn-toolkit-lite2": "ok",
        "device-tree": "ok",
    }
    assert "no allocation was injected" in results["allocation"].summary
    assert "cores 0,1,2 (mask 7" in results["allocation"].summary
    assert results["npu"].summary.startswith("rk3588 with 3 NPU cores")
    assert results["librknnrt"].summary == VERSION_LINE.decode() + ", from the image"
    assert results["librknnrt"].details["source"] == "image"
    assert results["device-nodes"].details["nodes"] == ["/dev/dri/card1", "/dev/dri/renderD129"]
    assert exit_code(list(results.values())) == 0


def test_allocation_and_split_groups(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-drm")
    add_librknnrt(host)
    allocation = checks(host, RKNN_NPU_CORE_MASK="5", RKNN_NPU_CORES="0,2")["allocation"]
    assert allocation.status == "ok"
    assert allocation.details["groups"] == [[0], [2]] and allocation.details["rknnlite_masks"] == [1, 4]
    assert "rknnlaunch.Pool runs {0} (core_mask=1) + {2} (core_mask=4)" in allocation.summary
    single = checks(host_factory("rk3568"), RKNN_NPU_CORE_MASK="1")["allocation"]
    assert single.details["rknnlite_masks"] == [0]  # single-core: the runtime takes only 0


def test_bad_allocation_fails(host_factory: HostFactory) -> None:
    host = host_factory("rk3576")
    result = checks(host, RKNN_NPU_CORE_MASK="4")["allocation"]
    assert result.status == "fail"
    assert "RKNN_NPU_CORE_MASK=4" in result.summary and "rk3576 has 2 NPU cores" in result.summary


def test_eacces_names_the_group_to_join(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-drm")

    def denied(path: Path) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    result = checks(host, opener=denied)["device-nodes"]
    gid = os.stat(host.root / "dev/dri/card1").st_gid
    assert result.status == "fail" and "permission denied" in result.summary
    assert (
        result.fix
        == f"run as a member of the node's render/video group: securityContext.supplementalGroups: [{gid}]"
    )
    assert result.details["gid"] == gid


def test_missing_and_dead_device_nodes(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-drm")
    result = checks(host, RKNN_NPU_DEVICE="/dev/dri/renderD130")["device-nodes"]
    assert result.status == "fail"
    assert result.summary == (
        "RKNN_NPU_DEVICE=/dev/dri/renderD130: that path does not exist in this container "
        "(the NPU's nodes here are /dev/dri/card1, /dev/dri/renderD129)"
    )
    # The variable is what is wrong: never `--device /dev/dri/renderD130`, a path that is not there.
    assert result.fix is not None and "--device" not in result.fix
    assert "unset RKNN_NPU_DEVICE" in result.fix and "/dev/dri/renderD129" in result.fix

    def enxio(path: Path) -> None:
        raise OSError(6, "No such device or address", str(path))

    dead = checks(host, opener=enxio)["device-nodes"]
    assert dead.status == "fail" and "ENXIO" in dead.summary


def test_old_driver_warns(host_factory: HostFactory) -> None:
    result = checks(host_factory("rk3568"))["driver"]
    assert result.status == "warn" and "0.8.2 is older than 0.9.2" in result.summary


def test_rocket_fails_and_explains(host_factory: HostFactory) -> None:
    results = checks(host_factory("rocket"))
    assert results["npu"].status == "fail"
    assert "rocket" in results["npu"].summary and "different stack" in results["npu"].summary
    assert results["npu"].fix and "vendor kernel" in results["npu"].fix
    assert results["allocation"].status == "skip"


def test_librknnrt_missing_misplaced_or_unversioned(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-drm")
    missing = checks(host)["librknnrt"]
    assert missing.status == "fail" and missing.fix and "/usr/lib/librknnrt.so" in missing.fix
    add_librknnrt(host, path="/usr/local/lib/librknnrt.so")
    assert (
        "found /usr/local/lib/librknnrt.so, where RKNNLite does not look" in checks(host)["librknnrt"].summary
    )
    add_librknnrt(host, line=b"nothing here")
    assert checks(host)["librknnrt"].status == "warn"


def test_librknnrt_version_parsing(host_factory: HostFactory) -> None:
    assert parse_librknnrt_version(b"\0" + VERSION_LINE + b"\0tail") == ("2.3.2", VERSION_LINE.decode())
    assert parse_librknnrt_version(b"librknnrt version: 1.5.2 (c6b7b351a@2023-08-23T15:28:22)")[0] == "1.5.2"
    assert parse_librknnrt_version(b"no version") == (None, None)
    host = host_factory("rk3588-drm")
    add_librknnrt(host)
    found = find_librknnrt(host)
    assert found is not None and found.version == "2.3.2"


def test_toolkit_missing_warns(host_factory: HostFactory) -> None:
    result = checks(host_factory("rk3588-drm"), toolkit=None)["rknn-toolkit-lite2"]
    assert result.status == "warn" and result.fix == "pip install 'rknnlaunch[npu]' on the aarch64 image"


def test_masked_device_tree_and_the_plugin_replacement(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-drm")
    (host.root / "proc/device-tree").unlink()  # what a container runtime's masking looks like
    (host.root / "sys/firmware/devicetree/base/compatible").unlink()
    results = checks(host, RKNN_NPU_SOC="rk3588")
    assert results["device-tree"].status == "fail"
    assert "Please specify the target" in results["device-tree"].summary
    write(host.root, "/run/rknpu/compatible", b"radxa,rock-5b\0rockchip,rk3588\0")
    results = checks(host, RKNN_NPU_COMPATIBLE_FILE="/run/rknpu/compatible")
    assert results["device-tree"].status == "ok" and results["device-tree"].details["redirected"]
    assert results["npu"].status == "ok"  # discovery reads the replacement too
    write(host.root, "/run/rknpu/compatible", b"brcm,bcm2712\0")
    results = checks(host, RKNN_NPU_COMPATIBLE_FILE="/run/rknpu/compatible")
    # Not a Rockchip SoC: the npu check says so, once; the runtime's checks are not run.
    assert (results["npu"].status, results["device-tree"].status) == ("fail", "skip")


def test_a_machine_without_an_npu_gets_one_result_for_one_cause(host_factory: HostFactory) -> None:
    """A plain x86 PC: one FAIL (no NPU) with its fix; nothing else failing or warning for the same
    cause, and no docker mount suggested for a device tree that does not exist."""
    results = checks(host_factory("no-npu"), toolkit=None)
    failing = {check: r.status for check, r in results.items() if r.status in ("fail", "warn")}
    assert failing == {"npu": "fail"}
    assert all(results[check].summary.startswith("not checked: no NPU found") for check in NPU_RUNTIME_CHECKS)
    text = report_text(list(results.values()), "/")
    assert "result: fail (1 check(s) failed)" in text and "docker" not in text


def test_docker_render_node_rule(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-render128")
    write(host.root, "/.dockerenv", "")
    assert checks(host)["docker-render-node"].status == "warn"
    assert "docker-render-node" not in checks(host_factory("rk3588-drm"))


def test_model_checks(host_factory: HostFactory, tmp_path: Path) -> None:
    host = host_factory("rk3588-drm")
    add_librknnrt(host)
    good = checks(host, write_rknn(tmp_path / "good.rknn", version="2.3.0", targets=("rk3588",)))
    assert [good[k].status for k in ("model", "model-target", "model-runtime")] == ["ok", "ok", "ok"]
    assert "toolkit 2.3.0, built for rk3588" in good["model"].summary
    newer = checks(host, write_rknn(tmp_path / "new.rknn", version="2.5.0", targets=("rk3576",)))
    assert newer["model-target"].status == "fail" and "target_platform='rk3588'" in (
        newer["model-target"].fix or ""
    )
    assert (
        newer["model-runtime"].status == "fail"
        and "Invalid RKNN model version" in newer["model-runtime"].summary
    )
    truncated = tmp_path / "cut.rknn"
    truncated.write_bytes((tmp_path / "good.rknn").read_bytes()[:50])
    cut = checks(host, truncated)
    assert cut["model"].status == "fail" and "truncated" in cut["model"].summary
    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"\x08\x07")
    assert checks(host, onnx)["model"].status == "warn"


def test_cli_json_schema_and_exit_codes(
    host_factory: HostFactory,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in (
        "RKNN_NPU_CORE_MASK",
        "RKNN_NPU_CORES",
        "RKNN_NPU_SOC",
        "RKNN_NPU_DEVICE",
        "RKNNLAUNCH_ROOT",
    ):
        monkeypatch.delenv(name, raising=False)
    host = host_factory("no-npu")
    assert main(["doctor", "--json", "--root", str(host.root)]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["schema"] == "rknnlaunch.doctor/1"
    assert report["status"] == "fail" and report["exit_code"] == 1 and report["root"] == str(host.root)
    assert set(report["checks"][0]) == {"id", "status", "summary", "fix", "details"}
    assert [c["id"] for c in report["checks"]][:3] == ["settings", "npu", "allocation"]
    assert main(["doctor", "--root", str(tmp_path / "missing")]) == 2
    assert "--root" in capsys.readouterr().err
    assert main(["doctor", "--bogus"]) == 2
    monkeypatch.setenv("RKNN_NPU_CORE_MASK", "many")
    assert main(["doctor", "--root", str(host.root)]) == 1
    text = capsys.readouterr().out
    assert "FAIL  settings" in text and "RKNN_NPU_CORE_MASK='many'" in text
    # The unreadable variable is reported; the readable ones (the root to look under) still count.
    monkeypatch.setenv("RKNNLAUNCH_ROOT", str(host_factory("rk3588-drm").root))
    main(["doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    by_id = {check["id"]: check for check in report["checks"]}
    assert by_id["settings"]["status"] == "fail" and by_id["npu"]["details"]["soc"] == "rk3588"
    # One cause, one result: an unreadable mask is not also reported as "unset" (issue 27).
    assert by_id["allocation"]["status"] == "skip"
    assert by_id["allocation"]["summary"] == (
        "not checked: RKNN_NPU_CORE_MASK cannot be read (see the settings check)"
    )
    monkeypatch.setenv("RKNN_NPU_CORE_MASK", "banana")
    main(["doctor"])
    text = capsys.readouterr().out
    assert "cannot read 'banana'" in text and "no allocation was injected" not in text


def test_cli_ok_exit_zero(
    host_factory: HostFactory, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    host = host_factory("rk3588-drm")
    add_librknnrt(host)
    regular_file_nodes(host)
    monkeypatch.setattr("rknnlaunch.preflight._checks.installed_toolkit_version", lambda: "2.3.2")
    monkeypatch.delenv("RKNN_NPU_CORE_MASK", raising=False)
    assert main(["doctor", "--root", str(host.root)]) == 0
    out = capsys.readouterr().out
    assert "WARN  allocation" in out and "result: warn" in out


def regular_file_nodes(host: HostRoot) -> None:
    """Replace fixture char devices (no driver behind them on the test machine) with plain files."""
    for node in (host.root / "dev").rglob("*"):
        if node.is_char_device():
            node.unlink()
            node.write_bytes(b"")
    link(host.root, "/dev/.keep-link", "/dev/null")


def test_real_opener_on_plain_files_and_missing_ones(tmp_path: Path) -> None:
    from rknnlaunch.preflight._checks import open_device

    node = write(tmp_path, "dev/dri/renderD129", b"")
    heap = write(tmp_path, "dev/dma_heap/system", b"", mode=0o444)
    open_device(node)
    open_device(heap)  # read-only suffices for a DMA heap
    with pytest.raises(FileNotFoundError):
        open_device(tmp_path / "dev/dri/renderD130")


def test_injected_device_that_is_not_the_npu_warns(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-drm")
    result = checks(host, RKNN_NPU_DEVICE="/dev/dri/renderD128")["device-nodes"]
    assert result.status == "warn" and "RKNN_NPU_DEVICE=/dev/dri/renderD128 is not one of" in result.summary
    assert checks(host, RKNN_NPU_DEVICE="/dev/dri/renderD129")["device-nodes"].status == "ok"


def test_librknnrt_source_host_mount_is_checked_against_the_mount_table(host_factory: HostFactory) -> None:
    host = host_factory("rk3588-drm")
    add_librknnrt(host)
    injected = {"RKNN_NPU_LIBRKNNRT_SOURCE": "host:/opt/rockchip/librknnrt.so"}
    # The plugin said so, but the runtime did not mount it: the image's copy is what loads.
    unmounted = checks(host, **injected)["librknnrt"]
    assert unmounted.status == "warn" and "no mount is there" in unmounted.summary
    assert unmounted.fix is not None and "--host-librknnrt" in unmounted.fix
    write(
        host.root,
        "/proc/self/mountinfo",
        "22 1 0:21 / / rw,relatime - overlay overlay rw\n"
        "612 22 179:2 /opt/rockchip/librknnrt.so /usr/lib/librknnrt.so ro,nosuid,nodev - ext4 /dev/sda2 rw\n",
    )
    mounted = checks(host, **injected)["librknnrt"]
    assert mounted.status == "ok"
    assert mounted.summary.endswith("mounted from the node's /opt/rockchip/librknnrt.so")
    assert (
        mounted.details["source"] == "host" and mounted.details["node_path"] == "/opt/rockchip/librknnrt.so"
    )


def test_mount_points_undo_escapes() -> None:
    from rknnlaunch.npu._librknnrt import mount_points

    text = "1 0 0:1 / /a\\040b rw - tmpfs t rw\nshort line\n"
    assert mount_points(text) == {"/a b"}
