"""Snapshots (issue 27): a cache beside the events. A snapshot plus the events after it is
the whole fold; one that disagrees with the events (another format, an edited or torn
body, events rewritten under it, a seq the record does not reach) is discarded and rebuilt,
never trusted; and a reader killed while writing one changes nothing anybody reads."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.stores.helpers import ROOT, Backdoor, child_env
from tests.strategies import records

from dispatch.core import events as ev
from dispatch.core.deferred import Deferred
from dispatch.core.events import EscalationRaised, JobCreated, OutcomeCommitted
from dispatch.core.model import Cause, CauseKind, State, token_for
from dispatch.core.policy import Action, Declarations
from dispatch.core.record import RecordError, fold
from dispatch.core.spec import JobSpec
from dispatch.core.status import project
from dispatch.errors import DispatchError, StoreUnusable
from dispatch.stores import snapshot
from dispatch.stores.base import SCHEMA_VERSION, RecordStore
from dispatch.stores.select import open_store
from dispatch.stores.snapshot_sql import Stored
from dispatch.stores.sqlite import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def created(job_id: str) -> JobCreated:
    return JobCreated(seq=1, at=T0, job_id=job_id,
                      spec=JobSpec(name=job_id, command=("true",), backend="local"),
                      declarations=Declarations(backend="local"))


def notes(first: int, n: int) -> list[EscalationRaised]:
    return [EscalationRaised(seq=first + i, at=T0, message=f"note {first + i}")
            for i in range(n)]


def ended(seq: int) -> OutcomeCommitted:
    return OutcomeCommitted(seq=seq, at=T0, state=State.SUCCEEDED,
                            cause=Cause(kind=CauseKind.NONE))


def finished_job(store: RecordStore, job_id: str = "a", n: int = 5) -> None:
    store.create(created(job_id))
    store.append(job_id, [*notes(2, n), ended(n + 2)], 1)


def folded(store: RecordStore, job_id: str = "a"):  # noqa: ANN201
    jobs, errors = snapshot.fold_with_snapshots(store, [job_id], T0)
    assert errors == {}
    return jobs[0]


def test_a_snapshot_is_written_at_the_outcome_and_used(store: RecordStore) -> None:
    finished_job(store)
    assert store.read_snapshots(["a"]) == []
    first = folded(store)
    [s] = store.read_snapshots(["a"])
    assert s.version == 7 and snapshot.decode(s) == first == fold(store.read("a"), T0)
    assert folded(store) == first


def test_every_k_events_a_snapshot_and_the_events_after_it(store: RecordStore) -> None:
    store.create(created("a"))
    store.append("a", notes(2, snapshot.EVERY), 1)
    folded(store)
    [s] = store.read_snapshots(["a"])
    assert s.version == snapshot.EVERY + 1
    store.append("a", notes(s.version + 1, 3), s.version)
    assert folded(store) == fold(store.read("a"), T0)
    assert store.read_snapshots(["a"])[0].version == s.version  # 3 more: not due yet


@pytest.mark.parametrize("damage", ["format", "body", "torn", "events", "ahead", "other"])
def test_a_snapshot_that_disagrees_is_discarded_and_rebuilt(
        store: RecordStore, backdoor: Backdoor, damage: str) -> None:
    finished_job(store)
    finished_job(store, "b")
    truth = fold(store.read("a"), T0)
    folded(store)
    folded(store, "b")
    sql = {
        "format": ("UPDATE snapshots SET format = 99",
                   "UPDATE dispatch_snapshots SET format = 99"),
        "body": ("UPDATE snapshots SET body = replace(body, 'succeeded', 'failed')",
                 "UPDATE dispatch_snapshots SET body = replace(body, 'succeeded', 'failed')"),
        "torn": ("UPDATE snapshots SET body = substr(body, 1, 40)",
                 "UPDATE dispatch_snapshots SET body = substr(body, 1, 40)"),
        "events": ("UPDATE events SET body = replace(body, 'succeeded', 'failed')"
                   " WHERE seq = 7",
                   "UPDATE dispatch_events SET body = replace(body, 'succeeded', 'failed')"
                   " WHERE seq = 7"),
        "ahead": ("UPDATE snapshots SET version = 70",
                  "UPDATE dispatch_snapshots SET version = 70"),
        # another job's snapshot under this job's id, digest and all
        "other": ("UPDATE snapshots SET body = (SELECT body FROM snapshots WHERE job_id = 'b'),"
                  " digest = (SELECT digest FROM snapshots WHERE job_id = 'b')"
                  " WHERE job_id = 'a'",
                  "UPDATE dispatch_snapshots SET body = (SELECT body FROM dispatch_snapshots"
                  " WHERE job_id = 'b'), digest = (SELECT digest FROM dispatch_snapshots"
                  " WHERE job_id = 'b') WHERE job_id = 'a'"),
    }[damage]
    backdoor.execute(*sql)
    if damage == "events":  # an event edited in place: the database dropped the snapshot
        assert store.read_snapshots(["a"]) == []
    else:
        [bad] = [s for s in store.read_snapshots(["a"])]
        assert snapshot.decode(bad) is None  # never trusted
    again = folded(store)
    assert again == fold(store.read("a"), T0)  # the events' word, whatever the snapshot said
    if damage != "events":
        assert again == truth
    if damage == "events":  # edited in place: read whole from now on, no snapshot again
        assert store.read_snapshots(["a"]) == []
        return
    [rebuilt] = store.read_snapshots(["a"])
    assert snapshot.decode(rebuilt) == again  # and a good one written in its place


def swap(backdoor: Backdoor, job_id: str, i: int, j: int) -> None:
    """Exchange the stored bodies of events ``i`` and ``j`` of ``job_id`` in place: the
    same rows, the same seqs, each holding the other's body (issue 32 item 7)."""
    q = ("SELECT seq, body FROM events WHERE job_id = ? AND seq IN (?, ?)",
         "SELECT seq, body FROM dispatch_events WHERE job_id = %s AND seq IN (%s, %s)")
    bodies = dict(backdoor.query(*q, (job_id, i, j)))
    for seq, other in ((i, j), (j, i)):
        backdoor.execute("UPDATE events SET body = ? WHERE job_id = ? AND seq = ?",
                         "UPDATE dispatch_events SET body = %s WHERE job_id = %s AND seq = %s",
                         (bodies[other], job_id, seq))


