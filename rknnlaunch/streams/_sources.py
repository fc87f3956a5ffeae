"""Stream sources: what a source string names (file, RTSP, HTTP, UDP, V4L2), its checks before any
decoding starts, credentials from the environment or a netrc file, and passwords masked in all output."""

from __future__ import annotations

import math
import netrc
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from .._errors import UsageError

LIVE_SCHEMES = ("rtsp", "rtsps", "http", "https", "udp", "rtp", "tcp", "srt", "rtmp")
"""URL schemes read as live network sources (reconnected when they fail)."""
CREDENTIALS_ENV = "RKNNLAUNCH_STREAM_CREDENTIALS"
"""The default credentials file (netrc format), e.g. a mounted Kubernetes Secret."""
MASK = "***"
_ENV_REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def mask_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (``rtsp://admin:***@cam/live``); other text as is."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url
    if not parts.netloc or "@" not in parts.netloc:
        return url
    userinfo, _, host = parts.netloc.rpartition("@")
    user, colon, password = userinfo.partition(":")
    if not colon or not password:
        return url
    return urlunsplit(parts._replace(netloc=f"{user}:{MASK}@{host}"))


def url_password(url: str) -> str | None:
    """The password part of ``url`` (as written, percent-encoded), or None."""
    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        return None
    userinfo, at, _ = netloc.rpartition("@")
    if not at:
        return None
    _, colon, password = userinfo.partition(":")
    return password if colon and password else None


class Redactor:
    """Replaces every secret it was told about (passwords, raw URLs) in a text by its masked form.

    FFmpeg's error texts quote the URL they failed on, so every reason and log line of a stream goes
    through this before it is shown."""

    def __init__(self) -> None:
        self._secrets: dict[str, str] = {}

    def add_url(self, url: str) -> None:
        masked = mask_url(url)
        if masked != url:
            self._secrets[url] = masked
        password = url_password(url)
        if password:
            self._secrets[password] = MASK
            self._secrets[unquote(password)] = MASK

    def __call__(self, text: str) -> str:
        # Longest first: the whole URL before its password alone.
        for secret in sorted(self._secrets, key=len, reverse=True):
            if secret:
                text = text.replace(secret, self._secrets[secret])
        return text


@dataclass(frozen=True)
class Source:
    """One video source to watch.

    ``url``: a file path, ``rtsp://``/``rtsps://`` (TCP by default), ``http(s)://``, ``udp://`` URL,
    or a V4L2 device (``/dev/video0``). ``${NAME}`` in it is replaced from the environment (e.g.
    ``rtsp://admin:${CAM_PASSWORD}@cam/live``). ``name``: how results and events name the stream
    (default: from the URL). ``rate``: detections per second, evenly spaced (None: every frame the
    cores can take). ``loop``: a file starts again at its end instead of ending the stream.
    ``realtime``: a file is read at its own frame rate, as a camera delivers it (None: True for
    files, unless ``every_frame``). ``every_frame``: nothing is dropped: the decoder waits for a
    core instead (processing a file offline; a live source then falls behind).
    The URL never appears in `repr` or output unmasked: use `shown`.
    """

    url: str = field(repr=False)
    name: str | None = None
    rate: float | None = None
    loop: bool = False
    realtime: bool | None = None
    every_frame: bool = False

    def __post_init__(self) -> None:
        if not self.url.strip():
            raise UsageError(
                "an empty source was given", "name a file, an rtsp:// URL or a /dev/video device"
            )
        if self.rate is not None:
            check_rate(self.rate, f"source {self.shown}")
        if self.name is not None and not self.name.strip():
            raise UsageError(f"source {self.shown}: empty name", "give a name with letters, or none")

    @property
    def shown(self) -> str:
        """The URL with its password masked: the only form that is ever printed."""
        return mask_url(self.url)

    @property
    def kind(self) -> str:
        """``file``, ``device`` (V4L2) or the URL scheme (``rtsp``, ``http``, ...)."""
        return source_kind(self.url)

    @property
    def is_live(self) -> bool:
        return self.kind != "file"

    @property
    def paced(self) -> bool:
        """Frames are delivered at the stream's own rate (a file read as a camera would send it)."""
        if self.realtime is not None:
            return self.realtime
        return not self.is_live and not self.every_frame

    def __repr__(self) -> str:
        return (
            f"Source({self.shown!r}, name={self.name!r}, rate={self.rate!r}, loop={self.loop!r}, "
            f"every_frame={self.every_frame!r})"
        )


def check_rate(rate: float, subject: str) -> None:
    """`UsageError` unless ``rate`` is a positive finite number of frames a second (``subject``
    names where it came from: ``source rtsp://cam/live``, ``--rate``)."""
    if not isinstance(rate, (int, float)) or math.isnan(rate) or math.isinf(rate) or rate <= 0:
        raise UsageError(
            f"{subject}: rate {rate} is not a number of frames a second",
            "give a positive rate such as 5 (or none to detect every frame the cores can take)",
        )


def source_kind(url: str) -> str:
    """``file``, ``device`` or the lower-case URL scheme of a source string."""
    scheme, sep, _ = url.partition("://")
    if sep and scheme.isascii() and scheme.replace("+", "").isalnum():
        scheme = scheme.lower()
        if scheme == "file":
            return "file"
        if scheme in ("v4l2", "video4linux2"):
            return "device"
        return scheme
    if url.startswith("/dev/video"):
        return "device"
    return "file"


def file_path(url: str) -> Path:
    """The local path of a file source (``file://`` stripped)."""
    return Path(url[len("file://") :] if url.lower().startswith("file://") else url)


def device_path(url: str) -> str:
    """The device node of a V4L2 source (``v4l2:///dev/video0`` or ``/dev/video0``)."""
    return url.partition("://")[2] if "://" in url else url


def default_name(url: str) -> str:
    """A readable stream name from a source: a file's stem, a URL's host and path, a device's node."""
    kind = source_kind(url)
    if kind == "file":
        return file_path(url).stem or "file"
    if kind == "device":
        return Path(device_path(url)).name
    parts = urlsplit(url)
    host = parts.hostname or kind
    path = parts.path.strip("/").replace("/", "-")
    return f"{host}-{path}" if path else host


def expand_environment(url: str, environ: Mapping[str, str]) -> str:
    """``url`` with every ``${NAME}`` replaced by the variable's value (percent-encoded inside the
    user:password part); `UsageError` naming the variable when one is not set."""
    netloc_end = _netloc_end(url)

    def replace(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in environ:
            raise UsageError(
                f"source {mask_url(url)}: ${{{name}}} is not set",
                f"export {name} (e.g. from a Kubernetes Secret: env.valueFrom.secretKeyRef)",
            )
        value = environ[name]
        return quote(value, safe="") if match.start() < netloc_end else value

    return _ENV_REFERENCE.sub(replace, url)


def _netloc_end(url: str) -> int:
    # Where the user:password@host part ends: variables before its '@' are credentials.
    scheme_end = url.find("://")
    if scheme_end < 0:
        return -1
    at = url.rfind("@", scheme_end, _path_start(url, scheme_end + 3))
    return at


def _path_start(url: str, start: int) -> int:
    slash = url.find("/", start)
    return len(url) if slash < 0 else slash


def read_credentials(path: str | os.PathLike[str]) -> dict[str, tuple[str, str]]:
    """host -> (user, password) from a netrc-format file (``machine cam1 login admin password ...``).

    `UsageError` naming the file when it cannot be read or parsed (never its content)."""
    try:
        parsed = netrc.netrc(os.fspath(path))
    except FileNotFoundError as exc:
        raise UsageError(
            f"credentials file {path} does not exist",
            "mount the Secret there, or point --credentials-file / RKNNLAUNCH_STREAM_CREDENTIALS at it",
        ) from exc
    except (netrc.NetrcParseError, OSError, UnicodeDecodeError) as exc:
        line = getattr(exc, "lineno", None)
        where = f" (line {line})" if line else ""
        raise UsageError(
            f"credentials file {path} is not in netrc format{where}",
            "write one line per camera: machine HOST login USER password PASSWORD",
        ) from exc
    found: dict[str, tuple[str, str]] = {}
    for host, (login, _account, password) in parsed.hosts.items():
        if password:
            found[host.lower()] = (login or "", password)
    return found


def add_credentials(url: str, credentials: Mapping[str, tuple[str, str]]) -> str:
    """``url`` with the user and password for its host, when it names none and the file has one."""
    if source_kind(url) in ("file", "device"):
        return url
    parts = urlsplit(url)
    if "@" in parts.netloc or not parts.hostname:
        return url
    entry = credentials.get(parts.hostname.lower())
    if entry is None:
        return url
    user, password = entry
    userinfo = f"{quote(user, safe='')}:{quote(password, safe='')}"
    return urlunsplit(parts._replace(netloc=f"{userinfo}@{parts.netloc}"))


@dataclass(frozen=True)
class PlannedSource:
    """A source after the checks that need no decoding: its final name and resolved URL, or why it
    cannot be watched (``problem``/``fix``: the stream fails at once and the others go on)."""

    source: Source
    name: str
    url: str = field(repr=False)
    problem: str | None = None
    fix: str | None = None


def plan_sources(
    sources: Sequence[Source],
    environ: Mapping[str, str] | None = None,
    credentials: Mapping[str, tuple[str, str]] | None = None,
) -> list[PlannedSource]:
    """Names, credentials and the checks that need no decoding, for every source at once.

    A source given twice is watched once (the second gets a problem), unless each has its own
    explicit name (one video as several streams: a benchmark); a name given twice keeps the
    first; a missing or unreadable file, an unset ``${VAR}``: a problem for that source only."""
    env = os.environ if environ is None else environ
    planned: list[PlannedSource] = []
    seen_urls: dict[str, str] = {}
    explicit = {source.name for source in sources if source.name}
    used: set[str] = set()
    for source in sources:
        shown = source.shown
        try:
            url = add_credentials(expand_environment(source.url, env), credentials or {})
        except UsageError as exc:
            planned.append(
                PlannedSource(source, source.name or default_name(source.url), source.url, *_split(exc))
            )
            continue
        name = source.name or _unique(default_name(url), used | explicit)
        problem: tuple[str | None, str | None] = (None, None)
        if name in used:
            problem = (
                f"stream name {name!r} is given twice ({shown})",
                "give each source its own --name",
            )
        elif _identity(url) in seen_urls and source.name is None:
            problem = (
                f"source {shown} is given twice (already watched as {seen_urls[_identity(url)]!r})",
                "list each source once",
            )
        else:
            problem = file_problem(source, url)
        if problem[0] is None:
            seen_urls[_identity(url)] = name
        used.add(name)
        planned.append(PlannedSource(source, name, url, *problem))
    return planned


def _split(exc: UsageError) -> tuple[str, str | None]:
    return exc.problem, exc.fix


def _unique(name: str, used: Iterable[str]) -> str:
    taken = set(used)
    if name not in taken:
        return name
    number = 2
    while f"{name}-{number}" in taken:
        number += 1
    return f"{name}-{number}"


def _identity(url: str) -> str:
    if source_kind(url) == "file":
        return str(file_path(url).resolve())
    return url


def file_problem(source: Source, url: str) -> tuple[str | None, str | None]:
    """What is wrong with a file or device source before opening it (missing, a folder, unreadable)."""
    kind = source_kind(url)
    if kind not in ("file", "device"):
        if kind not in LIVE_SCHEMES:
            return (
                f"source {source.shown}: unknown scheme {kind}://",
                f"use a file, /dev/videoN or one of {', '.join(s + '://' for s in LIVE_SCHEMES)}",
            )
        return (None, None)
    path = file_path(url) if kind == "file" else Path(device_path(url))
    if not path.exists():
        return (f"source {source.shown}: no such file", "check the path (it is read from this container)")
    if path.is_dir():
        return (f"source {source.shown}: is a folder", "name a video file in it")
    if not os.access(path, os.R_OK):
        return (f"source {source.shown}: not readable by this user", "fix its permissions or mount")
    return (None, None)
