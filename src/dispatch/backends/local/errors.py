"""What the local backend refuses, in the dispatch error families."""

from __future__ import annotations

import errno
from pathlib import Path

from dispatch.backends.base import SubmitRejected
from dispatch.backends.local.reports import NO_SUCH_OBJECT
from dispatch.core.model import SchedulerUnreachable
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


# Errors of a disk that may heal (full, over quota, failing): the scheduler cannot be used
# now, and the supervisor tries again (the object's token keeps that idempotent).
_TRANSIENT = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO, errno.EMFILE, errno.ENFILE,
                        errno.ENOMEM, errno.EAGAIN, errno.EROFS})


def unwritable(what: str, err: OSError) -> SchedulerUnreachable:
    return SchedulerUnreachable("local", f"{what}: {err}")


def write_failed(what: str, err: OSError) -> SchedulerUnreachable | SubmitRejected:
    """A submit that could not write its object: unreachable when the disk may heal, else
    the refusal (a permission, a path that cannot be made)."""
    if err.errno in _TRANSIENT:
        return unwritable(what, err)
    return SubmitRejected(f"{what}: {err}")
