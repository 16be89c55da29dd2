"""What the local backend refuses, in the dispatch error families."""

from __future__ import annotations

from pathlib import Path

from dispatch.backends.local.reports import NO_SUCH_OBJECT
from dispatch.errors import BadInput, NotFound, StateConflict


class NoSuchObject(NotFound, LookupError):
    """A ref (or token, or job) that names no local object under this root."""

    def __init__(self, what: str, root: Path) -> None:
        super().__init__(f"{NO_SUCH_OBJECT}: {what} (under {root})")
        self.what = what
        self.root = root


class InjectError(StateConflict, ValueError):
    """An injection the object's state does not allow (it has ended, is not running yet, the
    node is already lost)."""


class BadInjection(BadInput, ValueError):
    """An injection that can never be made (no such node, a node given to preempt)."""