def refusal(store: RecordStore, job_id: str) -> str:
    """What ``history`` says of the job's record (it reads the record whole)."""
    with pytest.raises(DispatchError) as err:
        fold(store.read(job_id), T0, job_id=job_id)
    return str(err.value)


# The snapshot is at seq 33 (EVERY events past the start) and the record runs on to 36:
# two events under the snapshot, one under it and the one it ends on, one under it and
# one after it, the first and the last, two after it.
SWAPS = {"both-under": (2, 3), "under-and-its-last": (5, 33), "under-and-after": (10, 35),
         "first-and-last": (1, 36), "both-after": (34, 36)}


@pytest.mark.parametrize("where", list(SWAPS))
def test_two_events_swapped_in_place_are_refused_through_the_snapshot(
        store: RecordStore, backdoor: Backdoor, where: str) -> None:
    """S13 through snapshots (issue 32 item 7): whichever two events are swapped, a reader
    through the snapshots refuses the job as ``history`` does, naming it, and the other
    jobs read on."""
    for job_id in ("a", "b"):
        store.create(created(job_id))
        store.append(job_id, notes(2, snapshot.EVERY), 1)
    folded(store)
    folded(store, "b")
    [s] = store.read_snapshots(["a"])
    assert s.version == snapshot.EVERY + 1 == 33
    store.append("a", notes(34, 3), 33)
    assert folded(store).version == 36  # the snapshot and the events after it
    truth_b = folded(store, "b")
    swap(backdoor, "a", *SWAPS[where])
    said = refusal(store, "a")
    assert "job a" in said
    for _ in range(2):  # and again: nothing a refused read wrote makes it readable
        jobs, errors = snapshot.fold_with_snapshots(store, ["a", "b"], T0)
        assert set(errors) == {"a"} and str(errors["a"]) == said
        assert isinstance(errors["a"], StoreUnusable)  # exit 5
        assert jobs == [truth_b]


