"""Reusable pieces for the core's tests: a small tick driver and hypothesis strategies.

``Sim`` drives one job the way one supervisor tick does (decide -> to_events -> advance),
keeping the whole record so tests can compare it with a fresh ``fold``. The strategies
build every model type and every record event, for round-trip and fold properties.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import msgspec
from hypothesis import strategies as st

from dispatch.core import events as ev
from dispatch.core.app_error import AppError, ErrorSource
from dispatch.core.decide import Decision, decide, to_events
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    Escalation,
    Execution,
    Forecast,
    Level,
    ObjectReport,
    Provenance,
    State,
    Status,
    Transition,
    UnitHealth,
    token_for,
)
from dispatch.core.policy import Action, Declarations, Enforcer, Plan, RecoveryPolicy, Rule
from dispatch.core.progress import Checkpoint, Progress
from dispatch.core.record import Job, advance, fold
from dispatch.core.spec import JobSpec, SegmentHealthSpec
from dispatch.core.status import project

T0 = datetime(2026, 1, 1, tzinfo=UTC)
JOB = "j"

# --- builders ----------------------------------------------------------------------------


def rule(on: Iterable[CauseKind], action: Action, budget: int | None = None,
         enforcer: Enforcer | None = None) -> Rule:
    return Rule(on=tuple(on), action=action, budget=budget, enforcer=enforcer)


def spec_with(rules: Sequence[Rule], backend: str = "local") -> JobSpec:
    return JobSpec(name="train", command=("python", "train.py"), backend=backend,
                   policy=RecoveryPolicy(rules=tuple(rules)))


LOCAL = Declarations(backend="local")
SLURM = Declarations(backend="slurm", native_actions=frozenset({Action.REQUEUE}))
KUBEFLOW = Declarations(backend="kubeflow", native_actions=frozenset({Action.RESTART}))


def cause(kind: CauseKind, detail: str = "", **kw: Any) -> Cause:
    return Cause(kind=kind, detail=detail, **kw)


def obj(number: int, state: State, kind: CauseKind = CauseKind.NONE, *, ref: str | None = None,
        detail: str = "", job: str = JOB, executions: tuple[Execution, ...] = (),
        lost_since: datetime | None = None, gated: bool = False,
        cause_: Cause | None = None) -> ObjectReport:
    """What a backend reports of the object of submission ``number`` (ref r<number>)."""
    return ObjectReport(ref=ref or f"r{number}", token=token_for(job, number), state=state,
                        cause=cause_ or Cause(kind=kind, detail=detail),
                        executions=executions, lost_since=lost_since, gated=gated)


def ended(number: int, kind: CauseKind, detail: str = "", **kw: Any) -> ObjectReport:
    state = {CauseKind.NONE: State.SUCCEEDED, CauseKind.CANCELLED: State.CANCELLED}.get(
        kind, State.FAILED)
    return obj(number, state, kind, detail=detail, **kw)


class Sim:
    """One job and its record, driven tick by tick like the supervisor does."""

    def __init__(self, rules: Sequence[Rule] = (), *, declarations: Declarations = LOCAL,
                 job_id: str = JOB, at: datetime = T0) -> None:
        spec = spec_with(rules, declarations.backend)
        self.plan = Plan(policy=spec.policy, declarations=declarations)
        self.record: list[ev.Event] = [
            ev.JobCreated(seq=1, at=at, job_id=job_id, spec=spec, declarations=declarations)
        ]
        self.job: Job = fold(self.record, at)
        self.now = at

    def discovery(self, objects: Sequence[ObjectReport] | None, complete: bool = True
                  ) -> Discovery | None:
        if objects is None:
            return None
        return Discovery(at=self.now, objects=tuple(objects), complete=complete)

    def tick(self, objects: Sequence[ObjectReport] | None, *, at: datetime | None = None,
             complete: bool = True) -> list[Decision]:
        """decide -> to_events -> advance, as one supervisor tick. ``objects`` None: the
        scheduler could not be asked."""
        if at is not None:
            self.now = at
        decisions = decide(self.job, self.discovery(objects, complete), self.plan, self.now)
        self.append(to_events(decisions, self.job, self.now))
        return decisions

    def append(self, events: Sequence[ev.Event]) -> None:
        self.record.extend(events)
        self.job = advance(self.job, events)

    def inject(self, cls: type[ev._Event], **fields: Any) -> ev.Event:
        """A person's request (or any event) appended to the record at ``now``."""
        e = cls(seq=self.job.version + 1, at=self.now, **fields)  # type: ignore[arg-type]
        self.append([e])
        return e  # type: ignore[return-value]

    def later(self, seconds: float) -> datetime:
        self.now = self.now + timedelta(seconds=seconds)
        return self.now

    def status(self, objects: Sequence[ObjectReport] | None, complete: bool = True) -> Status:
        return project(self.job, self.discovery(objects, complete), self.now)


