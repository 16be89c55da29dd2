"""The events of a job's life: the record is an append-only list of these (S6-S8, S10, S14).

Each event carries the job's per-job sequence number ``seq`` (1, 2, ...) and its time ``at``.
The ``type`` tag is the event's name in the record; the codec refuses a name it doesn't know.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

import msgspec

from dispatch.core.app_error import AppError
from dispatch.core.model import Cause, State
from dispatch.core.policy import Action, Declarations
from dispatch.core.spec import JobSpec


class _Event(msgspec.Struct, frozen=True, kw_only=True, tag_field="type", omit_defaults=True,
             forbid_unknown_fields=True):
    seq: int
    at: datetime


class Holder(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """The process that made a submit attempt: its host, the host's boot id, its pid and
    its start time (clock ticks since boot, /proc/PID/stat field 22). On this very host and
    boot, a pid whose start time differs (or that does not exist) is that process gone: a
    supervisor may then retry its submit within the backend's bound instead of the attempt
    lease (R1)."""

    host: str
    boot_id: str
    pid: int
    start_ticks: int


class JobCreated(_Event, tag="created", frozen=True):
    """The job exists, with its spec, policy (inside the spec) and the backend's declarations."""

    job_id: str
    spec: JobSpec
    declarations: Declarations
    supersedes: str | None = None
    actor: str | None = None
    # The scope whose supervisor serves the job (backend plus cluster, e.g. "slurm:clusterA"),
    # fixed at submit. None (records written before scopes): the backend's name.
    scope: str | None = None


class SubmissionIntended(_Event, tag="submission-intended", frozen=True):
    """The supervisor is about to submit (intent before action). ``cause`` is the cause
    recovered from, for a submission after the first. ``exclude_nodes``: nodes of the job's
    published segment-health exclusions the scheduler is asked to avoid (Slurm --exclude).
    ``holder``: the process that is about to submit (absent in records written before it
    existed, and where the writer could not tell)."""

    submission: int
    token: str
    gated: bool = False
    cause: Cause | None = None
    exclude_nodes: tuple[str, ...] = ()
    holder: Holder | None = None


class SubmissionAttempted(_Event, tag="submission-attempted", frozen=True):
    """A supervisor claims the right to (re)try the submit call for an intended submission.
    ``holder``: the process that makes the attempt, as SubmissionIntended's."""

    submission: int
    supervisor: str = ""
    holder: Holder | None = None


class SubmissionBound(_Event, tag="submission-bound", frozen=True):
    """The submission's object is known: its ref on the scheduler."""

    submission: int
    ref: str


class SubmissionRejected(_Event, tag="submission-rejected", frozen=True):
    """The scheduler refused the submission; no object exists. Ends it like an execution."""

    submission: int
    cause: Cause


class ExecutionEnded(_Event, tag="execution-ended", frozen=True):
    """One execution of a submission's object ended, with its cause."""

    submission: int
    ref: str
    execution: int
    cause: Cause
    final: bool = True  # the object itself ended (False: the scheduler runs it again)


class ApplicationErrorRecorded(_Event, tag="application-error", frozen=True):
    """The application's own error for one ended execution (its first failing rank and its
    words), recorded once per (submission, execution). The third voice: it never changes
    the execution's cause (DESIGN: "Three voices, never mixed").

    ``format``: this event's own version. A record written by a later format is refused
    on decode (exit 5), never misread; records written before this event existed read as
    they always did."""

    submission: int
    execution: int
    error: AppError
    format: Literal[1] = 1


class ExecutionStarted(_Event, tag="execution-started", frozen=True):
    """The scheduler showed an execution of a submission's object running (G1: the end of
    its queued time). ``started``: when the scheduler says it started, if it says; ``nodes``:
    the nodes it holds (G2 weights its time by them). Recorded once per execution.

    ``format``: this event's own version; a later format is refused on decode (exit 5).
    Records written before this event existed read as they always did."""

    submission: int
    execution: int
    started: datetime | None = None
    nodes: int = 1
    format: Literal[1] = 1


class CheckpointRecorded(_Event, tag="checkpoint", frozen=True):
    """The training reported a durable checkpoint (DISPATCH_PROGRESS_FILE, G3): its step and
    when it was written, clamped into the execution's run. The record keeps it so that
    goodput never needs the file again. ``format`` as ExecutionStarted's."""

    submission: int
    execution: int
    step: int
    written: datetime
    format: Literal[1] = 1


