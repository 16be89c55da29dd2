"""Issue 48 item 2: the causes each job's committed history holds, kept by the stores at
append time (schema version 6), on SQLite and PostgreSQL: a list finds a recovered success
by the cause it recovered from, in SQL, and a store written before version 6 is filled by
its migration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.stores.helpers import Backdoor, build_v1_store

from dispatch.core.events import (
    Event,
    HoldPlaced,
    HoldReleased,
    JobCreated,
    OutcomeCommitted,
    RecoveryStarted,
)
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Action, Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.base import SCHEMA_VERSION, RecordStore
from dispatch.stores.causes import history_causes
from dispatch.stores.query import JobQuery
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def created(job_id: str, i: int = 0) -> JobCreated:
    return JobCreated(seq=1, at=T0 + timedelta(seconds=i), job_id=job_id,
                      spec=JobSpec(name=job_id, command=("true",), backend="local"),
                      declarations=Declarations(backend="local"))


def recovered(seq: int, kind: CauseKind) -> RecoveryStarted:
    return RecoveryStarted(seq=seq, at=T0, rule=0, action=Action.RESUBMIT,
                           cause=Cause(kind=kind))


def outcome(seq: int, state: State, kind: CauseKind) -> OutcomeCommitted:
    return OutcomeCommitted(seq=seq, at=T0, state=state, cause=Cause(kind=kind))


RECORDS: dict[str, list[Event]] = {
    # succeeded after a preemption: its shown cause is none, its history says preempted
    "rec": [created("rec", 0), recovered(2, CauseKind.PREEMPTED),
            outcome(3, State.SUCCEEDED, CauseKind.NONE)],
    "plain": [created("plain", 1), outcome(2, State.SUCCEEDED, CauseKind.NONE)],
    "oom": [created("oom", 2), outcome(2, State.FAILED, CauseKind.OUT_OF_MEMORY)],
    "live": [created("live", 3)],  # unfinished: every cause filter keeps it (its shown
    # cause may not be committed yet; the caller looks)
    "held": [created("held", 4), HoldPlaced(seq=2, at=T0, cause=Cause(kind=CauseKind.NODE_LOST)),
             HoldReleased(seq=3, at=T0), outcome(4, State.CANCELLED, CauseKind.CANCELLED)],
}


def ids(store: RecordStore, kind: CauseKind, **kw: object) -> list[str]:
    return [r.job_id for r in store.query_jobs(JobQuery(cause=kind.value, **kw))]  # type: ignore[arg-type]


def check(store: RecordStore) -> None:
    assert ids(store, CauseKind.PREEMPTED) == ["rec", "live"]
    assert ids(store, CauseKind.PREEMPTED, terminal=True) == ["rec"]
    assert ids(store, CauseKind.NONE, terminal=True) == ["rec", "plain"]
    assert ids(store, CauseKind.OUT_OF_MEMORY, terminal=True) == ["oom"]
    assert ids(store, CauseKind.NODE_LOST, terminal=True) == ["held"]
    assert ids(store, CauseKind.RELEASED, terminal=True) == ["held"]
    assert ids(store, CauseKind.TIME_LIMIT, terminal=True) == []


def test_appends_keep_each_jobs_history_causes(store: RecordStore) -> None:
    for job_id, events in RECORDS.items():
        store.create(events[0])  # type: ignore[arg-type]
        for e in events[1:]:  # one event a batch, as a supervisor appends them
            store.append(job_id, [e], e.seq - 1)
    check(store)


def test_a_store_from_before_version_6_is_filled_by_its_migration(store_url: str) -> None:
    build_v1_store(store_url, RECORDS)
    with open_store(store_url) as store:
        assert Backdoor(store_url).schema_version() == SCHEMA_VERSION == 7
        check(store)


def test_history_causes_are_the_folds_transitions() -> None:
    """What the index keeps is what core/record.py's history shows (after an outcome,
    nothing more)."""
    assert history_causes(RECORDS["rec"][1:]) == ["none", "preempted"]
    assert history_causes(RECORDS["held"][1:]) == ["cancelled", "node-lost", "released"]
    late = [outcome(2, State.FAILED, CauseKind.UNKNOWN), recovered(3, CauseKind.PREEMPTED)]
    assert history_causes(late) == ["unknown"]
