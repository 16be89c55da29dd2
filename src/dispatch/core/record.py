"""fold(): replay a job's record into a Job (pure, deterministic, `now` passed in).

The record is the truth about what was decided; the scheduler is the truth about what runs.
fold never looks at a scheduler. Invariants enforced here, whatever the record holds:
a committed outcome never changes (S7); recovering never returns to pending (S8, by
construction: a job that was taken back to run again stays "recovering" until it runs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any, assert_never

import msgspec

from dispatch.core import events as ev
from dispatch.core.app_error import AppError
from dispatch.core.deferred import Deferred
from dispatch.core.interned import EMPTY, interned
from dispatch.core.model import Cause, CauseKind, Escalation, Provenance, State, Transition
from dispatch.core.policy import Declarations, rule_name
from dispatch.core.spec import JobSpec
from dispatch.errors import StoreUnusable


class RecordError(StoreUnusable, ValueError):
    """A record that cannot be trusted, so is never folded: it does not start with
    'created' at seq 1, its seq numbers are not 1, 2, 3, ... (an event out of order, a
    repeated or missing one), it holds a second 'created', or the job's stored version is
    not its last seq. Names the job and the seq (exit 5, as every StoreUnusable)."""

    def __init__(self, message: str, *, job_id: str | None = None,
                 seq: int | None = None) -> None:
        self.job_id = job_id
        self.seq = seq
        where = ", ".join(w for w in (f"job {job_id}" if job_id is not None else "",
                                      f"seq {seq}" if seq is not None else "") if w)
        super().__init__(f"{where}: {message}" if where else message)


def check_record(record: Sequence[ev.Event], job_id: str) -> None:
    """Refuse (RecordError) a record that is not wholly job ``job_id``'s own: its seq 1 must
    be a 'created' event naming ``job_id`` (a record swapped with another job's would tell
    that job's story under this id), and it must hold no other 'created' event. Every read
    of a stored record passes through here, so no reader (ls, status, history, logs, the
    API, the supervisor) can show such a record."""
    if not record:
        raise RecordError("the record holds no events", job_id=job_id, seq=1)
    first = record[0]
    if not isinstance(first, ev.JobCreated) or first.seq != 1:
        raise RecordError("a job's record must start with a 'created' event at seq 1",
                          job_id=job_id, seq=first.seq)
    if first.job_id != job_id:
        raise RecordError(f"seq 1 is the 'created' event of job {first.job_id}, not of this "
                          "job: the record is not this job's", job_id=job_id, seq=1)
    for e in record[1:]:
        if isinstance(e, ev.JobCreated):
            raise RecordError(f"a second 'created' event (naming job {e.job_id})",
                              job_id=job_id, seq=e.seq)


class Submission(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """One submission as the record knows it."""

    number: int
    token: str
    intended_at: datetime
    attempted_at: datetime
    gated: bool = False
    gate_opened: bool = False
    ref: str | None = None
    cause: Cause | None = None  # the cause recovered from (submission > 1)
    ended: bool = False
    end_cause: Cause | None = None
    executions_recorded: frozenset[int] = frozenset()
    stop_cause: Cause | None = None
    stop_at: datetime | None = None
    stop_by: str | None = None  # the actor the scheduler names for our stop (Slurm: a uid)
    cancel_sent_at: datetime | None = None
    exclude_nodes: tuple[str, ...] = ()  # nodes the scheduler was asked to avoid
    executions_started: frozenset[int] = frozenset()  # ExecutionStarted recorded (G1)
    held_ends: tuple[int, ...] = ()  # executions someone's hold ended (core/held_runs.py)
    checkpoint: tuple[int, int] | None = None  # (execution, step) of the latest checkpoint
    # The processes that attempted the submit (intent, then each retry), oldest first; None
    # for an attempt whose record names no holder (written before holders were recorded).
    holders: tuple[ev.Holder | None, ...] = ()

    @property
    def unresolved(self) -> bool:
        """Attempted and never resolved: no object bound, no rejection or end recorded."""
        return self.ref is None and not self.ended


class Hold(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    cause: Cause
    recovery: bool
    at: datetime
    actor: str | None = None


class Outcome(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    state: State
    cause: Cause
    at: datetime
    seq: int


class SegmentDecision(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    unit_job_id: str
    task_id: str
    reason: str
    at: datetime
    actor: str | None = None
    nodes: tuple[str, ...] = ()
    source: str = ""  # node-unavailable | node-lost-fence | operator ("" in older records)


class RecordedError(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """The application's error recorded for one execution (ApplicationErrorRecorded)."""

    submission: int
    execution: int
    error: AppError
    seq: int


class DeferredSubmissions(Deferred[Submission]):
    """A snapshot's submissions (core/deferred.py): the current one decoded, the ones
    before it when first used; ``refs``, every bound ref in order, known without them."""

    __slots__ = ("refs",)

    def __init__(self, raw: Any, count: int,
                 decode: Callable[[Any, int, str], tuple[Submission, ...]], owner: str,
                 current: Submission, refs: tuple[str, ...]) -> None:
        super().__init__(raw, count, decode, owner, (current,))
        self.refs = refs


class Job(msgspec.Struct, frozen=True, kw_only=True, omit_defaults=True):
    """A job as its record says it is at ``version``. Read through a snapshot, its
    ``submissions``, ``history`` and ``escalations`` are Deferred (decoded when first
    used); folded, they are tuples. Either way they compare and hash as tuples."""

    id: str
    spec: JobSpec
    declarations: Declarations
    created_at: datetime
    version: int
    submissions: Sequence[Submission] = ()
    budget_used: tuple[int, ...] = ()
    hold: Hold | None = None
    resubmit_requested: Cause | None = None  # a person resolved a hold with resubmit
    awaiting: Cause | None = None  # the latest submission ended; no verdict recorded yet
    cancel_requested: Cause | None = None
    give_up_requested: Cause | None = None
    outcome: Outcome | None = None
    escalations: Sequence[Escalation] = ()
    history: Sequence[Transition] = ()
    supersedes: str | None = None
    superseded_by: str | None = None
    duplicates_stopped: frozenset[str] = frozenset()
    # (ref, when its latest DuplicateStopped was recorded): a stop recorded and never sent
    # (its supervisor died in between) is sent again, as a submission's stop is.
    duplicate_stops: tuple[tuple[str, datetime], ...] = ()
    segments: tuple[SegmentDecision, ...] = ()
    recovered: bool = False  # taken back to run again at least once
    scope: str = ""  # JobCreated.scope, else the backend's name (records before scopes)
    errors: tuple[RecordedError, ...] = ()  # the application's errors, one per execution
    last_end: tuple[int, int] | None = None  # (submission, execution) of the latest end

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def error(self) -> AppError | None:
        """The application's error for the job's latest recorded end, if one was captured."""
        if self.last_end is None:
            return None
        for r in reversed(self.errors):
            if (r.submission, r.execution) == self.last_end:
                return r.error
        return None

    def has_error(self, submission: int, execution: int) -> bool:
        return any(r.submission == submission and r.execution == execution
                   for r in self.errors)

    @property
    def refs(self) -> tuple[str, ...]:
        """Every bound ref, in submission order (what Status.objects lists)."""
        subs = self.submissions
        if isinstance(subs, DeferredSubmissions):
            return subs.refs
        return tuple(s.ref for s in subs if s.ref is not None)

    @property
    def current(self) -> Submission | None:
        return self.submissions[-1] if self.submissions else None

    def submission(self, number: int) -> Submission | None:
        if 1 <= number <= len(self.submissions):
            return self.submissions[number - 1]
        return None

    def duplicate_stopped_at(self, ref: str) -> datetime | None:
        """When the latest stop of duplicate object ``ref`` was recorded (None: never)."""
        return next((at for r, at in self.duplicate_stops if r == ref), None)

    @property
    def terminal(self) -> bool:
        return self.outcome is not None


def fold(record: Sequence[ev.Event] | Iterable[ev.Event], now: datetime, *,
         job_id: str | None = None, version: int | None = None) -> Job:
    """Replay ``record`` (ordered by seq) into a Job. ``now`` is accepted for symmetry with
    project/decide and so that no caller is tempted to read a clock inside the core.

    A record that cannot be trusted is refused with RecordError, never folded into a
    different state: it must start with 'created' at seq 1 and go on 2, 3, ... with no gap,
    repeat or reordering (a deleted 'recovery-started' would silently give a budget back).
    ``job_id``: the job the caller asked for (named in errors even when the first event is
    missing). ``version``: the job's stored version (``jobs.version``), which must be the
    last seq: a version ahead of the events means events are missing at the end.
    """
    del now  # the record alone decides; time-based reasoning lives in project/decide
    it = iter(record)
    first = next(it, None)
    if not isinstance(first, ev.JobCreated):
        raise RecordError("a job's record must start with a 'created' event", job_id=job_id,
                          seq=first.seq if first is not None else None)
    if job_id is not None and first.job_id != job_id:
        raise RecordError(f"the 'created' event names job {first.job_id}", job_id=job_id,
                          seq=first.seq)
    if first.seq != 1:
        raise RecordError("a job's record must start at seq 1", job_id=first.job_id,
                          seq=first.seq)
    b = _Builder(first)
    for event in it:
        b.apply(event)
    if version is not None and version != b.version:
        raise RecordError(f"the job's version is {version} but its last event is seq "
                          f"{b.version}: the record is not whole", job_id=b.job_id,
                          seq=b.version)
    return b.build()


def advance(job: Job, more: Iterable[ev.Event]) -> Job:
    """Fold further events onto an already-folded job (same result as a full fold, and
    the same refusals: the first new event must be seq ``job.version + 1``)."""
    b = _Builder.resume(job)
    for event in more:
        b.apply(event)
    return b.build()


def _by_actor(kind: CauseKind, actor: str | None, at: datetime) -> Cause:
    return Cause(kind=kind, provenance=Provenance.ACTOR, actor=actor, at=at)


class _Builder:
    """Mutable during one fold; the result is frozen. Kept small for the P1 hot path."""

    __slots__ = (
        "job_id", "spec", "declarations", "created_at", "version", "subs", "budget", "hold",
        "resubmit", "awaiting", "cancel", "give_up", "outcome", "escalations", "history",
        "supersedes", "superseded_by", "duplicates", "duplicate_stops", "segments", "recovered",
        "scope", "errors", "last_end",
    )

    def __init__(self, created: ev.JobCreated) -> None:
        self.job_id = created.job_id
        self.spec = created.spec
        self.declarations = interned(created.declarations)  # core/interned.py
        self.created_at = created.at
        self.version = created.seq
        self.subs: list[Submission] = []
        self.budget = [0] * len(created.spec.policy.rules)
        self.hold: Hold | None = None
        self.resubmit: Cause | None = None
        self.awaiting: Cause | None = None
        self.cancel: Cause | None = None
        self.give_up: Cause | None = None
        self.outcome: Outcome | None = None
        self.escalations: list[Escalation] = []
        self.history: list[Transition] = [
            Transition(at=created.at, state=State.PENDING, seq=created.seq,
                       note=f"created (supersedes {created.supersedes})"
                       if created.supersedes else "created")
        ]
        self.supersedes = created.supersedes
        self.superseded_by: str | None = None
        self.duplicates: set[str] = set()
        self.duplicate_stops: dict[str, datetime] = {}
        self.segments: dict[tuple[str, str], SegmentDecision] = {}
        self.recovered = False
        self.scope = created.scope or created.spec.backend
        self.errors: list[RecordedError] = []
        self.last_end: tuple[int, int] | None = None

    @classmethod
    def resume(cls, job: Job) -> _Builder:
        b = cls.__new__(cls)
        b.job_id, b.spec, b.declarations = job.id, job.spec, job.declarations
        b.created_at, b.version = job.created_at, job.version
        b.subs = list(job.submissions)
        b.budget = list(job.budget_used)
        b.hold, b.resubmit, b.awaiting = job.hold, job.resubmit_requested, job.awaiting
        b.cancel, b.give_up, b.outcome = job.cancel_requested, job.give_up_requested, job.outcome
        b.escalations, b.history = list(job.escalations), list(job.history)
        b.supersedes, b.superseded_by = job.supersedes, job.superseded_by
        b.duplicates = set(job.duplicates_stopped)
        b.duplicate_stops = dict(job.duplicate_stops)
        b.segments = {(d.unit_job_id, d.task_id): d for d in job.segments}
        b.recovered = job.recovered
        b.scope = job.scope
        b.errors = list(job.errors)
        b.last_end = job.last_end
        return b

    def _sub(self, number: int) -> Submission | None:
        if 1 <= number <= len(self.subs):
            return self.subs[number - 1]
        return None

    def _set(self, number: int, sub: Submission) -> None:
        self.subs[number - 1] = sub

    def apply(self, e: ev.Event) -> None:  # noqa: C901 - one branch per event type
        if e.seq != self.version + 1:
            what = ("out of order or repeated" if e.seq <= self.version
                    else f"seq {self.version + 1}..{e.seq - 1} missing")
            raise RecordError(f"expected seq {self.version + 1} after seq {self.version}, "
                              f"found seq {e.seq} ({what})", job_id=self.job_id, seq=e.seq)
        if isinstance(e, ev.JobCreated):
            raise RecordError("a second 'created' event", job_id=self.job_id, seq=e.seq)
        self.version = e.seq
        replace = msgspec.structs.replace
        if isinstance(e, ev.SubmissionIntended):
            if self.outcome is not None or e.submission != len(self.subs) + 1:
                return
            self.subs.append(Submission(number=e.submission, token=e.token, intended_at=e.at,
                                        attempted_at=e.at, gated=e.gated, cause=e.cause,
                                        exclude_nodes=e.exclude_nodes,
                                        holders=interned((e.holder,), "holders")))
            self.awaiting = None
            self.resubmit = None
        elif isinstance(e, ev.SubmissionAttempted):
            s = self._sub(e.submission)
            if s is not None:
                held = (s.holders if e.holder in s.holders
                        else interned((*s.holders, e.holder), "holders"))
                self._set(e.submission, replace(s, attempted_at=e.at, holders=held))
        elif isinstance(e, ev.SubmissionBound):
            s = self._sub(e.submission)
            if s is not None and s.ref is None:
                self._set(e.submission, replace(s, ref=e.ref))
        elif isinstance(e, ev.SubmissionRejected):
            s = self._sub(e.submission)
            if s is not None and not s.ended:
                self._set(e.submission, replace(s, ended=True, end_cause=e.cause))
                if e.submission == len(self.subs) and self.outcome is None:
                    self.awaiting = e.cause
        elif isinstance(e, ev.ExecutionEnded):
            s = self._sub(e.submission)
            if s is None or e.execution in s.executions_recorded:
                return
            recorded = interned(s.executions_recorded | {e.execution}, "recorded")
            if e.final and not s.ended:
                s = replace(s, ended=True, end_cause=e.cause, executions_recorded=recorded)
                if e.submission == len(self.subs) and self.outcome is None:
                    self.awaiting = e.cause
            else:
                by_hold = not e.final and e.cause.kind is CauseKind.HELD  # core/held_runs.py
                s = replace(s, executions_recorded=recorded, held_ends=(
                    (*s.held_ends, e.execution) if by_hold else s.held_ends))
            if not e.final and self.outcome is None:
                self.recovered = True  # the scheduler runs it again: taken back (S8)
            self._set(e.submission, s)
            self.last_end = (e.submission, e.execution)
        elif isinstance(e, ev.ApplicationErrorRecorded):
            # Once per execution: a second one (two supervisors racing) is not a new story.
            if not any(r.submission == e.submission and r.execution == e.execution
                       for r in self.errors):
                self.errors.append(RecordedError(submission=e.submission,
                                                 execution=e.execution, error=e.error,
                                                 seq=e.seq))
        elif isinstance(e, ev.ExecutionStarted):
            s = self._sub(e.submission)
            if s is not None:
                self._set(e.submission, replace(
                    s, executions_started=interned(s.executions_started | {e.execution},
                                                 "started")))
        elif isinstance(e, ev.CheckpointRecorded):
            s = self._sub(e.submission)
            if s is not None and (s.checkpoint is None
                                  or (e.execution, e.step) > s.checkpoint):
                self._set(e.submission, replace(s, checkpoint=(e.execution, e.step)))
        elif isinstance(e, ev.RecoveryStarted):
            if self.outcome is not None:
                return
            if 0 <= e.rule < len(self.budget):
                self.budget[e.rule] += 1
            self.recovered = True
            if not e.native:
                self.awaiting = None
            self.history.append(Transition(at=e.at, state=State.RECOVERING, cause=e.cause,
                                           seq=e.seq, note=f"{e.action.value} by rule "
                                           f"{rule_name(self.spec.policy.rules, e.rule)}"
                                           + (" (native)" if e.native else "")))
        elif isinstance(e, ev.HoldPlaced):
            if self.outcome is not None:
                return
            self.hold = Hold(cause=e.cause, recovery=e.recovery, at=e.at, actor=e.actor)
            self.awaiting = None
            self.history.append(Transition(at=e.at, state=State.HELD, cause=e.cause, seq=e.seq,
                                           note="recovery hold" if e.recovery else "hold"))
        elif isinstance(e, ev.HoldReleased):
            if self.outcome is not None or self.hold is None:
                return
            # Always a resubmission (events.HoldReleased): taken back to run again, so
            # recovering until it runs, never pending again (S8).
            self.resubmit = self.hold.cause
            self.hold = None
            self.recovered = True
            self.history.append(Transition(
                at=e.at, state=State.RECOVERING,
                cause=Cause(kind=CauseKind.RELEASED, provenance=Provenance.ACTOR, actor=e.actor,
                            at=e.at),
                seq=e.seq, note="resubmitted by a person"))
        elif isinstance(e, ev.CancelRequested):
            if self.outcome is None and self.cancel is None:
                self.cancel = _by_actor(CauseKind.CANCELLED, e.actor, e.at)
        elif isinstance(e, ev.CancelSent):
            for i, s in enumerate(self.subs):
                if s.ref == e.ref:
                    self.subs[i] = replace(s, cancel_sent_at=e.at)
        elif isinstance(e, ev.GiveUpRequested):
            if self.outcome is None and self.give_up is None:
                self.give_up = _by_actor(CauseKind.CANCELLED, e.actor, e.at)
        elif isinstance(e, ev.GateOpened):
            s = self._sub(e.submission)
            if s is not None:
                self._set(e.submission, replace(s, gate_opened=True))
        elif isinstance(e, ev.StopRequested):
            s = self._sub(e.submission)
            if s is not None:
                self._set(e.submission, replace(s, stop_cause=s.stop_cause or e.cause,
                                                stop_at=e.at, stop_by=s.stop_by or e.by))
        elif isinstance(e, ev.DuplicateStopped):
            self.duplicates.add(e.ref)
            self.duplicate_stops[e.ref] = e.at
        elif isinstance(e, ev.OutcomeCommitted):
            if self.outcome is not None or not e.state.terminal:
                return  # S7: the first committed outcome is the outcome, for ever
            self.outcome = Outcome(state=e.state, cause=e.cause, at=e.at, seq=e.seq)
            self.awaiting = None
            self.history.append(Transition(at=e.at, state=e.state, cause=e.cause, seq=e.seq))
        elif isinstance(e, ev.EscalationRaised):
            self.escalations.append(Escalation(at=e.at, message=e.message, cause=e.cause,
                                               seq=e.seq))
        elif isinstance(e, ev.Superseded):
            if self.superseded_by is None:
                self.superseded_by = e.by
        elif isinstance(e, ev.SegmentPublished):
            self.segments[(e.unit_job_id, e.task_id)] = SegmentDecision(
                unit_job_id=e.unit_job_id, task_id=e.task_id, reason=e.reason, at=e.at,
                actor=e.actor, nodes=e.nodes, source=e.source)
        elif isinstance(e, ev.SegmentCleared):
            self.segments.pop((e.unit_job_id, e.task_id), None)
        else:
            assert_never(e)  # mypy: an event type added without its fold

    def build(self) -> Job:
        return Job(
            id=self.job_id, spec=self.spec, declarations=self.declarations,
            created_at=self.created_at, version=self.version, submissions=tuple(self.subs),
            budget_used=interned(tuple(self.budget), "budget"), hold=self.hold,
            resubmit_requested=self.resubmit,
            awaiting=self.awaiting, cancel_requested=self.cancel, give_up_requested=self.give_up,
            outcome=self.outcome, escalations=tuple(self.escalations),
            history=tuple(self.history), supersedes=self.supersedes,
            superseded_by=self.superseded_by,
            duplicates_stopped=frozenset(self.duplicates) if self.duplicates else EMPTY,
            duplicate_stops=tuple(self.duplicate_stops.items()),
            segments=tuple(self.segments.values()), recovered=self.recovered,
            scope=self.scope, errors=tuple(self.errors), last_end=self.last_end,
        )
