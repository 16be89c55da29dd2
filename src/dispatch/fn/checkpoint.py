"""Checkpointable callables: asked, when their job is stopped (a preemption, a lost node, a
time limit), for the call to resume with, as submitit's ``Checkpointable.checkpoint``.

The bootstrap asks in its SIGTERM handler (the scheduler's stop: the local backend's and
Slurm's first signal before SIGKILL), on rank 0 only, and stores the answer in the call
folder; the job's next submission runs that call instead of the first one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dispatch.fn.calls import Call

HOOK = "__dispatch_checkpoint__"


class Checkpointable:
    """Subclass this (and define ``__call__``) for a function object that can be resumed.

    ``checkpoint(*args, **kwargs)`` is called with the arguments of the running call when the
    job is stopped, and returns the ``Call`` to run on the next submission (None: start over
    with the first call). The default resumes the object as it is now (its attributes as the
    running call left them: keep the state to resume from there) with the same arguments.
    An object that is not a subclass may define ``__dispatch_checkpoint__`` instead."""

    def checkpoint(self, *args: Any, **kwargs: Any) -> Call | None:
        return Call(self, args, kwargs)


def checkpoint_hook(fn: object) -> Callable[..., Call | None] | None:
    """The callable's way to be asked for a checkpoint, or None when it has none."""
    if isinstance(fn, Checkpointable):
        return fn.checkpoint
    hook = getattr(fn, HOOK, None)
    return hook if callable(hook) else None
