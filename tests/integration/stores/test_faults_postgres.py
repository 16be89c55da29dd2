"""Stores under faults (issue 13), PostgreSQL half, on a real throwaway server: a connection
terminated while idle, while waiting for a lock and while committing; the server restarted
and stopped; the database made read-only; a broken schema. Each is a StoreUnusable naming
the server (password masked), a write that reported failure wrote nothing, and the next
call after recovery works on the same store object."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

import psycopg
import pytest
from tests.conftest_pg import ThrowawayPostgres, start_for_tests
from tests.integration.stores.helpers import build_v1_store

from dispatch.core.events import EscalationRaised, JobCreated, OutcomeCommitted, Superseded
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.errors import StoreUnusable
from dispatch.stores.base import JobNotFound, RecordStore
from dispatch.stores.batch import Append
from dispatch.stores.select import open_store

pytestmark = pytest.mark.postgres
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def created(job_id: str, supersedes: str | None = None) -> JobCreated:
    return JobCreated(seq=1, at=T0, job_id=job_id, supersedes=supersedes,
                      spec=JobSpec(name=job_id, command=("python",), backend="local"),
                      declarations=Declarations(backend="local"))


def esc(seq: int, message: str = "m") -> list[EscalationRaised]:
    return [EscalationRaised(seq=seq, at=T0, message=message)]


def refused(fn: Callable[[], Any], url: str, *words: str) -> StoreUnusable:
    with pytest.raises(StoreUnusable) as info:
        fn()
    err = info.value
    assert not isinstance(err, psycopg.Error) and err.exit_code == 5
    text = str(err)
    for w in (url.split("?")[0].rsplit("/", 1)[0], *words):
        assert w in text, f"{w!r} not in {text!r}"
    return err


def admin(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[Any]:
    with psycopg.connect(url, autocommit=True,
                         options="-c default_transaction_read_only=off") as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def terminate_store_sessions(url: str) -> int:
    rows = admin(url, "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity"
                      " WHERE application_name = 'dispatch' AND datname = current_database()"
                      " AND pid <> pg_backend_pid()")
    return len(rows)


def wait_for(cond: Callable[[], bool], what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def store_waiting_on(url: str, event: str) -> bool:
    return bool(admin(url, "SELECT 1 FROM pg_stat_activity WHERE application_name = 'dispatch'"
                           " AND datname = current_database() AND wait_event = %s", (event,)))


def in_thread(fn: Callable[[], Any]) -> tuple[threading.Thread, list[BaseException | Any]]:
    box: list[BaseException | Any] = []

    def go() -> None:
        try:
            box.append(fn())
        except BaseException as err:  # handed to the test
            box.append(err)

    t = threading.Thread(target=go)
    t.start()
    return t, box


# -- connections lost ------------------------------------------------------------------------


def test_a_terminated_idle_connection_fails_one_call_then_reconnects(postgres_url: str) -> None:
    ops: list[tuple[str, Callable[[RecordStore], Any]]] = [
        ("read", lambda s: s.read("a")), ("read_many", lambda s: s.read_many(["a"])),
        ("version", lambda s: s.version("a")), ("list", lambda s: s.list_jobs()),
        ("find", lambda s: s.matches("a")), ("create", lambda s: s.create(created("b"))),
        ("append", lambda s: s.append("a", esc(2), 1)),
    ]
    with open_store(postgres_url) as s:
        s.create(created("a"))
        for name, op in ops:
            assert terminate_store_sessions(postgres_url) == 1
            refused(partial(op, s), postgres_url, "connection to the server was lost")
            assert s.version("a") == 1, name  # the next call works; nothing was written
        with pytest.raises(JobNotFound):
            s.read("b")
        s.create(created("b"))
        assert s.append("a", esc(2), 1) == 2


def test_a_connection_terminated_while_waiting_for_a_lock_writes_nothing(
    postgres_url: str,
) -> None:
    with open_store(postgres_url) as s:
        s.create(created("a"))
        with psycopg.connect(postgres_url) as blocker:  # holds job a's row lock
            blocker.execute("SELECT 1 FROM dispatch_jobs WHERE job_id = 'a' FOR UPDATE")
            t, box = in_thread(lambda: s.append("a", esc(2, "blocked"), 1))
            wait_for(lambda: store_waiting_on(postgres_url, "transactionid"), "the lock wait")
            terminate_store_sessions(postgres_url)
            t.join(30)
            blocker.rollback()
        assert isinstance(box[0], StoreUnusable), box
        assert "append to job a" in str(box[0]) and postgres_url.split("@")[1] in str(box[0])
        assert [e.seq for e in s.read("a")] == [1]
        assert s.append("a", esc(2, "after"), 1) == 2


SLOW_COMMIT = [
    """CREATE FUNCTION test_slow_commit() RETURNS trigger LANGUAGE plpgsql
       AS $$ BEGIN PERFORM pg_sleep(60); RETURN NULL; END $$""",
    """CREATE CONSTRAINT TRIGGER test_slow_commit AFTER INSERT ON dispatch_events
       DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION test_slow_commit()""",
]


@pytest.mark.parametrize("write", ["create", "append", "create_successor", "append_many"])
def test_a_connection_lost_while_committing_is_checked_and_reported_truly(
    postgres_url: str, write: str,
) -> None:
    """COMMIT was sent, then the server went away: the store reconnects and looks. Here the
    commit never happened (a deferred trigger held it when the backend was terminated)."""
    with open_store(postgres_url) as s:
        s.create(created("old"))
        s.append("old", [OutcomeCommitted(seq=2, at=T0, state=State.FAILED,
                                          cause=Cause(kind=CauseKind.NONE))], 1)
        for stmt in SLOW_COMMIT:
            admin(postgres_url, stmt)
        calls: dict[str, Callable[[], Any]] = {
            "create": lambda: s.create(created("new")),
            "append": lambda: s.append("old", esc(3), 2),
            "create_successor": lambda: s.create_successor(
                created("new", supersedes="old"), Superseded(seq=3, at=T0, by="new"), 2),
            "append_many": lambda: s.append_many([Append("old", esc(3), 2)]),
        }
        t, box = in_thread(calls[write])
        wait_for(lambda: store_waiting_on(postgres_url, "PgSleep"), "the commit to start")
        terminate_store_sessions(postgres_url)
        t.join(30)
        assert isinstance(box[0], StoreUnusable), box
        assert "lost while committing" in str(box[0]) and "nothing was written" in str(box[0])
        admin(postgres_url, "DROP TRIGGER test_slow_commit ON dispatch_events")
        assert s.version("old") == 2
        with pytest.raises(JobNotFound):
            s.read("new")
        calls[write]()  # after recovery the same call goes through
        assert s.version("old") == 3 if write != "create" else s.version("new") == 1


def test_a_commit_that_landed_before_the_connection_was_lost_is_not_a_failure(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The other half: the commit landed, then the connection dropped before its answer was
    read (injected at the driver, as no server fault can be timed that finely)."""
    real = psycopg.Cursor.execute
    armed = [True]

    def execute(self: psycopg.Cursor[Any], query: Any, *a: Any, **k: Any) -> Any:
        out = real(self, query, *a, **k)
        if query == "COMMIT" and armed:
            armed.clear()
            self.connection.close()
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return out

    with open_store(postgres_url) as s:
        monkeypatch.setattr(psycopg.Cursor, "execute", execute)
        s.create(created("a"))  # no error: the store looked and found it written
        assert not armed
        s.create(created("b"))
        armed.append(True)  # a batch of appends, one of them refused: the others landed
        assert s.append_many([Append("a", esc(2), 1), Append("b", esc(3), 1),
                              Append("nope", esc(2), 1)])[0] == 2
        assert not armed
        monkeypatch.undo()
        assert [e.seq for e in s.read("a")] == [1, 2]
        assert [e.seq for e in s.read("b")] == [1]


