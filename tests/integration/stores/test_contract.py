"""The record store contract, run on SQLite and on a throwaway PostgreSQL.

Every store must: round-trip every event type; reject a stale writer with ConflictError and
write nothing (threads and processes); leave all or nothing when a writer is killed with
SIGKILL mid-batch; refuse on read a stored event it cannot decode, naming job and seq (S13);
refuse a newer schema; list, resolve and batch-read correctly at 10,000 jobs.
"""

from __future__ import annotations

import os
import random
import signal
import stat
import subprocess
import tempfile
import threading
import time
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.stores.helpers import Backdoor, spawn_child
from tests.strategies import (
    APPENDABLE_TYPES,
    event_types_covered,
    records,
    records_with_every_type,
)

from dispatch.core.codec import DecodeError
from dispatch.core.events import (
    EscalationRaised,
    Event,
    JobCreated,
    OutcomeCommitted,
    Superseded,
)
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.base import (
    SCHEMA_VERSION,
    ConflictError,
    JobExists,
    JobNotFound,
    RecordStore,
    SchemaTooNew,
)
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def created(job_id: str, name: str = "train", at: datetime = T0,
            backend: str = "local") -> JobCreated:
    return JobCreated(
        seq=1, at=at, job_id=job_id,
        spec=JobSpec(name=name, command=("python", "train.py"), backend=backend),
        declarations=Declarations(backend=backend),
    )


def escalations(first_seq: int, n: int, tag: str = "e") -> list[Event]:
    return [EscalationRaised(seq=first_seq + i, at=T0, message=f"{tag} {i}") for i in range(n)]


def outcome(seq: int, state: State = State.SUCCEEDED) -> OutcomeCommitted:
    return OutcomeCommitted(seq=seq, at=T0, state=state, cause=Cause(kind=CauseKind.NONE))


def new_id() -> str:
    return "j-" + uuid.uuid4().hex[:12]


# -- round trip ------------------------------------------------------------------------------

def _round_trip(store: RecordStore, record: list[Event], split: int) -> None:
    # One store serves every example: a fresh job id keeps examples apart.
    job_id = new_id()
    # ... and a fresh superseded id: a job has at most one successor in a store.
    old = getattr(record[0], "supersedes", None)
    first = msgspec.structs.replace(record[0], job_id=job_id,
                                    supersedes=f"old-{job_id}" if old else None)
    assert isinstance(first, JobCreated)
    store.create(first)
    rest = record[1:]
    cut = min(split, len(rest))
    version = 1
    for chunk in (rest[:cut], rest[cut:]):
        if chunk:
            version = store.append(job_id, chunk, version)
    assert version == len(record)
    assert store.version(job_id) == len(record)
    assert store.read(job_id) == [first, *rest]
    assert store.read_many([job_id]) == {job_id: [first, *rest]}
    terminal = any(isinstance(e, OutcomeCommitted) for e in rest)
    assert [r.terminal for r in store.list_jobs() if r.job_id == job_id] == [terminal]


_EXAMPLES = settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture,
                                            HealthCheck.too_slow])


@_EXAMPLES
@given(record=records(max_events=25), split=st.integers(min_value=0, max_value=25))
def test_round_trip_of_random_records(store: RecordStore, record: list[Event],
                                      split: int) -> None:
    _round_trip(store, record, split)


@_EXAMPLES
@given(record=records_with_every_type(), split=st.integers(min_value=0, max_value=30))
def test_round_trip_of_every_event_type(store: RecordStore, record: list[Event],
                                        split: int) -> None:
    assert event_types_covered(record) >= set(APPENDABLE_TYPES)
    _round_trip(store, record, split)


def test_create_twice_is_job_exists_and_writes_nothing(store: RecordStore) -> None:
    store.create(created("a"))
    with pytest.raises(JobExists, match="a"):
        store.create(created("a", name="other"))
    with pytest.raises(JobExists) as info:
        store.create_many([created("b"), created("a")])
    assert info.value.job_ids == ("a",)
    with pytest.raises(JobNotFound):
        store.read("b")
    assert [r.name for r in store.list_jobs()] == ["train"]


def test_unknown_job_is_job_not_found(store: RecordStore) -> None:
    with pytest.raises(JobNotFound, match="nope"):
        store.read("nope")
    with pytest.raises(JobNotFound):
        store.version("nope")
    with pytest.raises(JobNotFound):
        store.append("nope", escalations(2, 1), 1)
    store.create(created("a"))
    with pytest.raises(JobNotFound) as info:
        store.read_many(["a", "nope", "gone"])
    assert info.value.job_ids == ("nope", "gone")


