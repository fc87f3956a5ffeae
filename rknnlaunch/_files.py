"""The one input rule and the one output rule for models, images, reference models, image folders and
reports (the base layer: every layer may use them): an input must exist, be the kind of thing it
should be (a regular file; a folder where one is asked for) and be readable by this process, checked
before any work, with one error kind (`InputFileError`, exit 2) whichever command; an output must be
a file name in an existing folder this process may write, with an extension its writer supports.
Either way a "Permission denied" names the flag and the fix."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Collection
from pathlib import Path

from ._errors import InputFileError, ModelError, ModelFileError, RknnLaunchError, UsageError

Access = Callable[[str | os.PathLike[str], int], bool]
"""`os.access`'s signature; tests inject one to check the writability rule as root too."""

PLOT_SUFFIXES = (".png", ".svg", ".svgz", ".pdf", ".eps", ".ps", ".jpg", ".jpeg", ".tif", ".tiff", ".webp")
"""What matplotlib's Agg canvas saves in every release we support (3.7+), without LaTeX (.pgf) or a
raw buffer (.raw/.rgba); a test pins it against the installed matplotlib, which is never imported
just to check a path."""


def require_file(
    path: str | os.PathLike[str],
    what: str,
    fix: str,
    error: type[RknnLaunchError] = InputFileError,
    *,
    folder: bool | None = False,
) -> Path:
    """The one input rule: ``path`` as a Path when it is a regular file (``folder``: a folder;
    ``folder=None``: either) this process may read (and, for a folder, list), checked before any
    work; else an `InputFileError` (exit 2, whichever command) saying which of the three mistakes
    it is: it does not exist; it is not a file (a folder, a device, a FIFO whose open would block)
    or not a folder; or Permission denied (on the file, or on a folder above it this user cannot
    enter), with the fix.

    ``what`` names the input as the user named it: the flag (``--model``) or the argument
    (``model file``, ``IMAGE``). ``error``: pass `ModelError` (or a subclass) for a model so the
    raised error is a `ModelFileError` (an `InputFileError` that is also a `ModelError`); any other
    class gives an `InputFileError`. ``fix`` is said for a missing or wrong-kind path."""
    kind: type[RknnLaunchError] = ModelFileError if issubclass(error, ModelError) else InputFileError
    file = Path(path)
    try:
        mode = file.stat().st_mode
    except PermissionError:
        raise kind(*_denied_above(file, what)) from None
    except FileNotFoundError:
        raise kind(f"{what} {file} does not exist", fix) from None
    except NotADirectoryError:
        raise kind(
            f"{what} {file} does not exist (a file stands where a folder of its path should)", fix
        ) from None
    except OSError as exc:  # ELOOP, ENAMETOOLONG: the path itself is wrong
        raise kind(f"{what} {file}: {exc.strerror or exc}", fix) from None
    is_folder = stat.S_ISDIR(mode)
    wanted = {True: is_folder, False: stat.S_ISREG(mode), None: is_folder or stat.S_ISREG(mode)}[folder]
    if not wanted:
        state = {
            True: "is not a folder",
            False: "is not a regular file",
            None: "is not a regular file or folder",
        }
        raise kind(f"{what} {file} {state[folder]}: it is {_kind_of(mode)}", fix)
    needed = os.R_OK | (os.X_OK if is_folder else 0)
    if not os.access(file, needed):
        action = "list it" if is_folder else "read it"
        chmod = f"chmod a+rx {file}" if is_folder else f"chmod a+r {file}"
        raise kind(
            f"{what} {file}: Permission denied (uid {os.getuid()} cannot {action})",
            f"make it readable, e.g. {chmod}, or run as a user who may read it",
        )
    return file


def require_file_or_folder(path: str | os.PathLike[str], what: str, fix: str) -> Path:
    """`require_file`'s rule for an input that may be a file or a folder (calibration or validation
    images: ``--quant-images DIR|FILE``)."""
    return require_file(path, what, fix, folder=None)