def kinds_of(decisions: Iterable[Decision]) -> list[str]:
    return [type(d).__name__ for d in decisions]


# --- strategies --------------------------------------------------------------------------

datetimes = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1),
                         timezones=st.sampled_from([UTC, timezone(timedelta(hours=2)),
                                                    timezone(timedelta(hours=-5))]))
small_text = st.text(max_size=20)
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz-_ .:/0123456789", max_size=30)
ints = st.integers(min_value=-(2**31), max_value=2**31)
durations = st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30))

states = st.sampled_from(State)
cause_kinds = st.sampled_from(CauseKind)
provenances = st.sampled_from(Provenance)
actions = st.sampled_from(Action)
enforcers = st.sampled_from(Enforcer)
levels = st.sampled_from(Level)

causes = st.builds(
    Cause, kind=cause_kinds, provenance=provenances, actor=st.none() | small_text,
    detail=words, note=words, exit_code=st.none() | st.integers(-255, 255),
    at=st.none() | datetimes,
)
app_errors = st.builds(
    AppError, source=st.sampled_from(ErrorSource), message=st.text(max_size=40),
    rank=st.none() | st.integers(0, 4096), local_rank=st.none() | st.integers(0, 16),
    node=words, exit_code=st.none() | st.integers(-255, 255),
    signal=st.none() | st.integers(1, 64), traceback_tail=st.text(max_size=60),
    at=st.none() | datetimes, note=words,
)
node_names = st.lists(st.sampled_from(["n1", "n2", "n3", "n4"]), max_size=3, unique=True).map(
    tuple)
progresses = st.builds(
    Progress, checkpoint=st.none() | st.builds(Checkpoint, step=st.integers(0, 10**9),
                                               written=datetimes),
    note=words)
executions = st.builds(
    Execution, index=st.integers(0, 10), started_at=st.none() | datetimes,
    ended_at=st.none() | datetimes, cause=st.none() | causes, nodes=node_names,
    error=st.none() | app_errors, progress=st.none() | progresses,
)
object_reports = st.builds(
    ObjectReport, ref=small_text, token=st.none() | small_text, state=states, cause=causes,
    executions=st.lists(executions, max_size=3).map(tuple), nodes=node_names,
    lost_since=st.none() | datetimes, gated=st.booleans(),
    unhealthy_units=st.lists(st.builds(UnitHealth, unit=small_text, nodes=node_names,
                                       detail=words), max_size=2).map(tuple),
)
discoveries = st.builds(Discovery, at=datetimes,
                        objects=st.lists(object_reports, max_size=3).map(tuple),
                        complete=st.booleans())
transitions = st.builds(Transition, at=datetimes, state=states, cause=st.none() | causes,
                        seq=st.integers(0, 1000), note=small_text)
escalations = st.builds(Escalation, at=datetimes, message=small_text, cause=st.none() | causes,
                        seq=st.integers(0, 1000))