def test_append_refuses_a_batch_that_does_not_follow_on(store: RecordStore) -> None:
    store.create(created("a"))
    with pytest.raises(ValueError, match="seq 3, expected 2"):
        store.append("a", escalations(3, 1), 1)
    with pytest.raises(ValueError, match="expected 3"):
        store.append("a", [*escalations(2, 1), *escalations(4, 1)], 1)
    with pytest.raises(ValueError, match="empty"):
        store.append("a", [], 1)
    with pytest.raises(ValueError, match="create"):
        store.append("a", [msgspec.structs.replace(created("a"), seq=2)], 1)
    assert store.version("a") == 1


def test_stale_version_is_conflict_and_writes_nothing(store: RecordStore) -> None:
    store.create(created("a"))
    assert store.append("a", escalations(2, 3, "first"), 1) == 4
    with pytest.raises(ConflictError) as info:
        store.append("a", escalations(2, 5, "stale"), 1)
    assert info.value.actual == 4 and info.value.expected == 1
    with pytest.raises(ConflictError):  # ahead of the record: also stale
        store.append("a", escalations(9, 1), 8)
    assert store.version("a") == 4
    assert [getattr(e, "message", None) for e in store.read("a")[1:]] == [
        "first 0", "first 1", "first 2"]


def test_outcome_marks_the_job_terminal(store: RecordStore) -> None:
    store.create(created("a"))
    store.create(created("b", at=T0 + timedelta(seconds=1)))
    store.append("a", [*escalations(2, 1), outcome(3, State.FAILED)], 1)
    rows = {r.job_id: r for r in store.list_jobs()}
    assert rows["a"].terminal and rows["a"].version == 3
    assert not rows["b"].terminal and rows["b"].version == 1
    assert [r.job_id for r in store.list_jobs(live_only=True)] == ["b"]


# -- concurrent writers -----------------------------------------------------------------------


