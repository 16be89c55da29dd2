"""One Slurm job array -> one object report, from its tasks' own reports (mapping.py).
Pure: time is passed in."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime

import msgspec

from dispatch.core.app_error import AppError
from dispatch.core.model import Cause, CauseKind, Execution, ObjectReport, State

# --------------------------------------------------------------------------- arrays

# Which task speaks for a live array: one running task makes the array running.
LIVE_ORDER = (State.RUNNING, State.RECOVERING, State.PENDING, State.HELD, State.UNKNOWN)
# Which task speaks for an ended array: a cancel is final (S14), then a failure, then success.
END_ORDER = (State.CANCELLED, State.FAILED, State.SUCCEEDED)


def array_report(*, ref: str, token: str | None,
                 tasks: Sequence[tuple[str, ObjectReport]], now: datetime
                 ) -> ObjectReport | None:
    """One Slurm job array -> ONE report (the object model of an array).

    One dispatch submission is one ``sbatch --array`` and so one object, named by the array
    job id: the token is bound once, decide sees one object per token (several reports with
    the same token would be taken for duplicates, S15), and stopping it (``scancel <array
    id>``) stops every task. ``tasks`` are (task id, the task's own report from
    ``object_report``, ref ``<array>_<task>``), in task order. Then:

    - state: live while any task is: the first of LIVE_ORDER any live task is in (running
      while any task runs). Ended when every task ended: the first of END_ORDER any task
      is in (every task COMPLETED -> succeeded).
    - cause: that of the task that speaks for the array (the first such task; while running,
      one with a lost node first, for the fence, S11): its detail is that task's words from
      Slurm, verbatim; the note names the task and sums up the others, e.g. ``task 1 speaks
      for the array; others: 0 succeeded``. Every task succeeded: cause none.
    - executions: one, the array's run: from the first task start; ended, with the array's
      cause, only when every task ended. A task ending while others run is not an ended
      execution of a live object: that would read as a requeue (decide's native recovery).
      Arrays are submitted with ``--no-requeue`` (seed 002), so tasks have one run each.
      Its application error is the speaking task's own (read from that task's files).
    - nodes: every task's nodes; unhealthy_units: each live task's own (unit ``<array>_<task>``).
    """
    if not tasks:
        return None  # neither squeue nor accounting knows a task: not seen (S16)
    live = [(t, r) for t, r in tasks if r.alive]
    if live:
        state = next(s for s in LIVE_ORDER if any(r.state is s for _, r in live))
        speakers = [(t, r) for t, r in live if r.state is state]
        if state is State.RUNNING:
            speakers.sort(key=lambda tr: tr[1].cause.kind is not CauseKind.NODE_LOST)
    else:
        state = next(s for s in END_ORDER if any(r.state is s for _, r in tasks))
        speakers = [(t, r) for t, r in tasks if r.state is state]
    task, speaker = speakers[0]
    others = [(t, r) for t, r in tasks if t != task]
    said = f"task {task} speaks for the array"
    if others:
        said += "; others: " + _summary(others)
    note = "; ".join(n for n in (said, speaker.cause.note) if n)
    cause = msgspec.structs.replace(speaker.cause, note=note)
    lost_since = speaker.lost_since if cause.kind is CauseKind.NODE_LOST else None
    return ObjectReport(
        ref=ref, token=token or speaker.token, state=state, cause=cause,
        executions=_array_execution(tasks, cause, ended=not live,
                                    error=_last_error(speaker) if not live else None),
        nodes=_union(n for _, r in tasks for n in r.nodes), lost_since=lost_since,
        gated=state is State.HELD and all(r.gated for _, r in live),
        unhealthy_units=tuple(u for _, r in live for u in r.unhealthy_units))


def _summary(tasks: Sequence[tuple[str, ObjectReport]]) -> str:
    """``0-3,7 succeeded, 5 failed (non-zero-exit)``: tasks grouped by state and cause."""
    groups: dict[str, list[str]] = {}
    for task, report in tasks:
        key = report.state.value
        if report.cause.kind is not CauseKind.NONE:
            key += f" ({report.cause.kind.value})"
        groups.setdefault(key, []).append(task)
    return ", ".join(f"{task_ranges(ids)} {key}" for key, ids in groups.items())


def task_ranges(tasks: Sequence[str]) -> str:
    """(0, 1, 2, 5) -> ``0-2,5``; ids that are not numbers are listed as they are."""
    numbers = sorted({int(t) for t in tasks if t.isdigit()})
    parts: list[str] = []
    i = 0
    while i < len(numbers):
        j = i
        while j + 1 < len(numbers) and numbers[j + 1] == numbers[j] + 1:
            j += 1
        parts.append(str(numbers[i]) if i == j else f"{numbers[i]}-{numbers[j]}")
        i = j + 1
    parts += [t for t in tasks if not t.isdigit()]
    return ",".join(parts)


def _union(names: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(names))


def _last_error(report: ObjectReport) -> AppError | None:
    """The speaking task's own application error (read from that task's files only)."""
    return report.executions[-1].error if report.executions else None


def _array_execution(tasks: Sequence[tuple[str, ObjectReport]], cause: Cause,
                     ended: bool, error: AppError | None = None) -> tuple[Execution, ...]:
    runs = [e for _, r in tasks for e in r.executions]
    starts = [e.started_at for e in runs if e.started_at is not None]
    if not starts:
        return ()
    ends = [e.ended_at for e in runs if e.ended_at is not None]
    return (Execution(index=0, started_at=min(starts),
                      ended_at=max(ends) if ended and ends else None,
                      cause=cause if ended else None,
                      nodes=_union(n for e in runs for n in e.nodes), error=error),)
