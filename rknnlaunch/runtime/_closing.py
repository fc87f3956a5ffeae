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
        if exc_type is not None and issubclass(exc_type, KeyboardInterrupt):
            self._close_interrupted()
        else:
            self.close()

    def _close_interrupted(self) -> None:
        """Leaving ``with`` on Ctrl-C: the user wants out, so pools do not run queued frames first,
        and do not wait forever on a thread the interrupt left blocked (docs/sdk.md#ctrl-c)."""
        self.close()