def test_two_threads_racing_one_wins_one_conflicts(store_url: str) -> None:
    with open_store(store_url) as s:
        s.create(created("race"))
    stores = [open_store(store_url), open_store(store_url)]
    try:
        for round_ in range(10):
            barrier = threading.Barrier(2)
            results: list[str] = ["", ""]

            def write(i: int, r: int = round_, b: threading.Barrier = barrier,
                      results: list[str] = results) -> None:
                b.wait()
                try:
                    stores[i].append("race", escalations(2 + r, 1, f"t{i}"), 1 + r)
                    results[i] = "won"
                except ConflictError:
                    results[i] = "conflict"

            threads = [threading.Thread(target=write, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(results) == ["conflict", "won"], round_
            winner = results.index("won")
            last = stores[0].read("race")[-1]
            assert isinstance(last, EscalationRaised) and last.message == f"t{winner} 0"
        assert stores[1].version("race") == 11
    finally:
        for s in stores:
            s.close()


def _check_interleaved(events: list[Event], writers: list[str], count: int, size: int) -> None:
    """Every writer's batches are all there, once each, each batch contiguous."""
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    body = [e for e in events[1:] if isinstance(e, EscalationRaised)]
    assert len(body) == len(writers) * count * size
    for start in range(0, len(body), size):
        chunk = [e.message for e in body[start:start + size]]
        tag_batch = chunk[0].rsplit(" ", 1)[0]
        assert chunk == [f"{tag_batch} {i}" for i in range(size)], chunk
    per_writer = Counter(m.message.split(" ")[0] for m in body[::size])
    assert per_writer == {w: count for w in writers}


def test_threads_retrying_on_conflict_lose_no_batch(store_url: str) -> None:
    with open_store(store_url) as s:
        s.create(created("busy"))
    writers, count, size = ["w0", "w1", "w2", "w3"], 15, 3
    conflicts = Counter[str]()

    def loop(tag: str) -> None:
        with open_store(store_url) as mine:
            done = 0
            while done < count:
                v = mine.version("busy")
                try:
                    mine.append("busy", escalations(v + 1, size, f"{tag} {done}"), v)
                    done += 1
                except ConflictError:
                    conflicts[tag] += 1

    threads = [threading.Thread(target=loop, args=(w,)) for w in writers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open_store(store_url) as s:
        _check_interleaved(s.read("busy"), writers, count, size)


def test_one_store_shared_by_threads_is_safe(store: RecordStore) -> None:
    """One store object used from several threads (e.g. a CLI's watcher and its tick)."""
    store.create(created("shared"))
    errors: list[BaseException] = []

    def loop(tag: str) -> None:
        try:
            done = 0
            while done < 20:
                v = store.version("shared")
                try:
                    store.append("shared", escalations(v + 1, 2, f"{tag} {done}"), v)
                    done += 1
                except ConflictError:
                    pass
                store.read_many(["shared"])
        except BaseException as err:  # surfaced below
            errors.append(err)

    threads = [threading.Thread(target=loop, args=(f"w{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    _check_interleaved(store.read("shared"), ["w0", "w1", "w2"], 20, 2)


def test_two_processes_racing_one_wins_one_conflicts(store_url: str, tmp_path: Path) -> None:
    with open_store(store_url) as s:
        s.create(created("race"))
    rounds = 8
    godir = tmp_path / "go"
    godir.mkdir()
    children = [spawn_child("race", store_url, "race", str(rounds), str(godir), f"p{i}")
                for i in range(2)]
    try:
        for r in range(rounds):
            (godir / f"go.{r}").touch()
            lines = [c.stdout.readline().split() for c in children]  # type: ignore[union-attr]
            assert sorted(w[0] for w in lines if w) == ["conflict", "won"], (r, lines)
            assert all(int(w[1]) == r for w in lines)
        for c in children:
            assert c.wait(timeout=60) == 0, c.stderr.read()  # type: ignore[union-attr]
    finally:
        for c in children:
            if c.poll() is None:
                c.kill()
                c.wait()
    with open_store(store_url) as s:
        events = s.read("race")
    assert [e.seq for e in events] == list(range(1, rounds + 2))
    assert all(isinstance(e, EscalationRaised) and e.message.endswith(f"round {r} 0")
               for r, e in enumerate(events[1:]))


def test_processes_retrying_on_conflict_lose_no_batch(store_url: str, tmp_path: Path) -> None:
    with open_store(store_url) as s:
        s.create(created("busy"))
    writers, count, size = ["p0", "p1", "p2"], 30, 4
    children = [spawn_child("loop", store_url, "busy", w, str(count), str(size), str(tmp_path))
                for w in writers]
    for c in children:  # all started and connected: let them go at once
        assert c.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
    (tmp_path / "go").touch()
    for c in children:
        out, err = c.communicate(timeout=300)
        assert c.returncode == 0, err
        assert out.startswith("conflicts ")
    with open_store(store_url) as s:
        _check_interleaved(s.read("busy"), writers, count, size)


# -- kill -9 mid-batch ----------------------------------------------------------------------


def _kill(child: subprocess.Popen[str]) -> None:
    if child.poll() is None:
        os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=30)


def test_writer_killed_inside_its_transaction_leaves_nothing(store_url: str) -> None:
    with open_store(store_url) as s:
        s.create(created("k"))
        s.append("k", escalations(2, 2), 1)
    child = spawn_child("stall", store_url, "k", "3", "2000")
    try:
        line = child.stdout.readline().strip()  # type: ignore[union-attr]
        assert line == "appending", child.stderr.read()  # type: ignore[union-attr]
        line = child.stdout.readline().strip()  # type: ignore[union-attr]
        assert line == "inside", f"the batch was not consumed inside the transaction: {line}"
    finally:
        _kill(child)
    with open_store(store_url) as s:
        assert s.version("k") == 3
        assert len(s.read("k")) == 3
        # The dead writer's locks are gone: the next writer goes straight on.
        assert s.append("k", escalations(4, 1, "after"), 3) == 4


def test_writer_killed_at_random_points_leaves_all_or_nothing(store_url: str) -> None:
    n, trials = 3000, 8
    rng = random.Random(int.from_bytes(os.urandom(4), "big"))
    with open_store(store_url) as s:
        s.create(created("k"))
    # How long one batch takes here, to spread the kill points over it.
    probe = spawn_child("batch", store_url, "k", "1", str(n))
    out, err = probe.communicate(timeout=300)
    assert probe.returncode == 0, err
    duration = float(out.split()[-1])
    outcomes = Counter[str]()
    version = 1 + n
    for trial in range(trials):
        child = spawn_child("batch", store_url, "k", str(version), str(n))
        try:
            assert child.stdout.readline().strip() == "appending"  # type: ignore[union-attr]
            time.sleep(rng.uniform(0, duration * 1.2))
        finally:
            _kill(child)
        with open_store(store_url) as s:
            now = s.version("k")
            events = s.read("k")
        assert now in (version, version + n), (trial, version, now)
        assert [e.seq for e in events] == list(range(1, now + 1))
        outcomes["all" if now > version else "nothing"] += 1
        version = now
    assert sum(outcomes.values()) == trials


# -- refusing what it does not understand (S13) ---------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{"type":"teleported","seq":2,"at":"2026-01-01T00:00:00Z"}', "$.type"),
        ('{"type":"outcome-committed","seq":2,"at":"2026-01-01T00:00:00Z",'
         '"state":"exploded","cause":{"kind":"none"}}', "$.state"),
        ('{"type":"outcome-committed","seq":2,"at":"2026-01-01T00:00:00Z",'
         '"state":"failed","cause":{"kind":"vaporized"}}', "$.cause.kind"),
        ('{"type":"escalation-raised","seq":2,"at":"2026-01-01T00:00:00Z",'
         '"message":"m","colour":"red"}', "colour"),
        ('{"type":"escalation-raised","seq":7,"at":"2026-01-01T00:00:00Z","message":"m"}',
         "$.seq"),
        ("not json at all", ""),
    ],
)
def test_undecodable_stored_event_is_refused_naming_job_and_seq(
    store: RecordStore, backdoor: Backdoor, body: str, field: str
) -> None:
    store.create(created("old"))
    store.create(created("newer-build", at=T0 + timedelta(seconds=1)))
    backdoor.insert_event("newer-build", 2, body)
    for attempt in (lambda: store.read("newer-build"),
                    lambda: store.read_many(["old", "newer-build"])):
        with pytest.raises(DecodeError) as info:
            attempt()
        assert info.value.job_id == "newer-build" and info.value.seq == 2
        assert "job newer-build" in str(info.value) and "seq 2" in str(info.value)
        assert f"stored in {store.describe()}" in str(info.value)
        assert field in str(info.value)
    assert len(store.read("old")) == 1  # the other job is still readable


def test_newer_schema_is_refused(store_url: str, backdoor: Backdoor) -> None:
    with open_store(store_url) as s:
        s.create(created("a"))
    backdoor.set_schema_version(SCHEMA_VERSION + 1)
    with pytest.raises(SchemaTooNew) as info:
        open_store(store_url)
    assert info.value.found == SCHEMA_VERSION + 1
    assert f"schema version {SCHEMA_VERSION + 1} is newer" in str(info.value)
    backdoor.set_schema_version(SCHEMA_VERSION)
    with open_store(store_url) as s:  # nothing was changed by the refusal
        assert len(s.read("a")) == 1


# -- listing, resolving, batched reads at scale ----------------------------------------------


def test_matches_by_id_name_chain_tip_and_prefix(store: RecordStore) -> None:
    store.create_many([
        created("j1", name="solo"),
        created("j2", name="twin", at=T0 + timedelta(seconds=1)),
        created("j3", name="twin", at=T0 + timedelta(seconds=2)),
        created("j4", name="j1", at=T0 + timedelta(seconds=3)),  # a name equal to an id
        created("abcd0001", name="x", at=T0 + timedelta(seconds=4)),
        created("abcd0002", name="y", at=T0 + timedelta(seconds=5)),
    ])

    def found(ref: str) -> list[tuple[str, str]]:
        return [(m.job_id, m.how) for m in store.matches(ref)]

    assert found("j2") == [("j2", "id")]
    assert found("solo") == [("j1", "name")]
    assert found("j1") == [("j1", "id"), ("j4", "name")]  # the service prefers the id
    assert found("twin") == [("j2", "name"), ("j3", "name")]
    assert found("abcd") == [("abcd0001", "prefix"), ("abcd0002", "prefix")]
    assert found("abcd0002") == [("abcd0002", "id")]
    assert found("abc") == []  # a prefix needs 4 characters
    assert found("nobody") == []
    # A superseded job is no longer what its name means: its successor is.
    version = store.version("j2")
    successor = msgspec.structs.replace(
        created("j5", name="twin", at=T0 + timedelta(seconds=6)), supersedes="j2")
    store.create_successor(successor,
                           Superseded(seq=version + 1, at=T0, by="j5"), version)
    assert found("twin") == [("j3", "name"), ("j5", "name")]
    assert [m.job_id for m in store.matches("twin", limit=1)] == ["j3"]


def test_listing_and_read_many_at_10000_jobs(store: RecordStore) -> None:
    n = 10_000
    rng = random.Random(7)
    order = list(range(n))
    rng.shuffle(order)  # created in one order, listed by created_at
    jobs = [created(f"job-{i:05d}", name=f"name-{i % 1000}", at=T0 + timedelta(seconds=i),
                    backend=("local", "slurm", "kubeflow")[i % 3]) for i in order]
    for start in range(0, n, 2500):
        store.create_many(jobs[start:start + 2500])
    ended = set(range(0, n, 50))
    for i in sorted(ended):
        store.append(f"job-{i:05d}", [*escalations(2, 1), outcome(3)], 1)

    rows = store.list_jobs()
    assert [r.job_id for r in rows] == [f"job-{i:05d}" for i in range(n)]
    assert all(r.created_at == T0 + timedelta(seconds=i) for i, r in enumerate(rows))
    assert all(r.backend == ("local", "slurm", "kubeflow")[i % 3] for i, r in enumerate(rows))
    assert {r.job_id for r in rows if r.terminal} == {f"job-{i:05d}" for i in ended}
    assert all(r.version == (3 if i in ended else 1) for i, r in enumerate(rows))

    live = store.list_jobs(live_only=True)
    assert [r.job_id for r in live] == [f"job-{i:05d}" for i in range(n) if i not in ended]
    named = store.list_jobs(name="name-7")
    assert [r.job_id for r in named] == [f"job-{i:05d}" for i in range(7, n, 1000)]
    assert [r.job_id for r in store.list_jobs(name="name-0", live_only=True)] == []

    ids = [r.job_id for r in rows]
    records = store.read_many(ids)
    assert list(records) == ids
    by_id = {e.job_id: e for e in jobs}
    for i, job_id in enumerate(ids):
        rec = records[job_id]
        assert rec[0] == by_id[job_id]
        assert len(rec) == (3 if i in ended else 1)
    assert records["job-00050"][-1] == outcome(3)


# -- the SQLite file itself -------------------------------------------------------------------


def test_sqlite_file_is_private_wal_and_fully_synced(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "state" / "dispatch" / "record.sqlite3"
    # The default location: the only one whose missing directory is created (0700).
    with open_store(None, env={"XDG_STATE_HOME": str(tmp_path / "state"),
                               "HOME": "/nonexistent"}) as s:
        s.create(created("a"))
        s.append("a", escalations(2, 1), 1)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
        wal = path.with_name(path.name + "-wal")
        assert wal.exists() and stat.S_IMODE(wal.stat().st_mode) == 0o600
        conn = s._conn  # type: ignore[attr-defined]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("PRAGMA synchronous").fetchone()[0] == 2  # FULL
        assert conn.execute("PRAGMA busy_timeout").fetchone()[0] > 0
    raw = sqlite3.connect(path)
    assert raw.execute("SELECT version FROM schema").fetchall() == [(SCHEMA_VERSION,)]
    raw.close()


def test_sqlite_file_that_is_not_a_database_is_a_clear_error(tmp_path: Path) -> None:
    from dispatch.stores.base import StoreError

    path = tmp_path / "junk.sqlite3"
    path.write_bytes(b"this is not a database, it is a text file" * 100)
    with pytest.raises(StoreError, match=str(path)):
        open_store(str(path))


def test_sqlite_default_location_under_xdg_state_home() -> None:
    with tempfile.TemporaryDirectory() as d:
        env = {"XDG_STATE_HOME": d, "HOME": "/nonexistent"}
        with open_store(None, env=env) as s:
            s.create(created("a"))
        path = Path(d) / "dispatch" / "record.sqlite3"
        assert path.exists()
        assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700


# -- PostgreSQL only --------------------------------------------------------------------------


@pytest.mark.postgres
def test_postgres_store_reconnects_after_the_server_dropped_it(postgres_url: str) -> None:
    import psycopg

    from dispatch.stores.base import StoreError

    with open_store(postgres_url) as s:
        s.create(created("a"))
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                          " WHERE application_name = 'dispatch' AND pid <> pg_backend_pid()")
        with pytest.raises(StoreError, match="postgresql://"):
            s.append("a", escalations(2, 1), 1)
        # The next call reconnects; the failed append wrote nothing.
        assert s.version("a") == 1
        assert s.append("a", escalations(2, 1), 1) == 2