class RecoveryStarted(_Event, tag="recovery-started", frozen=True):
    """A rule took the job back to run again; spends one unit of the rule's budget."""

    rule: int
    action: Action
    cause: Cause
    native: bool = False  # the backend carries it out (e.g. Slurm requeue)


class HoldPlaced(_Event, tag="hold-placed", frozen=True):
    cause: Cause
    recovery: bool = True
    actor: str | None = None


class HoldReleased(_Event, tag="hold-released", frozen=True):
    """A person resolved a hold by resubmitting: the job is taken back to run again (a new
    submission, no budget spent) and is ``recovering`` until it runs (S8).

    ``resubmit`` is always true. A release without resubmission would leave a job with
    nothing to do and put ``pending`` after ``recovering``; nothing ever wrote one, so it is
    not part of the vocabulary: a stored ``"resubmit": false`` is refused on decode (the
    record is unusable, exit 5), never read as something else. The field stays so that a
    record that spells out ``"resubmit": true`` still reads."""

    actor: str | None = None
    resubmit: Literal[True] = True


class CancelRequested(_Event, tag="cancel-requested", frozen=True):
    actor: str | None = None


class CancelSent(_Event, tag="cancel-sent", frozen=True):
    ref: str


class GiveUpRequested(_Event, tag="give-up-requested", frozen=True):
    actor: str | None = None


class GateOpened(_Event, tag="gate-opened", frozen=True):
    submission: int
    ref: str


class StopRequested(_Event, tag="stop-requested", frozen=True):
    """The supervisor stops an object. ``by``: the actor the scheduler will name for this
    stop (the supervisor's uid, as Slurm prints "CANCELLED by <uid>"), so that its cancel is
    told apart from a person's (S14)."""

    submission: int
    ref: str
    cause: Cause
    by: str | None = None


class DuplicateStopped(_Event, tag="duplicate-stopped", frozen=True):
    """An object the supervisor did not mean to have (S15): stopped, never counted."""

    ref: str
    token: str
    cause: Cause


class OutcomeCommitted(_Event, tag="outcome-committed", frozen=True):
    """Terminal, never changes (S7)."""

    state: State
    cause: Cause


class EscalationRaised(_Event, tag="escalation-raised", frozen=True):
    message: str
    cause: Cause | None = None


class Superseded(_Event, tag="superseded", frozen=True):
    by: str
    actor: str | None = None


class SegmentPublished(_Event, tag="segment-published", frozen=True):
    """A segment-health decision was published for an allocation unit (H1)."""

    unit_job_id: str
    task_id: str
    reason: str
    actor: str | None = None
    nodes: tuple[str, ...] = ()
    path: str = ""
    # What the decision rests on: node-unavailable | node-lost-fence (the scheduler's node
    # state, the supervisor's decision) or operator (a person's mark). "" in older records.
    source: str = ""


class SegmentCleared(_Event, tag="segment-cleared", frozen=True):
    unit_job_id: str
    task_id: str
    reason: str = ""
    actor: str | None = None


Event = (
    JobCreated
    | SubmissionIntended
    | SubmissionAttempted
    | SubmissionBound
    | SubmissionRejected
    | ExecutionEnded
    | ApplicationErrorRecorded
    | ExecutionStarted
    | CheckpointRecorded
    | RecoveryStarted
    | HoldPlaced
    | HoldReleased
    | CancelRequested
    | CancelSent
    | GiveUpRequested
    | GateOpened
    | StopRequested
    | DuplicateStopped
    | OutcomeCommitted
    | EscalationRaised
    | Superseded
    | SegmentPublished
    | SegmentCleared
)

EVENT_TYPES: tuple[type[_Event], ...] = (
    JobCreated,
    SubmissionIntended,
    SubmissionAttempted,
    SubmissionBound,
    SubmissionRejected,
    ExecutionEnded,
    ApplicationErrorRecorded,
    ExecutionStarted,
    CheckpointRecorded,
    RecoveryStarted,
    HoldPlaced,
    HoldReleased,
    CancelRequested,
    CancelSent,
    GiveUpRequested,
    GateOpened,
    StopRequested,
    DuplicateStopped,
    OutcomeCommitted,
    EscalationRaised,
    Superseded,
    SegmentPublished,
    SegmentCleared,
)