# -- the server restarted, stopped, read-only --------------------------------------------------


@pytest.fixture(scope="module")
def own_cluster() -> Iterator[ThrowawayPostgres]:
    """A server of our own: these tests restart it and change its settings."""
    cluster = start_for_tests()
    try:
        yield cluster
    finally:
        cluster.stop()


def test_a_restarted_server_fails_one_call_then_the_store_goes_on(
    own_cluster: ThrowawayPostgres,
) -> None:
    url = own_cluster.new_database()
    with open_store(url) as s:
        s.create(created("a"))
        own_cluster.pg_ctl("restart")
        refused(lambda: s.append("a", esc(2), 1), url, "append to job a")
        assert s.version("a") == 1
        assert s.append("a", esc(2), 1) == 2


def test_a_stopped_server_refuses_every_call_and_records_nothing(
    own_cluster: ThrowawayPostgres,
) -> None:
    url = own_cluster.new_database()
    with open_store(url) as s:
        s.create(created("a"))
        own_cluster.pg_ctl("stop")
        try:
            refused(lambda: open_store(url), url, "cannot reach PostgreSQL")
            refused(lambda: s.create(created("b")), url, "create job b")
            refused(lambda: s.create(created("b")), url, "cannot reach PostgreSQL",
                    "create job b: nothing was written")
            refused(lambda: s.read("a"), url, "cannot reach PostgreSQL")
        finally:
            own_cluster.pg_ctl("start")
        assert [r.job_id for r in s.list_jobs()] == ["a"]
        s.create(created("b"))


