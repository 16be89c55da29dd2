"""The vocabulary of dispatch: states, causes, what a backend reports, what a caller reads.

Everything here is immutable data. No I/O, no clock: time is always passed in.
Enums encode as their names (the seed's spelling, e.g. ``"node-lost"``); see codec.py.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import cached_property

import msgspec

from dispatch.core.app_error import AppError
from dispatch.core.progress import Progress
from dispatch.errors import Unreachable


class State(StrEnum):
    """A job's coarse state (S1). Also used for what a backend reports of one object."""

    PENDING = "pending"
    HELD = "held"
    RUNNING = "running"
    RECOVERING = "recovering"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    UNKNOWN = "unknown"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({State.SUCCEEDED, State.FAILED, State.CANCELLED})


class CauseKind(StrEnum):
    """Why a job (or object) is in its state (S2). A closed list: never stretched."""

    NONE = "none"
    PREEMPTED = "preempted"
    NODE_LOST = "node-lost"
    OUT_OF_MEMORY = "out-of-memory"
    TIME_LIMIT = "time-limit"
    NON_ZERO_EXIT = "non-zero-exit"
    LAUNCH_FAILED = "launch-failed"
    NO_CAPACITY = "no-capacity"
    HELD = "held"
    RELEASED = "released"
    REQUEUED = "requeued"
    CANCELLED = "cancelled"
    DUPLICATE = "duplicate"
    UNKNOWN = "unknown"


# Ends whose provenance is (or has a part that is) the application's: only these carry the
# application's error. A time limit, a preemption, a lost node or a cancel ends the processes
# with a signal the system sent; "killed by signal 15" is then not the application's words.
APPLICATION_ENDS = frozenset({CauseKind.NON_ZERO_EXIT, CauseKind.OUT_OF_MEMORY,
                              CauseKind.LAUNCH_FAILED, CauseKind.UNKNOWN})


class Provenance(StrEnum):
    """Who said so: the scheduler, the application (an exit code), or an actor."""

    SCHEDULER = "scheduler"
    APPLICATION = "application"
    ACTOR = "actor"


class Level(StrEnum):
    """How much a Status knows: the full record, or only what the scheduler shows (S12)."""

    FULL = "full"
    OBJECT_ONLY = "object-only"


class Cause(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
             forbid_unknown_fields=True):
    """Why: a kind, who said so, and the scheduler's own words kept verbatim.

    ``detail`` holds only the scheduler's words (nothing stripped, nothing appended, S2);
    ``note`` holds dispatch's own explanation (e.g. "fenced: still reported running 300s
    after the node was lost"), shown beside the detail.
    """

    kind: CauseKind
    provenance: Provenance = Provenance.SCHEDULER
    actor: str | None = None
    detail: str = ""
    # dispatch's own explanation, kept apart from ``detail`` (the scheduler's words, verbatim):
    # e.g. why an end is attributed to a segment-health exclusion (core/attribution.py).
    note: str = ""
    exit_code: int | None = None
    at: datetime | None = None


class SchedulerUnreachable(Unreachable):
    """The scheduler could not be asked. Never a state: no transition is made on it (S3, R3)."""

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"{backend} scheduler unreachable: {reason}")
        self.backend = backend
        self.reason = reason


class Execution(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
             forbid_unknown_fields=True):
    """One run of one scheduler object. A requeued Slurm job has several executions.

    ``index`` counts from 0 within the object. ``cause`` is set once the execution ended.
    ``error``: the application's own error for an ended execution (its first failing rank
    and its words), when the backend could read one; never part of the cause.
    """

    index: int
    started_at: datetime | None = None
    ended_at: datetime | None = None
    cause: Cause | None = None
    nodes: tuple[str, ...] = ()
    error: AppError | None = None
    # What the training reported through DISPATCH_PROGRESS_FILE (G3), when the backend read it.
    progress: Progress | None = None

    @property
    def ended(self) -> bool:
        return self.cause is not None


class UnitHealth(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
                 forbid_unknown_fields=True):
    """One allocation unit of an object and its nodes the scheduler marks unavailable.

    ``unit`` is the unit's Slurm name: the job id ("123") or array job and task ("123_4").
    ``detail``: the scheduler's words about those nodes, verbatim ("n4 MIXED+DRAIN reason=e2e").
    """

    unit: str
    nodes: tuple[str, ...]
    detail: str = ""


class ObjectReport(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
             forbid_unknown_fields=True):
    """What a backend sees of one scheduler object (a Slurm job, a TrainJob, a local process group).

    ``state`` is the object's own state in the State vocabulary: an ended object is
    succeeded / failed / cancelled, which is the object's end, not the job's (S6).
    ``token`` is the idempotency token the object was submitted with ("<job>.<submission>").
    ``lost_since`` is when the backend first saw a node of this running object lost (S11).
    ``unhealthy_units`` are the allocation units of this object (seed 002: the job itself,
    or each task of an array) with nodes the scheduler marks unavailable (Slurm DRAIN /
    DOWN / FAIL): input to the segment-health publisher (H1), one decision per unit.
    """

    ref: str
    token: str | None
    state: State
    cause: Cause
    executions: tuple[Execution, ...] = ()
    nodes: tuple[str, ...] = ()
    lost_since: datetime | None = None
    gated: bool = False
    unhealthy_units: tuple[UnitHealth, ...] = ()

    @property
    def ended(self) -> bool:
        return self.state.terminal

    @property
    def alive(self) -> bool:
        return not self.state.terminal