statuses = st.builds(
    Status, job=small_text, name=small_text, state=states, cause=st.none() | causes,
    level=levels, history=st.lists(transitions, max_size=3).map(tuple),
    escalations=st.lists(escalations, max_size=2).map(tuple),
    supersedes=st.none() | small_text, superseded_by=st.none() | small_text,
    submissions=st.integers(0, 100),
    budget_used=st.dictionaries(small_text, st.integers(0, 100), max_size=3),
    objects=st.lists(small_text, max_size=3).map(tuple), settled=st.booleans(),
    forecast=st.none() | st.builds(Forecast, state=states, cause=st.none() | causes),
    scheduler_seen=st.booleans(), backend=small_text, created_at=st.none() | datetimes,
    error=st.none() | app_errors,
)
rules = st.builds(
    Rule, on=st.lists(cause_kinds, max_size=4).map(tuple), action=actions,
    budget=st.none() | st.integers(-3, 10), enforcer=st.none() | enforcers,
)
policies = st.builds(RecoveryPolicy, rules=st.lists(rules, max_size=4).map(tuple))
declarations = st.builds(
    Declarations, backend=st.sampled_from(["local", "slurm", "kubeflow"]),
    native_actions=st.frozensets(actions), node_loss_window=durations,
)
json_scalars = (st.none() | st.booleans() | st.integers(-(2**40), 2**40)
                | st.floats(allow_nan=False, allow_infinity=False) | small_text)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(small_text, inner, max_size=3), max_leaves=6)
segment_specs = st.builds(SegmentHealthSpec, dir=small_text.map(lambda s: "/" + s),
                          launcher=st.sampled_from(["none", "ft_launcher", "torchrun"]))
job_specs = st.builds(
    JobSpec, name=small_text, command=st.lists(small_text, min_size=1, max_size=3).map(tuple),
    backend=st.sampled_from(["local", "slurm", "kubeflow"]), nodes=st.integers(1, 64),
    time_limit=st.none() | st.integers(1, 10**6), memory=st.none() | st.integers(1, 2**40),
    policy=policies, segment_health=st.none() | segment_specs, workdir=st.none() | small_text,
    env=st.dictionaries(small_text, small_text, max_size=2),
    local=st.dictionaries(small_text, json_values, max_size=2),
    slurm=st.dictionaries(small_text, json_values, max_size=2),
    kubeflow=st.dictionaries(small_text, json_values, max_size=2),
)

MODEL_STRATEGIES: dict[str, st.SearchStrategy[Any]] = {
    "Cause": causes,
    "Execution": executions,
    "ObjectReport": object_reports,
    "Discovery": discoveries,
    "Transition": transitions,
    "Escalation": escalations,
    "Status": statuses,
    "AppError": app_errors,
    "Forecast": st.builds(Forecast, state=states, cause=st.none() | causes),
    "Rule": rules,
    "RecoveryPolicy": policies,
    "Declarations": declarations,
    "SegmentHealthSpec": segment_specs,
    "JobSpec": job_specs,
}

_seq = st.integers(1, 10**6)
_sub = st.integers(1, 20)
_actor = st.none() | small_text

