"""Moved to the base layer, `rknnlaunch/_files.py`: this name stays only until every branch imports
`require_file` from there (``from .._files import require_file``); lint-imports reports users."""

from .._files import require_file

__all__ = ["require_file"]
