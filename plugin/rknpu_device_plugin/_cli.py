"""The `rknpu-device-plugin` entry point (placeholder until the plugin issue lands)."""

from __future__ import annotations

import sys
from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    print("rknpu-device-plugin: not available yet", file=sys.stderr)
    return 1