# One strategy per record event type; the test asserts this covers ev.EVENT_TYPES.
EVENT_STRATEGIES: dict[type[Any], st.SearchStrategy[Any]] = {
    ev.JobCreated: st.builds(ev.JobCreated, seq=_seq, at=datetimes, job_id=small_text,
                             spec=job_specs, declarations=declarations,
                             supersedes=st.none() | small_text, actor=_actor),
    ev.SubmissionIntended: st.builds(ev.SubmissionIntended, seq=_seq, at=datetimes,
                                     submission=_sub, token=small_text, gated=st.booleans(),
                                     cause=st.none() | causes),
    ev.SubmissionAttempted: st.builds(ev.SubmissionAttempted, seq=_seq, at=datetimes,
                                      submission=_sub, supervisor=small_text),
    ev.SubmissionBound: st.builds(ev.SubmissionBound, seq=_seq, at=datetimes, submission=_sub,
                                  ref=small_text),
    ev.SubmissionRejected: st.builds(ev.SubmissionRejected, seq=_seq, at=datetimes,
                                     submission=_sub, cause=causes),
    ev.ExecutionEnded: st.builds(ev.ExecutionEnded, seq=_seq, at=datetimes, submission=_sub,
                                 ref=small_text, execution=st.integers(0, 10), cause=causes,
                                 final=st.booleans()),
    ev.ApplicationErrorRecorded: st.builds(ev.ApplicationErrorRecorded, seq=_seq, at=datetimes,
                                           submission=_sub, execution=st.integers(0, 10),
                                           error=app_errors),
    ev.ExecutionStarted: st.builds(ev.ExecutionStarted, seq=_seq, at=datetimes,
                                   submission=_sub, execution=st.integers(0, 10),
                                   started=st.none() | datetimes, nodes=st.integers(1, 64)),
    ev.CheckpointRecorded: st.builds(ev.CheckpointRecorded, seq=_seq, at=datetimes,
                                     submission=_sub, execution=st.integers(0, 10),
                                     step=st.integers(0, 10**9), written=datetimes),
    ev.RecoveryStarted: st.builds(ev.RecoveryStarted, seq=_seq, at=datetimes,
                                  rule=st.integers(0, 5), action=actions, cause=causes,
                                  native=st.booleans()),
    ev.HoldPlaced: st.builds(ev.HoldPlaced, seq=_seq, at=datetimes, cause=causes,
                             recovery=st.booleans(), actor=_actor),
    ev.HoldReleased: st.builds(ev.HoldReleased, seq=_seq, at=datetimes, actor=_actor,
                               resubmit=st.just(True)),
    ev.CancelRequested: st.builds(ev.CancelRequested, seq=_seq, at=datetimes, actor=_actor),
    ev.CancelSent: st.builds(ev.CancelSent, seq=_seq, at=datetimes, ref=small_text),
    ev.GiveUpRequested: st.builds(ev.GiveUpRequested, seq=_seq, at=datetimes, actor=_actor),
    ev.GateOpened: st.builds(ev.GateOpened, seq=_seq, at=datetimes, submission=_sub,
                             ref=small_text),
    ev.StopRequested: st.builds(ev.StopRequested, seq=_seq, at=datetimes, submission=_sub,
                                ref=small_text, cause=causes, by=_actor),
    ev.DuplicateStopped: st.builds(ev.DuplicateStopped, seq=_seq, at=datetimes, ref=small_text,
                                   token=small_text, cause=causes),
    ev.OutcomeCommitted: st.builds(ev.OutcomeCommitted, seq=_seq, at=datetimes, state=states,
                                   cause=causes),
    ev.EscalationRaised: st.builds(ev.EscalationRaised, seq=_seq, at=datetimes,
                                   message=small_text, cause=st.none() | causes),
    ev.Superseded: st.builds(ev.Superseded, seq=_seq, at=datetimes, by=small_text,
                             actor=_actor),
    ev.SegmentPublished: st.builds(ev.SegmentPublished, seq=_seq, at=datetimes,
                                   unit_job_id=small_text, task_id=small_text,
                                   reason=small_text, actor=_actor, nodes=node_names,
                                   path=small_text),
    ev.SegmentCleared: st.builds(ev.SegmentCleared, seq=_seq, at=datetimes,
                                 unit_job_id=small_text, task_id=small_text, reason=small_text,
                                 actor=_actor),
}

any_event = st.one_of(*EVENT_STRATEGIES.values())
# Everything that may follow the first event of a record (a second 'created' is refused).
later_event = st.one_of(*(s for t, s in EVENT_STRATEGIES.items() if t is not ev.JobCreated))


def renumber(events: Sequence[ev.Event], after: int) -> list[ev.Event]:
    """Give ``events`` consecutive seq numbers following ``after``, as a store would."""
    return [msgspec.structs.replace(e, seq=after + i + 1) for i, e in enumerate(events)]
