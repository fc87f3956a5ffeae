"""``--contexts-per-core {1,2}``: the option of the commands that feed one detector from many streams
(`watch`, `bench --streams`)."""

from __future__ import annotations

import argparse

from ..runtime import CONTEXTS_PER_CORE

STREAMS_CONTEXTS_PER_CORE = 2
"""Many streams keep an NPU core busy only with two contexts on it: one infers while the other's
frame is converted, letterboxed and decoded on the CPU (docs/streams.md, "In flight")."""


def add_contexts_option(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup, default: int | None
) -> None:
    """Add ``--contexts-per-core``; ``default`` None lets the command tell "not given" from 2."""
    parser.add_argument(
        "--contexts-per-core",
        type=int,
        choices=CONTEXTS_PER_CORE,
        default=default,
        metavar="{1,2}",
        help=f"NPU contexts per core ({STREAMS_CONTEXTS_PER_CORE}): two keep a core inferring one "
        "frame while the other context's frame is prepared on the CPU; 1 uses half the NPU memory. "
        "A single-core NPU (RK3566/3568/3562) opens that many contexts on its one core; the CPU "
        "backend ignores it (one onnxruntime session)",
    )