def test_an_event_deleted_under_the_snapshot_is_refused_through_it(
        store: RecordStore, backdoor: Backdoor) -> None:
    finished_job(store, n=8)
    folded(store)
    backdoor.execute("DELETE FROM events WHERE job_id = 'a' AND seq = 4",
                     "DELETE FROM dispatch_events WHERE job_id = 'a' AND seq = 4")
    said = refusal(store, "a")
    _, errors = snapshot.fold_with_snapshots(store, ["a"], T0)
    assert str(errors["a"]) == said


def test_a_snapshot_written_by_a_reader_that_raced_an_edit_is_not_trusted(
        store: RecordStore, backdoor: Backdoor) -> None:
    """A reader that folded the record before an edit and writes its snapshot after it
    (the edit's trigger had nothing to drop yet): the job's mark keeps it unused."""
    finished_job(store)
    early = fold(store.read("a"), T0)  # read before the edit ...
    swap(backdoor, "a", 2, 3)
    backdoor.execute("UPDATE jobs SET edited = 0", "UPDATE dispatch_jobs SET edited = 0")
    store.write_snapshot(early, snapshot.FORMAT, snapshot.encode)  # ... written after it
    backdoor.execute("UPDATE jobs SET edited = 1", "UPDATE dispatch_jobs SET edited = 1")
    [s] = store.read_snapshots(["a"])
    assert s.edited and snapshot.decode(s) is None
    _, errors = snapshot.fold_with_snapshots(store, ["a"], T0)
    assert str(errors["a"]) == refusal(store, "a")
    store.write_snapshot(early, snapshot.FORMAT, snapshot.encode)
    assert store.read_snapshots(["a"]) == []  # and none is written for a marked job


