"""`rknnlaunch bench`: per-core YOLOv8 latency (placeholder until the bench issue lands)."""

from __future__ import annotations

import argparse
from typing import Any


def add_parser(sub: Any) -> None:
    parser = sub.add_parser("bench", help="measure YOLOv8 latency per NPU core set")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    print("rknnlaunch bench: not available yet (the YOLOv8 bench lands with the bench issue)")
    return 0
