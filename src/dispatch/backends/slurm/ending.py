"""Ending a Slurm job: dispatch's stop (marked first, stop_mark.py) and a person's cancel
through dispatch, both ``scancel``. What the tools' words mean: an unreachable controller is
SchedulerUnreachable; a job that has ended already is nothing to do; anything else refused
is SlurmCommandError."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from dispatch.backends.slurm.stop_mark import mark_argv
from dispatch.backends.slurm.tools import (
    ALREADY_ENDED_WORDS,
    NAME,
    Result,
    SlurmCommandError,
    unreachable_words,
)
from dispatch.core.model import SchedulerUnreachable

Tool = Callable[[Sequence[str]], Result]


def stop(tool: Tool, ref: str, token: str | None) -> None:
    """Mark the job as dispatch's stop (its Comment), then scancel it: a cancel without the
    mark is a person's, final even from our uid (S14). No scancel goes out unmarked to a live
    job: a refused mark raises. Slurm refuses the mark on a job that has ended (it is not
    changed; the scancel is then a no-op) and, for an array, on each task that has ended
    while it marks the live ones. A ref whose token was never seen is not in squeue (the
    tick looks before it stops): nothing there is left to mark."""
    if token is not None:
        mark_stop(tool, ref, token)
    signal_end(tool, ["scancel", ref])


def mark_stop(tool: Tool, ref: str, token: str) -> None:
    """Set the stop mark on what of the job still lives."""
    argv = mark_argv(ref, token)
    res = tool(argv)
    if res.returncode == 0:
        return
    if unreachable_words(res.stderr + res.stdout):
        raise SchedulerUnreachable(NAME, f"scontrol update: {res.words}")
    if any(w in res.words.lower() for w in ALREADY_ENDED_WORDS):
        return  # ended (every task, or some of an array's): nothing of it to mark
    raise SlurmCommandError(argv, res.words)


def signal_end(tool: Tool, argv: list[str]) -> None:
    res = tool(argv)
    text = res.stderr + res.stdout
    if res.returncode == 0 and not text.strip():
        return
    low = text.lower()
    if unreachable_words(low):
        raise SchedulerUnreachable(NAME, f"{argv[0]}: {res.words}")
    if any(w in low for w in ALREADY_ENDED_WORDS):
        return  # it has ended already: nothing to stop
    if res.returncode != 0:
        raise SlurmCommandError(argv, res.words)
