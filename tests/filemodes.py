"""Running a test's process so file modes apply to it even when the tests run as root.

Root ignores file modes (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH), so a permission row would pass
where a user's would fail. Switching to `nobody` makes the modes bite, but `nobody` must then read
the interpreter's venv, which a CI work folder (mktemp's 0700) or /root does not allow: the process
died on `import numpy` instead of saying "Permission denied". Dropping the two capabilities keeps
uid 0, so the venv stays readable as its owner, and the fixtures' modes (which deny the owner too,
for non-root runs) deny root the same way.
"""

from __future__ import annotations

import ctypes
import os
import shutil

CAP_DAC_OVERRIDE = 1
CAP_DAC_READ_SEARCH = 2
_CAPS = (CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH)
_LINUX_CAPABILITY_VERSION_3 = 0x20080522
_PR_CAPBSET_DROP = 24


def modes_bypassed() -> bool:
    """Whether this process ignores file modes (it is root), so a permission test must drop that."""
    return os.geteuid() == 0


def setpriv_prefix() -> list[str]:
    """The command prefix that runs a program without the file-mode override (empty when not root).
    On exec a root process's capabilities come from the bounding set, so dropping them there holds."""
    if not modes_bypassed():
        return []
    if shutil.which("setpriv") is None:
        raise RuntimeError("running as root needs setpriv (util-linux) to test permission errors")
    caps = ",".join(f"-{name}" for name in ("dac_override", "dac_read_search"))
    return ["setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}"]


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


def drop_mode_override() -> None:
    """In this process (a forked child): drop the two capabilities from the bounding, effective,
    permitted and inheritable sets, so file modes apply here and in anything it executes."""
    if not modes_bypassed():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in _CAPS:  # the bounding set first: dropping from it needs CAP_SETPCAP, still held
        if libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), f"prctl(PR_CAPBSET_DROP, {cap})")
    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capget")
    keep = ~sum(1 << cap for cap in _CAPS) & 0xFFFFFFFF
    data[0].effective &= keep
    data[0].permitted &= keep
    data[0].inheritable &= keep
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")


NOBODY = 65534
_PR_SET_KEEPCAPS = 8


def become_other_user(uid: int = NOBODY) -> None:
    """In this process (a forked child, as root): become ``uid`` for every write and access() check,
    keeping only CAP_DAC_READ_SEARCH so it can still read the interpreter's venv wherever that lives.
    For a row about a root-owned folder the run's own user may write (/var/lib/kubelet): dropping
    the override alone would leave root its owner's rights there."""
    if not modes_bypassed():
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_KEEPCAPS)")
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)  # permitted kept (KEEPCAPS), effective cleared
    header = _Header(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_Data * 2)()
    read_search = 1 << CAP_DAC_READ_SEARCH
    data[0].effective = read_search
    data[0].permitted = read_search
    if libc.capset(ctypes.byref(header), data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