def require_readable(path: str | os.PathLike[str], what: str, error: type[RknnLaunchError]) -> None:
    """``error`` saying Permission denied (and how to fix it) when this process cannot read ``path``
    (what `require_file` checks too; kept for callers that check an already-found file)."""
    try:
        with open(path, "rb") as handle:
            handle.read(0)
    except PermissionError:
        kind: type[RknnLaunchError] = ModelFileError if issubclass(error, ModelError) else InputFileError
        raise kind(
            f"{what} {path}: Permission denied (uid {os.getuid()} cannot read it)",
            f"make it readable, e.g. chmod a+r {path}, or run as a user who may read it",
        ) from None


def _kind_of(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "a regular file"


def _denied_above(path: Path, what: str) -> tuple[str, str]:
    """(problem, fix) for a path whose stat was denied: the first folder on its way this user may
    not enter (search permission), named."""
    blocked = _first_unenterable(path)
    where = f"cannot enter {blocked}" if blocked is not None else "cannot look it up"
    shown = blocked if blocked is not None else path.parent
    return (
        f"{what} {path}: Permission denied (uid {os.getuid()} {where})",
        f"let this user enter it (e.g. chmod a+x {shown}), copy the file somewhere readable, "
        "or run as a user who may",
    )


def _first_unenterable(path: Path, access: Access = os.access) -> Path | None:
    """The first folder from the root down to ``path``'s folder that this process may not search."""
    folder = path.absolute().parent
    for candidate in reversed((folder, *folder.parents)):
        if not access(candidate, os.X_OK):
            return candidate
    return None


def check_output(
    path: str | os.PathLike[str] | None,
    flag: str,
    *,
    suffixes: Collection[str] | None = None,
    writer_has: Callable[[str], bool] | None = None,
    example: str = "report.json",
    access: Access = os.access,
) -> None:
    """Refuse an output path before any work (`UsageError`, exit 2, with a fix): its folder must
    exist and be writable by this process (a real access check: root-owned is not writable for a
    user), the path must not be a folder, an existing file must be writable, and its extension must
    be one of ``suffixes`` (case-insensitive) or accepted by ``writer_has``. None: nothing to check."""
    if path is None:
        return
    target = Path(path)
    shown = f"{flag} {path}"
    try:  # Path.is_dir/exists raise PermissionError for a path under a folder this user cannot enter
        target.stat()
    except (FileNotFoundError, NotADirectoryError):
        pass
    except PermissionError:
        blocked = _first_unenterable(target, access)
        where = f"cannot enter {blocked}" if blocked is not None else f"cannot look in {target.parent}"
        raise UsageError(
            f"{shown}: Permission denied: uid {os.getuid()} {where}",
            f"pick a folder you can write, e.g. {flag} {Path.cwd() / target.name}",
        ) from None
    if target.is_dir():
        raise UsageError(
            f"{shown} is a folder; {flag} names the file to write",
            f"name a file in it, e.g. {flag} {target / example}",
        )
    folder = target.resolve().parent
    if not folder.is_dir():
        state = "is not a folder" if folder.exists() else "does not exist"
        raise UsageError(
            f"{shown}: the folder {target.parent} {state}",
            f"create it (mkdir -p {target.parent}) or pick another {flag}",
        )
    if not access(folder, os.W_OK | os.X_OK):
        raise UsageError(
            f"{shown}: Permission denied: uid {os.getuid()} cannot write in {target.parent}",
            f"pick a folder you can write, e.g. {flag} {Path.cwd() / target.name}",
        )
    if target.exists() and not access(target, os.W_OK):
        raise UsageError(
            f"{shown}: Permission denied: the file exists and uid {os.getuid()} cannot overwrite it",
            f"remove it or pick another {flag}",
        )
    if suffixes is None and writer_has is None:
        return
    suffix = target.suffix.lower()
    known = suffixes is not None and suffix in suffixes
    if not known and writer_has is not None and suffix:
        known = writer_has(str(target))
    if not known:
        listed = ", ".join(suffixes) if suffixes is not None else ".jpg, .png"
        what = f"the extension {suffix!r}" if suffix else "no extension"
        raise UsageError(
            f"{shown}: {what} is not a format this can write (one of {listed})",
            f"end the name in one of them, e.g. {flag} {target.with_suffix(Path(example).suffix)}",
        )
