"""`ClosesOnExit`: the one `with` protocol of the SDK's runtimes and pools (leaving it closes)."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

_Self = TypeVar("_Self", bound="ClosesOnExit")


class ClosesOnExit:
    """Base for objects that hold a runtime: ``with x:`` returns ``x`` and ends in ``x.close()``."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