def test_a_read_only_database_reads_and_refuses_writes(own_cluster: ThrowawayPostgres) -> None:
    url = own_cluster.new_database()
    v1 = own_cluster.new_database()

    def read_only(on: bool) -> None:
        admin(url, f"ALTER SYSTEM SET default_transaction_read_only = {'on' if on else 'off'}")
        admin(url, "SELECT pg_reload_conf()")
        # A session opened before the reload shows when every session has it.
        with psycopg.connect(url, autocommit=True) as probe:
            wait_for(lambda: probe.execute("SHOW default_transaction_read_only").fetchone()
                     == ("on" if on else "off",), "the reload")

    with open_store(url) as s:
        s.create(created("old"))
        s.append("old", [OutcomeCommitted(seq=2, at=T0, state=State.FAILED,
                                          cause=Cause(kind=CauseKind.NONE))], 1)
        read_only(True)
        try:
            for op in (lambda: s.create(created("b")), lambda: s.append("old", esc(3), 2),
                       lambda: s.create_successor(created("b", supersedes="old"),
                                                  Superseded(seq=3, at=T0, by="b"), 2)):
                refused(op, url, "read-only transaction", "the database is read-only")
            assert len(s.read("old")) == 2  # reading goes on
            with open_store(url) as fresh:  # opening a current store needs no write
                assert fresh.version("old") == 2
        finally:
            read_only(False)
        s.create(created("b"))
        assert s.append("old", esc(3), 2) == 3
    # A store that needs a migration cannot be migrated read-only: refused, left at 1.
    build_v1_store(v1, {"a": [created("a")]})
    admin(v1, "ALTER DATABASE " + v1.rsplit("/", 1)[1] + " SET default_transaction_read_only = on")
    refused(lambda: open_store(v1), v1, "cannot set up", "read-only")
    assert admin(v1, "SELECT version FROM dispatch_schema") == [(1,)]


# -- a broken schema ---------------------------------------------------------------------------


SCHEMA_FAULTS = {
    "events table missing": ("DROP TABLE dispatch_events", "table dispatch_events is missing"),
    "jobs table missing": ("DROP TABLE dispatch_jobs CASCADE", "table dispatch_jobs is missing"),
    "schema table missing": ("DROP TABLE dispatch_schema", "no schema table but there are"),
    "schema version negative": ("UPDATE dispatch_schema SET version = -1",
                                "schema version -1 is not a version"),
    "schema version zero": ("UPDATE dispatch_schema SET version = 0", "schema version 0"),
    "schema table empty": ("DELETE FROM dispatch_schema", "holds no version"),
}


@pytest.mark.parametrize("fault", list(SCHEMA_FAULTS))
def test_a_broken_schema_is_refused(postgres_url: str, fault: str) -> None:
    with open_store(postgres_url) as s:
        s.create(created("a"))
    sql, words = SCHEMA_FAULTS[fault]
    admin(postgres_url, sql)
    refused(lambda: open_store(postgres_url), postgres_url, words,
            "not a usable dispatch record store")


def test_a_table_dropped_under_an_open_store_is_a_clear_error(postgres_url: str) -> None:
    with open_store(postgres_url) as s:
        s.create(created("a"))
        admin(postgres_url, "DROP TABLE dispatch_events")
        refused(lambda: s.read("a"), postgres_url, "read job a", "table of the record store")
        refused(lambda: s.append("a", esc(2), 1), postgres_url, "append to job a")