def test_snapshots_from_before_version_5_are_dropped_by_the_upgrade(
        store_url: str, backdoor: Backdoor) -> None:
    """A record edited in place under a snapshot before this build (no mark, no trigger):
    the upgrade to schema 5 drops every snapshot, and readers refuse the record."""
    with open_store(store_url) as store:
        finished_job(store)
        finished_job(store, "b")
        snapshot.fold_with_snapshots(store, ["a", "b"], T0)
        truth_b = folded(store, "b")
    backdoor.execute(  # back to version 4: no triggers, no mark
        "DROP TRIGGER events_updated",
        "DROP TRIGGER dispatch_events_edited ON dispatch_events")
    backdoor.execute("DROP TRIGGER events_deleted",
                     "DROP TRIGGER dispatch_events_truncated ON dispatch_events")
    backdoor.execute("SELECT 1", "DROP FUNCTION dispatch_events_edited()")
    backdoor.execute("ALTER TABLE jobs DROP COLUMN edited",
                     "ALTER TABLE dispatch_jobs DROP COLUMN edited")
    backdoor.execute("DROP TABLE metric_parts", "DROP TABLE dispatch_metric_parts")  # 7
    backdoor.execute("DROP TABLE removals", "DROP TABLE dispatch_removals")
    backdoor.execute("DROP TRIGGER jobs_removed",
                     "DROP TRIGGER dispatch_jobs_removed ON dispatch_jobs")
    backdoor.execute("SELECT 1", "DROP TRIGGER dispatch_jobs_truncated ON dispatch_jobs")
    backdoor.execute("SELECT 1", "DROP FUNCTION dispatch_jobs_removed()")
    backdoor.execute("DROP TABLE job_causes", "DROP TABLE dispatch_job_causes")  # version 6
    backdoor.execute("DROP TABLE open_attempts", "DROP TABLE dispatch_open_attempts")
    backdoor.execute("DROP TABLE supervisor_presence", "DROP TABLE dispatch_supervisor_presence")
    backdoor.execute("DROP INDEX jobs_by_name_key", "DROP INDEX dispatch_jobs_by_name_key")
    backdoor.execute("ALTER TABLE jobs DROP COLUMN name_key",
                     "ALTER TABLE dispatch_jobs DROP COLUMN name_key")
    backdoor.set_schema_version(4)
    swap(backdoor, "a", 2, 3)
    assert len(backdoor.query("SELECT job_id FROM snapshots",
                              "SELECT job_id FROM dispatch_snapshots")) == 2
    with open_store(store_url) as store:
        assert backdoor.schema_version() == SCHEMA_VERSION == 7
        jobs, errors = snapshot.fold_with_snapshots(store, ["a", "b"], T0)
        assert set(errors) == {"a"} and str(errors["a"]) == refusal(store, "a")
        assert jobs == [truth_b]
        assert [s.job_id for s in store.read_snapshots(["a", "b"])] == ["b"]  # rebuilt


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=records(job_id="a", max_events=20), data=st.data())
def test_any_two_events_swapped_are_refused_by_every_reader(
        tmp_path_factory: pytest.TempPathFactory, record: list, data: st.DataObject) -> None:
    """Property (issue 32 item 7): a snapshot anywhere in a record, any two of its events
    swapped in place: a read through the snapshots refuses it exactly as ``history``."""
    try:
        fold(record, T0)
    except RecordError:
        return
    n = len(record)
    if n < 2:
        return
    i = data.draw(st.integers(min_value=1, max_value=n - 1), label="first")
    j = data.draw(st.integers(min_value=i + 1, max_value=n), label="second")
    # The snapshot anywhere, and as often above both events as anywhere else (the case
    # its digest does not see).
    anywhere = st.integers(min_value=1, max_value=n)
    split = data.draw(st.one_of(st.integers(min_value=j + 1, max_value=n), anywhere)
                      if j < n else anywhere, label="snapshot at")
    path = tmp_path_factory.mktemp("swap") / "r.sqlite3"
    with SQLiteStore(path) as store:
        store.create(record[0])
        if split > 1:
            store.append("a", record[1:split], 1)
        store.write_snapshot(fold(record[:split], T0), snapshot.FORMAT, snapshot.encode)
        if split < n:
            store.append("a", record[split:], split)
        folded(store)  # a reader before the edit: the snapshot is used
        swap(Backdoor(f"sqlite://{path}"), "a", i, j)
        said = refusal(store, "a")
        for _ in range(2):
            _, errors = snapshot.fold_with_snapshots(store, ["a"], T0)
            assert str(errors["a"]) == said


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(record=records(job_id="a", max_events=20), data=st.data())
def test_a_snapshot_plus_the_events_after_it_is_the_whole_fold(
        tmp_path_factory: pytest.TempPathFactory, record: list, data: st.DataObject) -> None:
    split = data.draw(st.integers(min_value=1, max_value=len(record)), label="split")
    try:
        whole = fold(record, T0)
    except RecordError:
        return
    with SQLiteStore(tmp_path_factory.mktemp("snap") / "r.sqlite3") as store:
        store.create(record[0])
        if split > 1:
            store.append("a", record[1:split], 1)
        store.write_snapshot(fold(record[:split], T0), snapshot.FORMAT, snapshot.encode)
        assert store.read_snapshots(["a"])[0].version == split
        if split < len(record):
            store.append("a", record[split:], split)
        job = folded(store)
        assert job == whole
        assert project(job, None, T0) == project(whole, None, T0)


def preempted_three_times(store: RecordStore, job_id: str = "a") -> None:
    """Three submissions, each preempted and resubmitted, the fourth succeeded."""
    store.create(created(job_id))
    events: list[ev.Event] = []
    seq = 2
    for k in range(1, 5):
        ref = f"{job_id}-{k}"
        why = Cause(kind=CauseKind.PREEMPTED if k < 4 else CauseKind.NONE, at=T0)
        events += [
            ev.SubmissionIntended(seq=seq, at=T0, submission=k, token=token_for(job_id, k)),
            ev.SubmissionBound(seq=seq + 1, at=T0, submission=k, ref=ref),
            ev.ExecutionEnded(seq=seq + 2, at=T0, submission=k, ref=ref, execution=0,
                              cause=why),
        ]
        seq += 3
        if k < 4:
            events.append(ev.RecoveryStarted(seq=seq, at=T0, rule=0,
                                             action=Action.RESUBMIT, cause=why))
            seq += 1
    events.append(ev.OutcomeCommitted(seq=seq, at=T0, state=State.SUCCEEDED,
                                      cause=Cause(kind=CauseKind.NONE, at=T0)))
    store.append(job_id, events, 1)


