"""The decisions ``decide`` makes, and the events each appends before it is carried out
(intent first). Pure data; ``to_events`` is a pure function of the decisions, the job and
``now``. Most decisions mirror one event; they stay apart because a decision is also an
order to the shell (submit, stop, cancel, open a gate, publish, notify) that the event only
records."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import assert_never

import msgspec

from dispatch.core import events as ev
from dispatch.core.app_error import AppError
from dispatch.core.model import Cause, State
from dispatch.core.policy import Action
from dispatch.core.record import Job

SUPERVISOR = "dispatch"


class _Decision(msgspec.Struct, frozen=True, kw_only=True):
    pass


class RecordEnd(_Decision, frozen=True):
    """An execution of a submission's object ended (or is fenced off): record it."""

    submission: int
    ref: str
    execution: int
    cause: Cause
    final: bool


class RecordError(_Decision, frozen=True):
    """The application's own error for an ended execution, as the backend read it: record
    it once beside the end (never changes the end's cause)."""

    submission: int
    execution: int
    error: AppError


class RecordStart(_Decision, frozen=True):
    """The scheduler shows an execution running that the record has not seen run (G1)."""

    submission: int
    execution: int
    started: datetime | None
    nodes: int


class RecordCheckpoint(_Decision, frozen=True):
    """The training reported a later durable checkpoint than the record holds (G3)."""

    submission: int
    execution: int
    step: int
    written: datetime


class Bind(_Decision, frozen=True):
    """The object carrying the submission's token is found: remember its ref."""

    submission: int
    ref: str


class Submit(_Decision, frozen=True):
    """Intend a new submission, then submit it (gated while an older object still runs)."""

    submission: int
    token: str
    gated: bool
    cause: Cause | None
    exclude_nodes: tuple[str, ...] = ()  # the job's segment-health exclusions (Slurm --exclude)


class RetrySubmit(_Decision, frozen=True):
    """An intended submission has no object and its claim expired: claim it, submit again."""

    submission: int
    token: str
    gated: bool


class StartRecovery(_Decision, frozen=True):
    rule: int
    action: Action
    cause: Cause
    native: bool = False


class Stop(_Decision, frozen=True):
    """Stop an object on the supervisor's behalf (fence, spent native budget, after commit)."""

    submission: int
    ref: str
    cause: Cause


class CancelObject(_Decision, frozen=True):
    """A person asked to cancel: pass it to the scheduler."""

    ref: str


class OpenGate(_Decision, frozen=True):
    submission: int
    ref: str


class Commit(_Decision, frozen=True):
    state: State
    cause: Cause


class PlaceHold(_Decision, frozen=True):
    cause: Cause


class Escalate(_Decision, frozen=True):
    message: str
    cause: Cause | None
    error: AppError | None = None  # the application's error of the end escalated


class StopDuplicate(_Decision, frozen=True):
    ref: str
    token: str
    cause: Cause


class PublishSegment(_Decision, frozen=True):
    """H1: mark an allocation unit unavailable for the next rendezvous."""

    unit_job_id: str
    task_id: str
    nodes: tuple[str, ...]
    reason: str
    cause: str  # short word for the artifact: node-unavailable | node-lost-fence


Decision = (
    RecordEnd | RecordError | RecordStart | RecordCheckpoint | Bind | Submit | RetrySubmit
    | StartRecovery | Stop | CancelObject
    | OpenGate | Commit | PlaceHold | Escalate | StopDuplicate | PublishSegment
)


def to_events(decisions: Sequence[Decision], job: Job, now: datetime,
              supervisor: str = SUPERVISOR, stop_by: str | None = None,
              holder: ev.Holder | None = None) -> list[ev.Event]:
    """The events a batch of decisions appends before anything is done (intent first).
    OpenGate records its result after the action instead (the supervisor appends it).
    ``stop_by``: the actor the scheduler will name for this supervisor's stops (its uid);
    ``holder``: the process that will make the submit attempts of this batch."""
    out: list[ev.Event] = []
    for d in decisions:
        e = _event(d, job.version + len(out) + 1, now, supervisor, stop_by, holder)
        if e is not None:
            out.append(e)
    return out


def _event(d: Decision, seq: int, now: datetime, supervisor: str,
           stop_by: str | None, holder: ev.Holder | None) -> ev.Event | None:
    match d:
        case RecordEnd():
            return ev.ExecutionEnded(seq=seq, at=now, submission=d.submission, ref=d.ref,
                                     execution=d.execution, cause=d.cause, final=d.final)
        case RecordError():
            return ev.ApplicationErrorRecorded(seq=seq, at=now, submission=d.submission,
                                               execution=d.execution, error=d.error)
        case RecordStart():
            return ev.ExecutionStarted(seq=seq, at=now, submission=d.submission,
                                       execution=d.execution, started=d.started,
                                       nodes=d.nodes)
        case RecordCheckpoint():
            return ev.CheckpointRecorded(seq=seq, at=now, submission=d.submission,
                                         execution=d.execution, step=d.step,
                                         written=d.written)
        case Bind():
            return ev.SubmissionBound(seq=seq, at=now, submission=d.submission, ref=d.ref)
        case Submit():
            return ev.SubmissionIntended(seq=seq, at=now, submission=d.submission,
                                         token=d.token, gated=d.gated, cause=d.cause,
                                         exclude_nodes=d.exclude_nodes, holder=holder)
        case RetrySubmit():
            return ev.SubmissionAttempted(seq=seq, at=now, submission=d.submission,
                                          supervisor=supervisor, holder=holder)
        case StartRecovery():
            return ev.RecoveryStarted(seq=seq, at=now, rule=d.rule, action=d.action,
                                      cause=d.cause, native=d.native)
        case Stop():
            return ev.StopRequested(seq=seq, at=now, submission=d.submission, ref=d.ref,
                                    cause=d.cause, by=stop_by)
        case CancelObject():
            return ev.CancelSent(seq=seq, at=now, ref=d.ref)
        case OpenGate():
            return None
        case Commit():
            return ev.OutcomeCommitted(seq=seq, at=now, state=d.state, cause=d.cause)
        case PlaceHold():
            return ev.HoldPlaced(seq=seq, at=now, cause=d.cause, recovery=True,
                                 actor=supervisor)
        case Escalate():
            return ev.EscalationRaised(seq=seq, at=now, message=d.message, cause=d.cause)
        case StopDuplicate():
            return ev.DuplicateStopped(seq=seq, at=now, ref=d.ref, token=d.token,
                                       cause=d.cause)
        case PublishSegment():
            return ev.SegmentPublished(seq=seq, at=now, unit_job_id=d.unit_job_id,
                                       task_id=d.task_id, reason=d.reason, actor=supervisor,
                                       nodes=d.nodes, source=d.cause)
        case _:
            assert_never(d)
