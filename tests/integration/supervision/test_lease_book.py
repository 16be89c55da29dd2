"""The lease book and fenced appends, on SQLite and on a throwaway PostgreSQL.

A lease is taken only when free (epoch + 1), renewed only by its holder at its epoch while
unexpired, handed back at once by release; two standbys racing for a free lease never both
get it. An append carrying a fence is refused (Fenced, nothing written) unless the fence is
the current, unexpired lease on the job's own scope; an append without one (a person's
request) is not checked. A store of schema 1 is migrated: every job gets its backend's name
as its scope.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from datetime import UTC, datetime

import pytest

from dispatch.core.codec import encode_event
from dispatch.core.events import EscalationRaised, JobCreated
from dispatch.core.policy import Declarations
from dispatch.core.record import fold
from dispatch.core.spec import JobSpec
from dispatch.core.status import project
from dispatch.stores import schema
from dispatch.stores.base import SCHEMA_VERSION, ConflictError, Fence, Fenced, RecordStore
from dispatch.stores.select import open_store
from dispatch.stores.url import parse_store_url

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def created(job_id: str, scope: str | None) -> JobCreated:
    return JobCreated(seq=1, at=T0, job_id=job_id, scope=scope,
                      spec=JobSpec(name=job_id, command=("true",), backend="local"),
                      declarations=Declarations(backend="local"))


def note(seq: int) -> list[EscalationRaised]:
    return [EscalationRaised(seq=seq, at=T0, message=f"note {seq}")]


def test_a_lease_is_taken_only_when_free_and_each_taking_is_a_new_epoch(store_url: str
                                                                         ) -> None:
    with open_store(store_url) as store:
        book = store.leases()
        a = book.acquire("local:x", "A", 30.0)
        assert a is not None and (a.holder, a.epoch, a.state) == ("A", 1, "active")
        assert book.acquire("local:x", "B", 30.0) is None  # held: B stays standby
        assert book.acquire("local:y", "B", 30.0) is not None  # another scope is separate
        renewed = book.renew(a.fence, 30.0)
        assert renewed is not None and renewed.epoch == 1 and renewed.expires_at >= a.expires_at
        assert book.renew(Fence("local:x", "A", 2), 30.0) is None  # not its epoch
        assert book.renew(Fence("local:x", "B", 1), 30.0) is None  # not its holder
        assert book.ticked(a.fence)
        got = book.get("local:x")
        assert got is not None and got.last_tick_at is not None
        # A planned stop hands it back at once: the next acquire takes it, at epoch 2.
        assert book.release(a.fence)
        released = book.get("local:x")
        assert released is not None and released.state == "released"
        b = book.acquire("local:x", "B", 0.3)
        assert b is not None and (b.holder, b.epoch) == ("B", 2)
        assert book.renew(a.fence, 30.0) is None and not book.release(a.fence)
        # Not renewed within its period: it expires and another holder takes it, epoch 3.
        time.sleep(0.6)
        expired = book.get("local:x")
        assert expired is not None and expired.state == "expired"
        assert book.renew(b.fence, 30.0) is None  # too late: B must take it anew
        c = book.acquire("local:x", "C", 30.0)
        assert c is not None and (c.holder, c.epoch) == ("C", 3)
        assert [lease.scope for lease in book.all()] == ["local:x", "local:y"]


def test_two_standbys_racing_for_a_free_lease_never_both_get_it(store_url: str) -> None:
    stores = [open_store(store_url) for _ in range(4)]
    try:
        for rnd in range(25):
            scope = f"local:race{rnd}"
            won: list[str] = []
            go = threading.Barrier(len(stores))

            def take(i: int, store: RecordStore, scope: str = scope,
                     won: list[str] = won, go: threading.Barrier = go) -> None:
                go.wait()
                if store.leases().acquire(scope, f"S{i}", 30.0) is not None:
                    won.append(f"S{i}")
            threads = [threading.Thread(target=take, args=(i, s)) for i, s in enumerate(stores)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(60)
            lease = stores[0].leases().get(scope)
            assert len(won) == 1 and lease is not None, (rnd, won)
            assert (lease.holder, lease.epoch) == (won[0], 1)
    finally:
        for s in stores:
            s.close()


def test_an_append_with_a_stale_fence_is_refused_and_writes_nothing(store_url: str) -> None:
    with open_store(store_url) as store:
        book = store.leases()
        store.create(created("j1", "local:x"))
        store.create(created("j2", "local:other"))
        a = book.acquire("local:x", "A", 30.0)
        assert a is not None
        assert store.append("j1", note(2), 1, fence=a.fence) == 2
        # Another scope's job: the fence does not cover it.
        with pytest.raises(Fenced, match="belongs to scope local:other"):
            store.append("j2", note(2), 1, fence=a.fence)
        # A hands over; B takes the scope: A's epoch is stale.
        assert book.release(a.fence)
        b = book.acquire("local:x", "B", 0.3)
        assert b is not None and b.epoch == 2
        with pytest.raises(Fenced, match="B holds it at epoch 2"):
            store.append("j1", note(3), 2, fence=a.fence)
        assert store.version("j1") == 2 and len(store.read("j1")) == 2
        # Fenced is not a ConflictError: nobody re-reads and retries it.
        assert not issubclass(Fenced, ConflictError)
        assert store.append("j1", note(3), 2, fence=b.fence) == 3
        # B's lease runs out with nobody taking it over: B's own appends stop too.
        time.sleep(0.6)
        with pytest.raises(Fenced, match="expired"):
            store.append("j1", note(4), 3, fence=b.fence)
        # A person's request carries no fence and is not checked.
        assert store.append("j1", note(4), 3) == 4
        assert store.append("j2", note(2), 1) == 2
        with pytest.raises(Fenced, match="nobody holds"):
            store.append("j2", note(3), 2, fence=Fence("local:other", "A", 1))
        assert store.version("j2") == 2


def test_jobs_carry_their_scope_into_the_store_and_status(store_url: str) -> None:
    with open_store(store_url) as store:
        store.create(created("a", "local:x"))
        store.create(created("b", None))  # a record without a scope: the backend's name
        store.create(created("c", "local:x"))
        assert [r.job_id for r in store.list_jobs(scope="local:x")] == ["a", "c"]
        assert [r.job_id for r in store.list_jobs(scope="local")] == ["b"]
        assert {r.job_id: r.scope for r in store.list_jobs()} == {
            "a": "local:x", "b": "local", "c": "local:x"}
        store.append("a", [EscalationRaised(seq=2, at=T0, message="x")], 1)
        job = fold(store.read("a"), T0)
        assert job.scope == "local:x" and project(job, None, T0).scope == "local:x"
        assert fold(store.read("b"), T0).scope == "local"


def _v1_store(url: str) -> None:
    """A store exactly as schema 1 wrote it, holding one job."""
    target = parse_store_url(url)
    body = encode_event(created("old", None))
    row = ("old", "old", "local", T0.isoformat(), 0, 1)
    if target.kind == "sqlite":
        conn = sqlite3.connect(target.target, isolation_level=None)
        for stmt in schema.SQLITE_V1:
            conn.execute(stmt)
        conn.execute("INSERT INTO schema (version) VALUES (1)")
        conn.execute("INSERT INTO jobs (job_id, name, backend, created_at, created_us, version)"
                     " VALUES (?, ?, ?, ?, ?, ?)", row)
        conn.execute("INSERT INTO events (job_id, seq, body) VALUES ('old', 1, ?)", (body,))
        conn.close()
        return
    import psycopg

    with psycopg.connect(target.target, autocommit=True) as c:
        for stmt in schema.PG_V1:
            c.execute(stmt)
        c.execute("INSERT INTO dispatch_schema (version) VALUES (1)")
        c.execute("INSERT INTO dispatch_jobs (job_id, name, backend, created_at, created_us,"
                  " version) VALUES (%s, %s, %s, %s, %s, %s)", row)
        c.execute("INSERT INTO dispatch_events (job_id, seq, body) VALUES ('old', 1, %s)",
                  (body.decode(),))


def test_a_schema_1_store_is_migrated_and_its_jobs_get_their_backend_as_scope(
        store_url: str) -> None:
    _v1_store(store_url)
    assert SCHEMA_VERSION == 7  # 3 added scopes; 4 (issue 27) change marks and snapshots;
    # 5 (issue 32) the mark of a job whose events were edited in place; 6 (issue 48) the
    # causes each job's history holds and the name's natural sort key; 7 (issue 49) the
    # cached /metrics parts and the count of removals
    with open_store(store_url) as store:
        assert [(r.job_id, r.scope) for r in store.list_jobs(scope="local")] == [
            ("old", "local")]
        lease = store.leases().acquire("local", "A", 30.0)
        assert lease is not None
        assert store.append("old", note(2), 1, fence=lease.fence) == 2
    with open_store(store_url) as store:  # opening again migrates nothing twice
        assert store.version("old") == 2
