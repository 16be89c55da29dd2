"""Whether a person's request (cancel, give-up, resubmit) fits the job's record (pure).

A request is recorded, then carried out by the supervisor's next tick; until then it is
*pending*. Two requests that would decide different things are never both accepted:

    pending \\ new     cancel        give-up       resubmit
    (none)            record        record*       record*       (* only a held job)
    cancel            already       refused       refused
    give-up           refused       already       refused
    resubmit          record        refused       already

``already``: the same request again is idempotent (nothing new recorded, not an error).
``refused``: StateConflict (exit 6, HTTP 409) naming the pending request. A cancel is the
one request that overrides a pending one: a pending resubmit only starts the job again, and a
cancel stops it before it starts. A pending give-up already ends the job, so a cancel is
refused rather than turning the outcome from failed into cancelled. A job with a committed
outcome refuses everything (S7). docs/semantics.md#person-requests says the same.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from dispatch.core.model import Cause
from dispatch.core.record import Job


class PersonRequest(enum.Enum):
    CANCEL = "cancel"
    GIVE_UP = "give-up"
    RESUBMIT = "resubmit"


@dataclass(frozen=True, slots=True)
class Answer:
    """``record``: append the request's event. Neither ``record`` nor ``refusal``: the same
    request is already pending (nothing to do). ``refusal``: why it does not fit."""

    record: bool = False
    refusal: str | None = None


RECORD = Answer(record=True)
ALREADY = Answer()


def pending(job: Job) -> tuple[PersonRequest, Cause | None] | None:
    """The request the supervisor will carry out next, in the order decide() honours them
    (cancel, give-up, resubmit), with the person's cause where the record keeps it (a
    resubmission keeps the hold's cause, not the person's); None when none is waiting or
    the outcome is committed."""
    if job.outcome is not None:
        return None
    if job.cancel_requested is not None:
        return PersonRequest.CANCEL, job.cancel_requested
    if job.give_up_requested is not None:
        return PersonRequest.GIVE_UP, job.give_up_requested
    if job.resubmit_requested is not None and job.hold is None:
        return PersonRequest.RESUBMIT, None
    return None


def judge(job: Job, request: PersonRequest) -> Answer:
    """What to do with ``request`` on ``job`` as its record stands (see the table above)."""
    if job.outcome is not None:
        state = job.outcome.state.value
        if request is PersonRequest.RESUBMIT:
            return Answer(refusal=f"job {job.id} is {state}; committed outcomes never change "
                                  "(use supersede to run it again)")
        return Answer(refusal=f"job {job.id} is already {state}")
    waiting = pending(job)
    if waiting is not None:
        what, cause = waiting
        if what is request:
            return ALREADY
        if request is PersonRequest.CANCEL and what is PersonRequest.RESUBMIT:
            return RECORD
        by = f" by {cause.actor}" if cause is not None and cause.actor else ""
        at = (f" at {cause.at:%Y-%m-%d %H:%M:%S}" if cause is not None and cause.at is not None
              else "")
        return Answer(refusal=f"job {job.id}: a {what.value} requested{by}{at} is pending (the "
                              f"supervisor has not carried it out yet); {request.value} "
                              "refused")
    if request is PersonRequest.CANCEL:
        return RECORD
    if job.hold is None:
        if request is PersonRequest.RESUBMIT:
            return Answer(refusal=f"job {job.id} is not held; only a held job can be "
                                  "resubmitted")
        return Answer(refusal=f"job {job.id} is not held; give-up resolves a recovery hold "
                              "(use cancel to stop a job)")
    return RECORD
