"""Issue 49: ``append_many``, several jobs' appends in one transaction (a supervision tick's
decisions: one commit, not one per job), on SQLite and on a throwaway PostgreSQL.

Each job's append is checked on its own: a stale expected version, a missing job or a batch
whose seqs do not follow on refuses that job's append only (nothing of it written) and
keeps the others'. A stale fence, or the same job twice, writes nothing at all.
"""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime

import pytest
from tests.integration.stores.helpers import Backdoor

from dispatch.core.events import EscalationRaised, JobCreated, OutcomeCommitted
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.base import ConflictError, Fenced, JobNotFound, RecordStore
from dispatch.stores.batch import Append
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def created(job_id: str, scope: str = "local:x") -> JobCreated:
    return JobCreated(seq=1, at=T0, job_id=job_id, scope=scope,
                      spec=JobSpec(name=job_id, command=("true",), backend="local"),
                      declarations=Declarations(backend="local"))


def note(seq: int, text: str = "note") -> list[EscalationRaised]:
    return [EscalationRaised(seq=seq, at=T0, message=f"{text} {seq}")]


def ended(seq: int) -> OutcomeCommitted:
    return OutcomeCommitted(seq=seq, at=T0, state=State.SUCCEEDED,
                            cause=Cause(kind=CauseKind.NONE))


def messages(store: RecordStore, job_id: str) -> list[str]:
    return [e.message if isinstance(e, EscalationRaised) else type(e).__name__
            for e in store.read(job_id)]


def test_one_jobs_conflict_keeps_the_others_appends(store: RecordStore) -> None:
    for j in ("a", "b", "c"):
        store.create(created(j))
    store.append("b", note(2, "other writer"), 1)  # b moved on: the batch's b is stale
    got = store.append_many([Append("c", [ended(2)], 1), Append("b", note(2), 1),
                             Append("a", note(2), 1)])
    assert got[0] == 2 and got[2] == 2
    assert isinstance(got[1], ConflictError) and got[1].job_id == "b"
    assert messages(store, "a") == ["JobCreated", "note 2"]
    assert messages(store, "b") == ["JobCreated", "other writer 2"]  # nothing of the batch's
    assert messages(store, "c") == ["JobCreated", "OutcomeCommitted"]
    # the store's columns follow each job's own append (c finished, a and b not)
    assert {r.job_id: (r.version, r.terminal) for r in store.list_jobs()} == {
        "a": (2, False), "b": (2, False), "c": (2, True)}
    assert [r.job_id for r in store.list_jobs(live_only=True)] == ["a", "b"]
    changes, _ = store.changes(None)
    assert {c.job_id: c.version for c in changes} == {"a": 2, "b": 2}


def test_a_missing_job_or_a_bad_batch_refuses_that_job_only(store: RecordStore) -> None:
    for j in ("a", "c"):
        store.create(created(j))
    got = store.append_many([Append("a", note(2), 1), Append("nope", note(2), 1),
                             Append("c", note(3), 1)])  # c's seqs do not follow on
    assert got[0] == 2
    assert isinstance(got[1], JobNotFound)
    assert isinstance(got[2], ValueError) and "expected 2" in str(got[2])
    assert messages(store, "a") == ["JobCreated", "note 2"]
    assert messages(store, "c") == ["JobCreated"]
    assert store.append_many([]) == []


def test_a_damaged_record_keeps_no_other_job_out(store: RecordStore,
                                                 backdoor: Backdoor) -> None:
    """b's events run past its version (a damaged store): its rows are refused by the
    events' key, after its version check passed. That refuses b's append alone (a
    conflict, nothing of it written); a's and c's are written in the same transaction."""
    for j in ("a", "b", "c"):
        store.create(created(j))
    body = '{"type":"escalation-raised","seq":2,"at":"2026-01-01T00:00:00+00:00",' \
           '"message":"planted"}'
    backdoor.execute("INSERT INTO events (job_id, seq, body) VALUES ('b', 2, ?)",
                     "INSERT INTO dispatch_events (job_id, seq, body) VALUES ('b', 2, %s)",
                     (body,))
    got = store.append_many([Append("a", note(2), 1), Append("b", note(2), 1),
                             Append("c", [ended(2)], 1)])
    assert got[0] == 2 and got[2] == 2, got
    assert isinstance(got[1], ConflictError), got
    assert messages(store, "a") == ["JobCreated", "note 2"]
    assert messages(store, "c") == ["JobCreated", "OutcomeCommitted"]
    assert backdoor.query("SELECT version FROM jobs WHERE job_id = 'b'",
                          "SELECT version FROM dispatch_jobs WHERE job_id = 'b'") == [(1,)]


def test_the_same_job_twice_writes_nothing(store: RecordStore) -> None:
    store.create(created("a"))
    with pytest.raises(ValueError, match="the same job appears twice"):
        store.append_many([Append("a", note(2), 1), Append("a", note(3), 2)])
    assert store.version("a") == 1


def test_a_stale_fence_or_another_scopes_job_writes_nothing(store: RecordStore) -> None:
    store.create(created("a"))
    store.create(created("b"))
    store.create(created("o", scope="local:other"))
    book = store.leases()
    lease = book.acquire("local:x", "A", 30.0)
    assert lease is not None
    assert store.append_many([Append("a", note(2), 1), Append("b", note(2), 1)],
                             fence=lease.fence) == [2, 2]
    with pytest.raises(Fenced, match="belongs to scope local:other"):
        store.append_many([Append("a", note(3), 2), Append("o", note(2), 1)],
                          fence=lease.fence)
    assert book.release(lease.fence)
    with pytest.raises(Fenced):
        store.append_many([Append("a", note(3), 2), Append("b", note(3), 2)],
                          fence=lease.fence)
    assert [store.version(j) for j in ("a", "b", "o")] == [2, 2, 1]


def test_a_batch_of_jobs_is_one_commit_sqlite(tmp_path: object) -> None:
    """The point of it: N jobs' appends cost one COMMIT (one fsync of the WAL), not N."""
    url = f"sqlite://{tmp_path}/r.sqlite3"
    with open_store(url) as store:
        store.create_many([created(f"j{i}") for i in range(20)])
        conn: sqlite3.Connection = store._conn  # type: ignore[attr-defined]
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        got = store.append_many([Append(f"j{i}", note(2), 1) for i in range(20)])
        conn.set_trace_callback(None)
        assert got == [2] * 20
        assert [s for s in statements if s.strip().upper() == "COMMIT"] == ["COMMIT"]
        assert all(store.version(f"j{i}") == 2 for i in range(20))