def test_a_list_reads_a_snapshot_without_decoding_its_past(store: RecordStore) -> None:
    """The state, the refs and the counts of a job read through its snapshot come without
    decoding its earlier submissions, history or escalations; using them decodes them,
    and they are the whole fold's."""
    preempted_three_times(store)
    truth = fold(store.read("a"), T0)
    folded(store)  # writes the snapshot (at the outcome)
    job = folded(store)
    assert isinstance(job.submissions, Deferred) and isinstance(job.history, Deferred)
    status = project(job, None, T0)
    assert (status.state, status.submissions, status.objects) == (
        State.SUCCEEDED, 4, ("a-1", "a-2", "a-3", "a-4"))
    assert job.current is not None and job.current.number == 4
    assert not job.submissions.decoded and not job.history.decoded
    assert isinstance(job.escalations, Deferred) and not job.escalations.decoded
    assert status == project(truth, None, T0) and job == truth  # now decoded: the same
    assert job.submissions.decoded and job.history.decoded


@pytest.mark.parametrize("damage", ["count", "not-zlib", "not-the-type", "bomb"])
def test_a_past_that_cannot_be_decoded_is_a_record_error_naming_the_job(
        store: RecordStore, damage: str) -> None:
    """A body whose digest matches but whose past is not what its counts say (a forged
    or miswritten snapshot: a torn one fails its digest first) is never a guess: using
    that past is a RecordError naming the job; what was decoded eagerly still reads."""
    preempted_three_times(store)
    folded(store)
    [s] = store.read_snapshots(["a"])
    doc = msgspec.json.decode(s.body)
    if damage == "count":
        doc["history_count"] += 1
    elif damage == "not-zlib":
        doc["past"] = base64.b64encode(b"not zlib").decode()
    elif damage == "bomb":  # inflates far beyond any JSON of ours: refused, not inflated
        doc["past"] = base64.b64encode(zlib.compress(b"[" + b"1," * 3_000_000 + b"1]")
                                       ).decode()
    else:
        doc["past"] = base64.b64encode(zlib.compress(b'[{"number": "one"}]')).decode()
    body = msgspec.json.encode(doc)
    forged = Stored(job_id="a", version=s.version, format=s.format, body=body,
                    digest=snapshot.digest_of(body, s.event_body or b""),
                    event_body=s.event_body, job_version=s.job_version)
    job = snapshot.decode(forged)
    assert job is not None and job.current is not None and job.current.number == 4
    what = "history" if damage == "count" else "submissions"
    with pytest.raises(RecordError, match=f"job a: its snapshot.*{what}") as err:
        tuple(job.history) if damage == "count" else job.submissions[0]
    assert err.value.job_id == "a"


CHILD = """
import sys
from datetime import UTC, datetime
from dispatch.stores import snapshot
from dispatch.stores.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
ids = sys.argv[2:]
print("ready", flush=True)
while True:  # drop and rewrite the snapshots as fast as it can, until killed
    for job_id in ids:
        store.drop_snapshot(job_id)
    snapshot.fold_with_snapshots(store, ids, datetime.now(UTC))
"""


def test_kill_9_while_snapshots_are_written_changes_nothing_read(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    ids = [f"j{i}" for i in range(8)]
    with SQLiteStore(path) as store:
        for job_id in ids:
            finished_job(store, job_id, n=40)
        truth = {j: fold(store.read(j), T0) for j in ids}
    for round_ in range(5):
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), *ids],
                                 stdout=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        time.sleep(0.05 * (round_ + 1))
        child.send_signal(signal.SIGKILL)
        child.wait()
        with SQLiteStore(path) as store:
            jobs, errors = snapshot.fold_with_snapshots(store, ids, T0)
            assert errors == {} and {j.id: j for j in jobs} == truth
    with SQLiteStore(path) as store:  # a torn snapshot (a body cut short): rebuilt
        store._conn.execute("UPDATE snapshots SET body = substr(body, 1, 17)")
        jobs, _ = snapshot.fold_with_snapshots(store, ids, T0)
        assert {j.id: j for j in jobs} == truth
        assert all(snapshot.decode(s) == truth[s.job_id] for s in store.read_snapshots(ids))