def token_for(job_id: str, submission: int) -> str:
    return f"{job_id}.{submission}"


def parse_token(token: str) -> tuple[str, int] | None:
    """Split an idempotency token; None when it is not one of ours."""
    job_id, sep, number = token.rpartition(".")
    if not sep or not job_id or not _is_number(number):
        return None
    return job_id, int(number)


def _is_number(text: str) -> bool:
    """ASCII digits only: str.isdigit() alone takes '²', which int() refuses."""
    return text.isascii() and text.isdigit()


@dataclass(frozen=True, slots=True)
class Changes:
    """What a backend that reports changes says of one look: its objects that appeared,
    changed or went away after its look number ``since`` up to this one, ``look``, each
    named by its ref and by its token (a job is touched when one of its refs or tokens is
    in ``keys``). A reader that did not use look ``since`` compares everything."""

    since: int
    look: int
    keys: frozenset[str]

    def touches(self, names: Sequence[str]) -> bool:
        return any(n in self.keys for n in names)


@dataclass(frozen=True, kw_only=True)
class Discovery:
    """Everything a backend showed in one batched look, at ``at``.

    ``complete`` is False when the backend could only answer for some objects; decide
    makes no transition for a job whose objects are missing from an incomplete look.
    One Discovery serves a whole tick, so its lookups are indexed once (not a scan per job).
    """

    at: datetime
    objects: tuple[ObjectReport, ...] = ()
    complete: bool = True
    # Set by a backend that reports changes (its ``reports_changes``): what changed since
    # its previous look; None: it cannot tell, compare every object (supervise/loop.py).
    changes: Changes | None = None

    @cached_property
    def _by_job(self) -> dict[str, tuple[ObjectReport, ...]]:
        # Built once a tick over every object of the look (100,000 at scale): parse_token's
        # test inlined, and a job's few objects gathered in a tuple as they come.
        grouped: dict[str, tuple[ObjectReport, ...]] = {}
        get = grouped.get
        for obj in self.objects:
            if obj.token is None:
                continue
            job_id, sep, number = obj.token.rpartition(".")
            if sep and job_id and number.isascii() and number.isdigit():  # _is_number
                grouped[job_id] = get(job_id, ()) + (obj,)
        return grouped

    @cached_property
    def _by_ref(self) -> dict[str, ObjectReport]:
        out: dict[str, ObjectReport] = {}
        for obj in self.objects:
            out.setdefault(obj.ref, obj)
        return out

    def of_job(self, job_id: str) -> tuple[ObjectReport, ...]:
        """The objects carrying one of this job's tokens."""
        return self._by_job.get(job_id, ())

    def get(self, ref: str) -> ObjectReport | None:
        return self._by_ref.get(ref)

    def index(self) -> dict[str, tuple[ObjectReport, ...]]:
        """Objects grouped by job id."""
        return dict(self._by_job)


class Transition(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
             forbid_unknown_fields=True):
    """One committed transition in a job's history (S10): never "running"."""

    at: datetime
    state: State
    cause: Cause | None = None
    seq: int = 0
    note: str = ""


class Escalation(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True,
             forbid_unknown_fields=True):
    at: datetime
    message: str
    cause: Cause | None = None
    seq: int = 0


class Forecast(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the plan will decide once the supervisor commits what the scheduler shows now
    (S7): never a state the job is in, only what it is about to be."""

    state: State
    cause: Cause | None = None


class Status(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a caller reads about a job.

    ``state`` is terminal only once the record holds the outcome (``settled``, S7).
    ``forecast`` is what the plan will decide from what the scheduler shows now, before the
    supervisor has committed it; None when nothing is about to change.
    ``scheduler_seen`` is False when the state could not use the scheduler's word for the
    job's current object (not asked, unreachable, or missing from an incomplete look): the
    state is then the one the record implies (see status.project), never a guess from
    silence.
    """

    job: str
    name: str
    state: State
    cause: Cause | None
    level: Level
    # Sequences: a job read through a snapshot passes its deferred ones (core/deferred.py)
    # on undecoded, so a reader that shows neither never decodes them.
    history: Sequence[Transition] = ()
    escalations: Sequence[Escalation] = ()
    supersedes: str | None = None
    superseded_by: str | None = None
    submissions: int = 0
    budget_used: dict[str, int] = msgspec.field(default_factory=dict)
    objects: tuple[str, ...] = ()
    settled: bool = False  # the outcome is committed to the record
    forecast: Forecast | None = None
    scheduler_seen: bool = True
    backend: str = ""
    segments: tuple[str, ...] = ()  # published segment-health decisions: "job.task: reason"
    created_at: datetime | None = None
    ended_at: datetime | None = None  # when the outcome was committed (settled jobs only)
    scope: str = ""  # the scope whose supervisor serves the job (JobCreated.scope)
    # The application's own error for the job's latest end (the third voice, beside the
    # cause's detail and note); None when none was captured or the job runs again.
    error: AppError | None = None
