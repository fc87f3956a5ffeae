"""CPU topology for worker placement: which CPUs are the big ones, read from sysfs under a host root.

RK3588 pairs four Cortex-A55 with four Cortex-A76; letterbox and decode run ~2x faster on the
A76s. The big cores are found from ``cpu_capacity`` (arm64 exposes it) or, failing that,
``cpufreq/cpuinfo_max_freq``: never hard-coded, so other big.LITTLE boards work too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..npu import HostRoot

_CPU_DIR = "/sys/devices/system/cpu"
_CPU_NAME = re.compile(r"cpu(\d+)$")


def big_cpus(ratings: Mapping[int, int]) -> frozenset[int]:
    """The CPUs with the highest rating (capacity or max frequency); empty when there is no rating.

    On a symmetric machine every CPU is "big"; callers then gain nothing from pinning.
    """
    if not ratings:
        return frozenset()
    best = max(ratings.values())
    return frozenset(cpu for cpu, rating in ratings.items() if rating == best)


def cpu_ratings(host: HostRoot) -> dict[int, int]:
    """CPU number -> ``cpu_capacity`` for every CPU that has one, else -> ``cpuinfo_max_freq``."""
    try:
        names = host.listdir(_CPU_DIR)
    except OSError:
        return {}
    cpus = sorted(int(match.group(1)) for name in names if (match := _CPU_NAME.match(name)))
    for leaf in ("cpu_capacity", "cpufreq/cpuinfo_max_freq"):
        ratings: dict[int, int] = {}
        for cpu in cpus:
            try:
                ratings[cpu] = int(host.read_text(f"{_CPU_DIR}/cpu{cpu}/{leaf}").strip())
            except (OSError, ValueError):
                break
        else:
            if ratings:
                return ratings
    return {}


def find_big_cpus(host: HostRoot) -> frozenset[int]:
    """The host's big CPUs (empty when sysfs says nothing useful)."""
    return big_cpus(cpu_ratings(host))
