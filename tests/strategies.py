"""Hypothesis strategies for the record's vocabulary, for any test that needs events.

Every value drawn here survives codec.encode_event -> codec.decode_event unchanged.

- ``causes()``, ``specs()``, ``declarations()``: the parts.
- ``job_created(job_id=..., seq=1)``: a JobCreated.
- ``event_after(seq)``: any event type but JobCreated, at ``seq``.
- ``records(job_id=...)``: a whole record: JobCreated then events with seq 2, 3, ...
- ``records_with_every_type(job_id=...)``: a record with at least one event of each type.
- ``event_types_covered(record)``: which event classes a record holds (for coverage checks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from dispatch.core import events as ev
from dispatch.core.app_error import AppError, ErrorSource
from dispatch.core.model import Cause, CauseKind, Provenance, State
from dispatch.core.policy import Action, Declarations, Enforcer, RecoveryPolicy, Rule
from dispatch.core.spec import JobSpec, SegmentHealthSpec

# Text that is fine in a record: any Unicode the codec round-trips (no lone surrogates).
texts = st.text(max_size=40)
short_ids = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789-_.", min_size=1, max_size=24)
small_ints = st.integers(min_value=0, max_value=10_000)
exit_codes = st.integers(min_value=-255, max_value=255)

timezones = st.sampled_from([UTC, timezone(timedelta(hours=2)), timezone(timedelta(hours=-5))])
times = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=timezones
)


def causes() -> st.SearchStrategy[Cause]:
    return st.builds(
        Cause,
        kind=st.sampled_from(CauseKind),
        provenance=st.sampled_from(Provenance),
        actor=st.none() | short_ids,
        detail=texts,
        exit_code=st.none() | exit_codes,
        at=st.none() | times,
    )


def rules() -> st.SearchStrategy[Rule]:
    return st.builds(
        Rule,
        on=st.lists(st.sampled_from(CauseKind), max_size=3).map(tuple),
        action=st.sampled_from(Action),
        budget=st.none() | st.integers(min_value=0, max_value=10),
        enforcer=st.none() | st.sampled_from(Enforcer),
    )


_json_scalars = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | texts
_json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(short_ids, inner, max_size=3),
    max_leaves=6,
)


def specs() -> st.SearchStrategy[JobSpec]:
    return st.builds(
        JobSpec,
        name=short_ids,
        command=st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=4).map(tuple),
        backend=st.sampled_from(["local", "slurm", "kubeflow"]),
        nodes=st.integers(min_value=1, max_value=64),
        time_limit=st.none() | st.integers(min_value=1, max_value=10**6),
        memory=st.none() | st.integers(min_value=1, max_value=2**40),
        policy=st.builds(RecoveryPolicy, rules=st.lists(rules(), max_size=3).map(tuple)),
        segment_health=st.none() | st.builds(
            SegmentHealthSpec, dir=st.just("/shared/seg"),
            launcher=st.sampled_from(["none", "ft_launcher", "torchrun"]),
        ),
        workdir=st.none() | st.just("/work/dir"),
        env=st.dictionaries(short_ids, texts, max_size=3),
        local=st.dictionaries(short_ids, _json_values, max_size=2),
        slurm=st.dictionaries(short_ids, _json_values, max_size=2),
        kubeflow=st.dictionaries(short_ids, _json_values, max_size=2),
    )


def declarations() -> st.SearchStrategy[Declarations]:
    return st.builds(
        Declarations,
        backend=st.sampled_from(["local", "slurm", "kubeflow"]),
        native_actions=st.frozensets(st.sampled_from(Action)),
        node_loss_window=st.timedeltas(min_value=timedelta(seconds=1),
                                       max_value=timedelta(days=2)),
    )


def job_created(job_id: str | st.SearchStrategy[str] | None = None,
                seq: int = 1) -> st.SearchStrategy[ev.JobCreated]:
    ids = short_ids if job_id is None else (
        job_id if isinstance(job_id, st.SearchStrategy) else st.just(job_id))
    return st.builds(
        ev.JobCreated, seq=st.just(seq), at=times, job_id=ids, spec=specs(),
        declarations=declarations(), supersedes=st.none() | short_ids,
        actor=st.none() | short_ids,
    )


refs = short_ids
submissions = st.integers(min_value=1, max_value=50)
opt_actor = st.none() | short_ids
opt_cause = st.none() | causes()

app_errors = st.builds(
    AppError, source=st.sampled_from(ErrorSource), message=texts,
    rank=st.none() | st.integers(0, 4096), local_rank=st.none() | st.integers(0, 16),
    node=texts, exit_code=st.none() | st.integers(-255, 255),
    signal=st.none() | st.integers(1, 64), traceback_tail=texts,
    at=st.none() | times, note=texts)

# One builder per event type but JobCreated; each takes the seq and gives a strategy.
_BUILDERS: dict[type[Any], Callable[[int], st.SearchStrategy[Any]]] = {
    ev.SubmissionIntended: lambda s: st.builds(
        ev.SubmissionIntended, seq=st.just(s), at=times, submission=submissions,
        token=short_ids, gated=st.booleans(), cause=opt_cause),
    ev.SubmissionAttempted: lambda s: st.builds(
        ev.SubmissionAttempted, seq=st.just(s), at=times, submission=submissions,
        supervisor=texts),
    ev.SubmissionBound: lambda s: st.builds(
        ev.SubmissionBound, seq=st.just(s), at=times, submission=submissions, ref=refs),
    ev.SubmissionRejected: lambda s: st.builds(
        ev.SubmissionRejected, seq=st.just(s), at=times, submission=submissions,
        cause=causes()),
    ev.ExecutionEnded: lambda s: st.builds(
        ev.ExecutionEnded, seq=st.just(s), at=times, submission=submissions, ref=refs,
        execution=small_ints, cause=causes(), final=st.booleans()),
    ev.ApplicationErrorRecorded: lambda s: st.builds(
        ev.ApplicationErrorRecorded, seq=st.just(s), at=times, submission=submissions,
        execution=small_ints, error=app_errors),
    ev.ExecutionStarted: lambda s: st.builds(
        ev.ExecutionStarted, seq=st.just(s), at=times, submission=submissions,
        execution=small_ints, started=st.none() | times, nodes=st.integers(1, 64)),
    ev.CheckpointRecorded: lambda s: st.builds(
        ev.CheckpointRecorded, seq=st.just(s), at=times, submission=submissions,
        execution=small_ints, step=small_ints, written=times),
    ev.RecoveryStarted: lambda s: st.builds(
        ev.RecoveryStarted, seq=st.just(s), at=times, rule=st.integers(0, 10),
        action=st.sampled_from(Action), cause=causes(), native=st.booleans()),
    ev.HoldPlaced: lambda s: st.builds(
        ev.HoldPlaced, seq=st.just(s), at=times, cause=causes(), recovery=st.booleans(),
        actor=opt_actor),
    ev.HoldReleased: lambda s: st.builds(
        ev.HoldReleased, seq=st.just(s), at=times, actor=opt_actor, resubmit=st.just(True)),
    ev.CancelRequested: lambda s: st.builds(
        ev.CancelRequested, seq=st.just(s), at=times, actor=opt_actor),
    ev.CancelSent: lambda s: st.builds(ev.CancelSent, seq=st.just(s), at=times, ref=refs),
    ev.GiveUpRequested: lambda s: st.builds(
        ev.GiveUpRequested, seq=st.just(s), at=times, actor=opt_actor),
    ev.GateOpened: lambda s: st.builds(
        ev.GateOpened, seq=st.just(s), at=times, submission=submissions, ref=refs),
    ev.StopRequested: lambda s: st.builds(
        ev.StopRequested, seq=st.just(s), at=times, submission=submissions, ref=refs,
        cause=causes()),
    ev.DuplicateStopped: lambda s: st.builds(
        ev.DuplicateStopped, seq=st.just(s), at=times, ref=refs, token=short_ids,
        cause=causes()),
    ev.OutcomeCommitted: lambda s: st.builds(
        ev.OutcomeCommitted, seq=st.just(s), at=times, state=st.sampled_from(State),
        cause=causes()),
    ev.EscalationRaised: lambda s: st.builds(
        ev.EscalationRaised, seq=st.just(s), at=times, message=texts, cause=opt_cause),
    ev.Superseded: lambda s: st.builds(
        ev.Superseded, seq=st.just(s), at=times, by=short_ids, actor=opt_actor),
    ev.SegmentPublished: lambda s: st.builds(
        ev.SegmentPublished, seq=st.just(s), at=times, unit_job_id=short_ids,
        task_id=short_ids, reason=texts, actor=opt_actor,
        nodes=st.lists(short_ids, max_size=4).map(tuple), path=texts),
    ev.SegmentCleared: lambda s: st.builds(
        ev.SegmentCleared, seq=st.just(s), at=times, unit_job_id=short_ids,
        task_id=short_ids, reason=texts, actor=opt_actor),
}

APPENDABLE_TYPES: tuple[type[Any], ...] = tuple(_BUILDERS)
if set(APPENDABLE_TYPES) | {ev.JobCreated} != set(ev.EVENT_TYPES):
    raise AssertionError("tests/strategies.py: a new event type needs a strategy")


def event_after(seq: int, types: Sequence[type[Any]] = APPENDABLE_TYPES) -> st.SearchStrategy[Any]:
    """Any appendable event (not JobCreated) at ``seq``."""
    return st.one_of([_BUILDERS[t](seq) for t in types])


def event_of(kind: type[Any], seq: int) -> st.SearchStrategy[Any]:
    return _BUILDERS[kind](seq)


@st.composite
def records(draw: st.DrawFn, job_id: str | st.SearchStrategy[str] | None = None,
            max_events: int = 30) -> list[Any]:
    """A record as a store holds it: JobCreated (seq 1) then events seq 2, 3, ...

    Not a plausible story (fold may reject it): for storage and codec tests.
    """
    created = draw(job_created(job_id))
    n = draw(st.integers(min_value=0, max_value=max_events))
    kinds = draw(st.lists(st.sampled_from(APPENDABLE_TYPES), min_size=n, max_size=n))
    out: list[Any] = [created]
    for i, kind in enumerate(kinds, start=2):
        out.append(draw(_BUILDERS[kind](i)))
    return out


@st.composite
def records_with_every_type(draw: st.DrawFn,
                            job_id: str | st.SearchStrategy[str] | None = None) -> list[Any]:
    """A record holding at least one event of every type, in a drawn order."""
    created = draw(job_created(job_id))
    kinds = list(draw(st.permutations(APPENDABLE_TYPES)))
    kinds += draw(st.lists(st.sampled_from(APPENDABLE_TYPES), max_size=10))
    out: list[Any] = [created]
    for i, kind in enumerate(kinds, start=2):
        out.append(draw(_BUILDERS[kind](i)))
    return out


def event_types_covered(record: Sequence[Any]) -> set[type[Any]]:
    return {type(e) for e in record}
