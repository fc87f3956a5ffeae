"""Preflight checks: is this container ready to run a model on its NPU cores, and if not, why.

Each check returns a `CheckResult` (ok / warn / fail / skip, one line of reason, one line of fix).
Checks only read: the host under the settings' root, the environment through `NpuSettings`, and
(for device nodes) an injectable opener. `rknnlaunch doctor` and `rknnlaunch run` print them.
"""

from __future__ import annotations

import errno
import importlib.metadata
import os
import stat
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from .._errors import DiscoveryError, ModelError, SettingsError, UnsupportedDriverError
from ..npu import (
    COMPATIBLE_PATH,
    LIBRKNNRT_PATH,
    HostRoot,
    Librknnrt,
    NpuInfo,
    find_librknnrt,
    format_cores,
    librknnrt_source,
    mask_name,
    misplaced_copies,
    models_compatible,
    read_compatible,
    rknnlite_mask,
    runnable_groups,
    soc_from_compatible,
    version_tuple,
)
from ..settings import (
    Allocation,
    MetadataReading,
    NpuSettings,
    discover_npu,
    read_metadata,
    resolve_allocation,
)

if TYPE_CHECKING:  # .rknn reading (pydantic models) loads only when a model is checked
    from ..model import RknnModelInfo

Status = Literal["ok", "warn", "fail", "skip"]
SCHEMA = "rknnlaunch.doctor/1"
MIN_DRIVER = "0.9.2"
TOOLKIT_DISTRIBUTION = "rknn-toolkit-lite2"

NPU_RUNTIME_CHECKS = ("librknnrt", "rknn-toolkit-lite2", "device-tree")
"""The checks of what RKNNLite needs beside the NPU: skipped, not failed, when no NPU is found."""
NO_NPU_SKIP = "not checked: no NPU found (see the npu check)"

DeviceOpener = Callable[[Path], None]
ToolkitVersion = Callable[[], str | None]


@dataclass(frozen=True)
class CheckResult:
    """One line of the report."""

    id: str
    status: Status
    summary: str
    fix: str | None = None
    details: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "status": self.status,
            "summary": self.summary,
            "fix": self.fix,
            "details": self.details,
        }


def open_device(path: Path) -> None:
    """Open a node as librknnrt does (DMA heaps read-only, NPU nodes read-write), then close it."""
    access = os.O_RDONLY if path.parent.name == "dma_heap" else os.O_RDWR
    fd = os.open(path, access | os.O_CLOEXEC | os.O_NONBLOCK)
    os.close(fd)


