"""Bounded, escaped renderings of untrusted text (device IDs from clients) for errors and log lines."""

from __future__ import annotations

from collections.abc import Sequence

MAX_SHOWN_IDS = 3
"""A refusal names at most this many IDs, then a count: kubelet and other clients reject huge details."""
MAX_TEXT_CHARS = 64
"""One quoted untrusted value is cut to this many characters (our IDs are under 20)."""


def quote(text: str, limit: int = MAX_TEXT_CHARS) -> str:
    """``text`` in single quotes, cut to ``limit`` characters, every non-printable-ASCII escaped.

    Control characters cannot forge log lines and a Unicode digit stays visible (``'\\u0661'``).
    """
    shown = text[:limit]
    parts = ["'"]
    for char in shown:
        code = ord(char)
        if char in "'\\":
            parts.append("\\" + char)
        elif 0x20 <= code < 0x7F:
            parts.append(char)
        elif code <= 0xFF:
            parts.append(f"\\x{code:02x}")
        elif code <= 0xFFFF:
            parts.append(f"\\u{code:04x}")
        else:
            parts.append(f"\\U{code:08x}")
    parts.append("'")
    if len(text) > limit:
        parts.append(f"... ({len(text):,} characters)")
    return "".join(parts)


def quote_ids(ids: Sequence[str], shown: int = MAX_SHOWN_IDS) -> str:
    """``'a', 'b', 'c' and 9,997 more (10,000 IDs)``: a few quoted IDs and a count, never all."""
    if not ids:
        return "no IDs"
    listed = ", ".join(quote(device_id) for device_id in ids[:shown])
    if len(ids) <= shown:
        return listed
    return f"{listed} and {len(ids) - shown:,} more ({len(ids):,} IDs)"
