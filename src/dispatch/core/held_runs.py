"""A person's hold of a running object: the scheduler's present state (a TrainJob someone
suspends with ``kubectl patch ... suspend: true``, a Slurm job someone suspends), never a
decision of dispatch, and resolved by that person on the scheduler. It still ends the running
execution's running time (G1): the record gets that execution's end, cause ``held``, not
final (the object lives on, nothing is resubmitted, no budget is spent), and goodput counts
the time until the next run as held. The run after the resume is a new execution of the same
object. Pure.

A backend numbers an object's executions from what the scheduler shows (restarts, replaced
pods), and a hold leaves no count there. So the record keeps which of its executions a hold
ended (``Submission.held_ends``) and ``renumbered`` moves the backend's numbers past them."""

from __future__ import annotations

from datetime import datetime

import msgspec

from dispatch.core.decisions import SUPERVISOR, RecordEnd
from dispatch.core.model import CauseKind, ObjectReport, State
from dispatch.core.record import Submission

HELD_NOTE = ("held on the scheduler by someone else while it ran: its running time ends "
             "here; the run after the resume is a new execution")


def renumbered(o: ObjectReport, held: tuple[int, ...]) -> ObjectReport:
    """``o`` with its executions numbered as the record numbers them: every execution the
    backend numbers at or after one a hold ended comes one later per such hold."""
    if not held:
        return o
    # the backend's number of each held execution: the record's less the holds before it
    marks = [r - j for j, r in enumerate(sorted(held))]
    return msgspec.structs.replace(o, executions=tuple(
        msgspec.structs.replace(ex, index=ex.index + sum(1 for m in marks if m <= ex.index))
        for ex in o.executions))


def held_end(s: Submission, o: ObjectReport, now: datetime) -> RecordEnd | None:
    """The end of ``s``'s running execution by someone else's hold, when ``o`` (numbered as the
    record numbers it) is held by the scheduler, not by dispatch's own gate, and the record has
    that execution started and not ended; None otherwise."""
    if (s.ended or o.state is not State.HELD or o.cause.kind is not CauseKind.HELD
            or o.gated or o.cause.actor == SUPERVISOR):
        return None
    last = o.executions[-1] if o.executions else None
    index = last.index if last is not None and not last.ended else len(o.executions)
    if index not in s.executions_started or index in s.executions_recorded:
        return None
    cause = msgspec.structs.replace(o.cause, at=o.cause.at or now,
                                    note=f"{o.cause.note}; {HELD_NOTE}" if o.cause.note
                                    else HELD_NOTE)
    return RecordEnd(submission=s.number, ref=o.ref, execution=index, cause=cause, final=False)
