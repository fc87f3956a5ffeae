"""The exception tree shared by the SDK, the CLI and the device plugin."""

from __future__ import annotations


class RknnLaunchError(Exception):
    """Base of every error rknnlaunch raises on purpose.

    The message always says what was wrong and what to do about it, so the CLI can print it as
    is. ``exit_code`` is what a command-line entry point should exit with.
    """

    exit_code: int = 1

    def __init__(self, problem: str, fix: str | None = None) -> None:
        self.problem = problem
        self.fix = fix
        super().__init__(problem if fix is None else f"{problem}\n  fix: {fix}")


class UsageError(RknnLaunchError):
    """A command line, setting or environment variable has a value we cannot use."""

    exit_code = 2


class MaskError(UsageError, ValueError):
    """A core mask or core list cannot be parsed, or does not fit the SoC or the runtime."""


class DiscoveryError(RknnLaunchError):
    """No usable Rockchip NPU was found on the host."""


class NpuNotFoundError(DiscoveryError):
    """Nothing that looks like an rknpu device is present."""


class UnsupportedDriverError(DiscoveryError):
    """An NPU is present but driven by a stack librknnrt cannot use (mainline `rocket`)."""


class UnknownSocError(DiscoveryError):
    """The device tree names no SoC we know."""