def installed_toolkit_version() -> str | None:
    """rknn-toolkit-lite2's version from its metadata (never imported just to check)."""
    try:
        return importlib.metadata.version(TOOLKIT_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return None


@dataclass
class Findings:
    """What earlier checks learned, for the ones after them."""

    info: NpuInfo | None = None
    allocation: Allocation | None = None
    runtime: Librknnrt | None = None
    model: RknnModelInfo | None = None


def check_settings(settings_error: SettingsError | None) -> CheckResult:
    if settings_error is not None:
        return CheckResult("settings", "fail", settings_error.problem, settings_error.fix)
    return CheckResult("settings", "ok", "RKNN_NPU_* and RKNNLAUNCH_* variables are readable")


def check_npu(settings: NpuSettings, host: HostRoot, found: Findings) -> CheckResult:
    try:
        info = discover_npu(settings, host)
    except UnsupportedDriverError as exc:
        return CheckResult(
            "npu",
            "fail",
            f"{exc.problem}; the mainline `rocket` NPU driver is a different stack (Mesa/Teflon), "
            "librknnrt and RKNNLite only talk to Rockchip's rknpu driver",
            exc.fix,
            {"driver": "rocket"},
        )
    except DiscoveryError as exc:
        return CheckResult("npu", "fail", exc.problem, exc.fix)
    found.info = info
    kind = "DRM (card + render node)" if info.driver_kind == "drm" else "misc (/dev/rknpu)"
    return CheckResult(
        "npu",
        "ok",
        f"{info.soc.name} with {info.core_count} NPU core{'s' if info.core_count != 1 else ''} "
        f"(count from {info.core_count_source}); rknpu {kind} driver",
        None,
        {
            "soc": info.soc.name,
            "core_count": info.core_count,
            "core_count_source": info.core_count_source,
            "driver_kind": info.driver_kind,
            "nodes": list(info.device_paths),
            "notes": list(info.notes),
        },
    )


ALLOCATION_VARIABLES = ("RKNN_NPU_CORE_MASK", "RKNN_NPU_CORES")


def check_allocation(
    settings: NpuSettings,
    found: Findings,
    settings_error: SettingsError | None = None,
    metadata: MetadataReading | None = None,
) -> CheckResult:
    """The cores and their source (DRA metadata file, env, or every core); an unusable metadata
    file is one warning, on this result, with the env's allocation it fell back to."""
    result = _allocation_result(settings, found, settings_error, metadata)
    problem = metadata.problem if metadata is not None else None
    if problem is None:
        return result
    details = {**result.details, "metadata": {"files": [], "problem": problem}}
    if result.status not in ("ok", "warn"):  # the allocation's own failure is the one line
        return replace(result, details=details)
    fix = (
        "fix or remove the file (the DRA driver writes it at prepare; docs/dra.md#device-metadata), "
        "or unset RKNN_NPU_METADATA" + (f"; {result.fix}" if result.fix else "")
    )
    summary = f"{problem}: falling back to the env: {result.summary}"
    return replace(result, status="warn", summary=summary, fix=fix, details=details)


def _allocation_result(
    settings: NpuSettings,
    found: Findings,
    settings_error: SettingsError | None,
    metadata: MetadataReading | None,
) -> CheckResult:
    info = found.info
    unreadable = [v for v in ALLOCATION_VARIABLES if settings_error and v in settings_error.variables]
    if unreadable:  # one cause, one result: the settings check says what is wrong with it
        return CheckResult(
            "allocation",
            "skip",
            f"not checked: {' and '.join(unreadable)} cannot be read (see the settings check)",
        )
    if info is None:
        return CheckResult("allocation", "skip", "no NPU found, so no cores to allocate")
    try:
        allocation = resolve_allocation(settings, info, metadata)
    except SettingsError as exc:
        return CheckResult("allocation", "fail", exc.problem, exc.fix)
    found.allocation = allocation
    groups = runnable_groups(allocation.soc, allocation.cores, allocation.core_count)
    masks = [rknnlite_mask(allocation.soc, group, allocation.core_count) for group in groups]
    if len(groups) == 1:
        how = f"RKNNLite runs it as one context with core_mask={masks[0]} ({mask_name(masks[0])})"
    else:
        parts = " + ".join(
            f"{{{format_cores(g)}}} (core_mask={m})" for g, m in zip(groups, masks, strict=True)
        )
        how = f"RKNNLite cannot run these cores as one context: rknnlaunch.Pool runs {parts}"
    details = {
        "cores": sorted(allocation.cores),
        "mask": allocation.mask,
        "injected": allocation.injected,
        "source": allocation.source,
        "source_kind": _source_kind(allocation, metadata),
        "metadata": (
            {"files": list(metadata.cores.files), "problem": None}
            if metadata is not None and metadata.cores is not None
            else None
        ),
        "groups": [sorted(g) for g in groups],
        "rknnlite_masks": masks,
    }
    if not allocation.injected:
        return CheckResult(
            "allocation",
            "warn",
            f"no allocation was injected (RKNN_NPU_CORE_MASK / RKNN_NPU_CORES unset): using every core, "
            f"{allocation.describe()}; {how}",
            "in Kubernetes, request rockchip.com/npu in resources.limits so the device plugin assigns cores; "
            "outside Kubernetes (plain docker run) this default is expected",
            details,
        )
    return CheckResult(
        "allocation", "ok", f"{allocation.describe()} from {allocation.source}; {how}", None, details
    )


def _source_kind(allocation: Allocation, metadata: MetadataReading | None) -> str:
    if metadata is not None and metadata.cores is not None:
        return "metadata"
    return "env" if allocation.injected else "default"


def check_device_nodes(
    settings: NpuSettings, host: HostRoot, found: Findings, opener: DeviceOpener
) -> CheckResult:
    info = found.info
    paths: list[str] = list(info.device_paths) if info is not None else []
    if settings.device and settings.device not in paths:
        paths.insert(0, settings.device)
    if not paths:
        return CheckResult("device-nodes", "skip", "no NPU device nodes to check")
    usable: list[str] = []
    for path in paths:
        local = host.local(path)
        try:
            mode = local.stat()
        except OSError:
            if path == settings.device and (info is None or path not in info.device_paths):
                return _missing_injected_device(path, info)
            return CheckResult(
                "device-nodes",
                "fail",
                f"{path} does not exist in this container",
                "request rockchip.com/npu so the device plugin passes the NPU's nodes in; "
                "with docker run, add " + " ".join(f"--device {p}" for p in paths),
                {"missing": path},
            )
        try:
            opener(local)
        except PermissionError:
            gid = mode.st_gid
            return CheckResult(
                "device-nodes",
                "fail",
                f"{path}: permission denied (group {gid}, mode {stat.filemode(mode.st_mode)}, "
                f"this process runs as uid {os.getuid()} with groups {sorted(set(os.getgroups()))})",
                "run as a member of the node's render/video group: "
                f"securityContext.supplementalGroups: [{gid}]",
                {"path": path, "gid": gid, "errno": "EACCES"},
            )
        except OSError as exc:
            code = errno.errorcode.get(exc.errno or 0, str(exc.errno))
            return CheckResult(
                "device-nodes",
                "fail",
                f"{path} exists but cannot be opened: {exc.strerror or exc} ({code}); "
                "no driver answers behind it",
                "check `dmesg | grep -i rknpu` on the node; the rknpu module must be loaded",
                {"path": path, "errno": code},
            )
        usable.append(path)
    if info is not None and settings.device and settings.device not in info.device_paths:
        return CheckResult(
            "device-nodes",
            "warn",
            f"RKNN_NPU_DEVICE={settings.device} is not one of the NPU's nodes found here "
            f"({', '.join(info.device_paths)}); all are openable",
            "check the device plugin's logs: its discovery and this container's disagree",
            {"nodes": usable, "injected_device": settings.device},
        )
    return CheckResult(
        "device-nodes", "ok", f"{', '.join(usable)} present and openable", None, {"nodes": usable}
    )


def _missing_injected_device(path: str, info: NpuInfo | None) -> CheckResult:
    """RKNN_NPU_DEVICE names a path that is not there: the variable is wrong, not the container."""
    found = (
        f"the NPU's nodes here are {', '.join(info.device_paths)}" if info else "no NPU node was found here"
    )
    return CheckResult(
        "device-nodes",
        "fail",
        f"RKNN_NPU_DEVICE={path}: that path does not exist in this container ({found})",
        "unset RKNN_NPU_DEVICE (the device plugin sets it), or set it to the NPU's node "
        + (f"({', '.join(info.device_paths)})" if info else "(/dev/dri/renderD129 or /dev/rknpu)"),
        {"missing": path, "injected_device": path},
    )


def check_driver(found: Findings) -> CheckResult:
    info = found.info
    if info is None:
        return CheckResult("driver", "skip", "no NPU found")
    if info.driver_version is None:
        return CheckResult(
            "driver",
            "warn",
            "rknpu driver version not readable (debugfs needs root; /sys/module/rknpu/version absent)",
            "run `cat /sys/kernel/debug/rknpu/version` as root on the node to see it; "
            "0.9.2 or newer is recommended",
        )
    details = {"version": info.driver_version, "source": info.driver_version_source}
    if version_tuple(info.driver_version) < version_tuple(MIN_DRIVER):
        return CheckResult(
            "driver",
            "warn",
            f"rknpu driver {info.driver_version} is older than {MIN_DRIVER}",
            f"update the board's vendor kernel (rknpu driver {MIN_DRIVER} or newer); "
            "older drivers miss fixes librknnrt 2.x relies on",
            details,
        )
    return CheckResult(
        "driver",
        "ok",
        f"rknpu driver {info.driver_version} (from {info.driver_version_source})",
        None,
        details,
    )


def check_librknnrt(host: HostRoot, found: Findings, injected_source: str | None = None) -> CheckResult:
    source, node_path = librknnrt_source(host, injected_source)
    origin = "from the image" if source == "image" else f"mounted from the node's {node_path}"
    try:
        runtime = find_librknnrt(host)
    except OSError as exc:
        return CheckResult(
            "librknnrt",
            "fail",
            f"{LIBRKNNRT_PATH} is not readable: {exc.strerror or exc}",
            f"make {LIBRKNNRT_PATH} world-readable (chmod 644)",
        )
    if runtime is None:
        elsewhere = misplaced_copies(host)
        where = f"; found {', '.join(elsewhere)}, where RKNNLite does not look" if elsewhere else ""
        return CheckResult(
            "librknnrt",
            "fail",
            f"{LIBRKNNRT_PATH} is missing{where}",
            f"install librknnrt.so at {LIBRKNNRT_PATH} (from rknn-toolkit2: rknpu2/runtime/Linux/librknn_api/"
            "aarch64/); the rknnlaunch base image has it",
            {"misplaced": list(elsewhere)},
        )
    found.runtime = runtime
    details = {
        "path": runtime.path,
        "version": runtime.version,
        "version_line": runtime.version_line,
        "size": runtime.size,
        "source": "image" if source == "image" else "host",
        "node_path": node_path,
    }
    if source == "host?":
        return CheckResult(
            "librknnrt",
            "warn",
            f"the device plugin says it mounts the node's {node_path} at {LIBRKNNRT_PATH}, but no mount "
            f"is there: RKNNLite loads the image's copy ({runtime.version_line or runtime.version})",
            "check that the container runtime applies the plugin's Allocate mounts (or use its --cdi "
            "spec); or drop --host-librknnrt on the plugin",
            details,
        )
    if runtime.version is None:
        return CheckResult(
            "librknnrt",
            "warn",
            f"{LIBRKNNRT_PATH} has no embedded version string",
            "replace it with a release build of librknnrt.so from rknn-toolkit2",
            details,
        )
    # A simulated stand-in (test images, the local demo: images/build.sh --librknnrt-standin) says
    # so in its version line; say it louder here, so it is never taken for Rockchip's runtime.
    standin = "(simulated" in (runtime.version_line or "")
    details["standin"] = standin
    return CheckResult(
        "librknnrt",
        "ok",
        ("STAND-IN, not Rockchip's runtime: " if standin else "")
        + f"{runtime.version_line or f'librknnrt {runtime.version}'}, {origin}",
        None,
        details,
    )


def check_toolkit(toolkit_version: ToolkitVersion) -> CheckResult:
    version = toolkit_version()
    if version is None:
        return CheckResult(
            "rknn-toolkit-lite2",
            "warn",
            "rknn-toolkit-lite2 is not installed: Python apps cannot use the NPU (C/C++ apps linking "
            "librknnrt directly do not need it)",
            "pip install 'rknnlaunch[npu]' on the aarch64 image",
        )
    return CheckResult(
        "rknn-toolkit-lite2", "ok", f"rknn-toolkit-lite2 {version} installed", None, {"version": version}
    )


def check_device_tree(settings: NpuSettings, host: HostRoot) -> CheckResult:
    entries = read_compatible(host, COMPATIBLE_PATH)
    if entries:
        return CheckResult(
            "device-tree",
            "ok",
            f"{COMPATIBLE_PATH} readable: {', '.join(entries)}",
            None,
            {"path": COMPATIBLE_PATH, "compatible": list(entries)},
        )
    replacement = settings.compatible_file
    if replacement:
        entries = read_compatible(host, replacement)
        if entries and soc_from_compatible("\0".join(entries)) is not None:
            return CheckResult(
                "device-tree",
                "ok",
                f"{COMPATIBLE_PATH} is masked here, but RKNN_NPU_COMPATIBLE_FILE={replacement} names "
                f"{', '.join(entries)}; rknnlaunch makes RKNNLite read it (in-process in open(), and in "
                "children of `rknnlaunch run`)",
                None,
                {"path": replacement, "compatible": list(entries), "redirected": True},
            )
        return CheckResult(
            "device-tree",
            "fail",
            f"{COMPATIBLE_PATH} is masked and RKNN_NPU_COMPATIBLE_FILE={replacement} is "
            + ("not readable" if not entries else f"not a Rockchip NPU SoC ({', '.join(entries)})"),
            "check the device plugin's mount of the host's /proc/device-tree/compatible at that path",
            {"path": replacement},
        )
    return CheckResult(
        "device-tree",
        "fail",
        f"{COMPATIBLE_PATH} is not readable (container runtimes mask it) and no "
        "RKNN_NPU_COMPATIBLE_FILE is set: RKNNLite's init_runtime fails with 'Please specify the target'",
        "request rockchip.com/npu (the device plugin mounts the file at /run/rknpu/compatible and sets "
        "RKNN_NPU_COMPATIBLE_FILE); with docker run: "
        "-v /proc/device-tree/compatible:/run/rknpu/compatible:ro "
        "-e RKNN_NPU_COMPATIBLE_FILE=/run/rknpu/compatible",
    )


def check_docker_render_node(host: HostRoot) -> CheckResult | None:
    """rknn-toolkit-lite2 insists on /dev/dri/renderD129 when /.dockerenv exists."""
    if not host.exists("/.dockerenv"):
        return None
    if host.exists("/dev/dri/renderD129"):
        return CheckResult("docker-render-node", "ok", "/.dockerenv present and /dev/dri/renderD129 exists")
    return CheckResult(
        "docker-render-node",
        "warn",
        "/.dockerenv exists and /dev/dri/renderD129 does not: rknn-toolkit-lite2 checks for that exact node "
        "inside Docker",
        "pass the NPU's render node as /dev/dri/renderD129 (docker run --device /dev/dri/renderD128:/dev/dri/"
        "renderD129 on boards without a GPU driver)",
    )


def check_model(path: Path, found: Findings) -> list[CheckResult]:
    """Header, target SoC and toolkit-vs-runtime version of ``path``."""
    if path.suffix.lower() == ".onnx":
        return [
            CheckResult(
                "model",
                "warn",
                f"{path} is an ONNX model: the NPU needs its .rknn export",
                "convert it with rknn-toolkit2 (load_onnx, build, export_rknn); rknnlaunch.open "
                "runs ONNX models on the CPU backend",
            )
        ]
    try:
        from ..model import read_rknn

        model = read_rknn(path)
    except ModelError as exc:
        return [CheckResult("model", "fail", exc.problem, exc.fix, {"path": str(path)})]
    found.model = model
    tensors = "; ".join(
        [f"in {t.describe()}" for t in model.inputs] + [f"out {t.describe()}" for t in model.outputs]
    )
    summary = (
        f"{path.name}: .rknn format {model.format_version}, toolkit {model.toolkit_version or '?'}, "
        f"built for {', '.join(model.target_platforms) or '?'}" + (f"; {tensors}" if tensors else "")
    )
    warnings = model.warnings()
    results = [
        CheckResult(
            "model",
            "warn" if warnings else "ok",
            summary + "".join(f"; {problem}" for problem, _ in warnings),
            "; ".join(fix for _, fix in warnings) or None,
            model.as_dict(),
        )
    ]
    info = found.info
    if info is None or not model.target_platforms:
        results.append(CheckResult("model-target", "skip", "no NPU found or no target platform in the model"))
    elif any(models_compatible(p, info.soc) for p in model.target_platforms):
        results.append(
            CheckResult(
                "model-target",
                "ok",
                f"built for {', '.join(model.target_platforms)}, runs on {info.soc.name}",
            )
        )
    else:
        results.append(
            CheckResult(
                "model-target",
                "fail",
                f"built for {', '.join(model.target_platforms)}, but this board is {info.soc.name}",
                f"re-export it with rknn-toolkit2 using rknn.config(target_platform='{info.soc.name}')",
            )
        )
    runtime = found.runtime
    if runtime is None or runtime.version is None or not model.toolkit_version:
        results.append(CheckResult("model-runtime", "skip", "librknnrt or model toolkit version unknown"))
    elif version_tuple(runtime.version) >= version_tuple(model.toolkit_version):
        results.append(
            CheckResult(
                "model-runtime",
                "ok",
                f"librknnrt {runtime.version} >= toolkit {model.toolkit_version} that built it",
            )
        )
    else:
        results.append(
            CheckResult(
                "model-runtime",
                "fail",
                f"the model was built by rknn-toolkit2 {model.toolkit_version} but librknnrt is "
                f"{runtime.version}: init_runtime would fail with 'Invalid RKNN model version'",
                f"install librknnrt.so {model.toolkit_version} or newer at {LIBRKNNRT_PATH}, "
                f"or rebuild the model with rknn-toolkit2 {runtime.version}",
            )
        )
    return results


def run_checks(
    settings: NpuSettings,
    settings_error: SettingsError | None = None,
    model: Path | None = None,
    *,
    opener: DeviceOpener = open_device,
    toolkit_version: ToolkitVersion = installed_toolkit_version,
    found: Findings | None = None,
) -> list[CheckResult]:
    """Every check, in report order. Pass ``found`` to keep what they discovered (`run` reuses it)."""
    host = HostRoot(settings.root)
    found = found if found is not None else Findings()
    results = [check_settings(settings_error), check_npu(settings, host, found)]
    metadata = read_metadata(settings, host)
    results.append(check_allocation(settings, found, settings_error, metadata))
    results.append(check_device_nodes(settings, host, found, opener))
    results.append(check_driver(found))
    if found.info is None:
        # One cause, one result: with no NPU here, what RKNNLite would need next to it is moot
        # (and on a PC the fixes would send users after a device tree that does not exist).
        results.extend(CheckResult(check, "skip", NO_NPU_SKIP) for check in NPU_RUNTIME_CHECKS)
    else:
        results.append(check_librknnrt(host, found, settings.librknnrt_source))
        results.append(check_toolkit(toolkit_version))
        results.append(check_device_tree(settings, host))
        docker = check_docker_render_node(host)
        if docker is not None:
            results.append(docker)
    if model is not None:
        results.extend(check_model(model, found))
    return results


def overall(results: list[CheckResult]) -> Status:
    statuses = {result.status for result in results}
    return "fail" if "fail" in statuses else "warn" if "warn" in statuses else "ok"


def exit_code(results: list[CheckResult]) -> int:
    return 1 if overall(results) == "fail" else 0


def report_json(results: list[CheckResult], root: str) -> dict[str, Any]:
    from .._version import __version__

    return {
        "schema": SCHEMA,
        "rknnlaunch_version": __version__,
        "root": root,
        "status": overall(results),
        "exit_code": exit_code(results),
        "checks": [result.as_dict() for result in results],
    }


def report_text(results: list[CheckResult], root: str) -> str:
    width = max(len(result.id) for result in results)
    lines = [f"rknnlaunch doctor (root {root})"]
    for result in results:
        lines.append(f"  {result.status.upper():<4}  {result.id:<{width}}  {result.summary}")
        if result.fix and result.status in ("warn", "fail"):
            lines.append(f"  {'':<4}  {'':<{width}}  fix: {result.fix}")
    status = overall(results)
    failed = sum(result.status == "fail" for result in results)
    lines.append(f"result: {status}" + (f" ({failed} check(s) failed)" if failed else ""))
    return "\n".join(lines)
