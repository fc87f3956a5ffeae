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

    def __reduce__(self) -> tuple[object, ...]:
        # Keeps problem and fix apart when an error crosses a process boundary (pool workers).
        return (type(self), (self.problem, self.fix))


class UsageError(RknnLaunchError):
    """A command line, setting or environment variable has a value we cannot use."""

    exit_code = 2


class InputFileError(UsageError):
    """A file or folder a command or call was told to read cannot be read: it does not exist, is not
    the kind of thing it should be (a folder for a file, a FIFO), or this user may not read it (or
    enter its folder). One kind and one exit code (2) whichever command or input it was
    (`rknnlaunch._files.require_file`, the one rule)."""


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


class SettingsError(UsageError):
    """A setting (RKNN_NPU_*, RKNNLAUNCH_*, or a command's flag or its environment twin) has a value
    we cannot use; ``variables`` names the ones that could not be read (when known), so a report
    can skip what depends on them instead of blaming their absence."""

    def __init__(self, problem: str, fix: str | None = None, variables: tuple[str, ...] = ()) -> None:
        self.variables = variables
        super().__init__(problem, fix)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.problem, self.fix, self.variables))


class ModelError(RknnLaunchError):
    """A model file is missing, truncated, not an .rknn/.onnx file, or built for another SoC."""


class ModelFileError(InputFileError, ModelError):
    """The model file itself cannot be read (missing, not a file, unreadable): an `InputFileError`
    (exit 2, as for every input) that is also a `ModelError`, so SDK callers catching model
    problems catch it."""


class BackendUnavailableError(RknnLaunchError):
    """The requested backend cannot run here (RKNNLite or onnxruntime not installed, no NPU)."""


class RuntimeInitError(RknnLaunchError):
    """RKNNLite returned -1; ``log_lines`` holds what the runtime logged while it failed."""

    def __init__(self, problem: str, fix: str | None = None, log_lines: tuple[str, ...] = ()) -> None:
        self.log_lines = log_lines
        if log_lines:
            problem = problem + "\n  runtime log:\n" + "\n".join(f"    {line}" for line in log_lines)
        super().__init__(problem, fix)


class InferenceError(RknnLaunchError):
    """An inference call failed (bad input shape/dtype, or the runtime returned no outputs)."""


class WorkerDiedError(InferenceError):
    """A pool's worker process died with this frame in flight; ``cores`` are the NPU cores it ran on."""

    def __init__(self, problem: str, fix: str | None = None, cores: tuple[int, ...] = ()) -> None:
        self.cores = cores
        super().__init__(problem, fix)

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.problem, self.fix, self.cores))
