"""NPU discovery on the node, with fixes addressed to the node's operator (flags, mounts), not a pod."""

from __future__ import annotations

from rknnlaunch import DiscoveryError, NpuNotFoundError, UnknownSocError
from rknnlaunch.npu import HostRoot, NpuInfo, SocSpec, discover


def discover_on_node(host: HostRoot, soc_hint: SocSpec | None, env_prefix: str) -> NpuInfo:
    """`rknnlaunch.npu.discover` for the plugin and the exporter.

    The shared errors speak to a workload (set RKNN_NPU_SOC, request rockchip.com/npu); on the node
    the knobs are --soc and the --host-root mounts. Read errors (a driver unloading mid-scan)
    become a `DiscoveryError` too, so callers handle one exception type.
    """
    try:
        return discover(host, soc_hint=soc_hint)
    except UnknownSocError as exc:
        raise UnknownSocError(exc.problem, f"pass --soc (env {env_prefix}SOC), e.g. --soc rk3588") from None
    except NpuNotFoundError as exc:
        raise NpuNotFoundError(
            exc.problem,
            "load the rknpu driver on this node (`dmesg | grep -i rknpu`); in the DaemonSet, mount the "
            f"host's /sys and /dev under --host-root (now {host.root})",
        ) from None
    except OSError as exc:
        raise DiscoveryError(
            f"cannot read the host under {host.root}: {exc}",
            "retrying; check the --host-root mounts if this persists",
        ) from None
