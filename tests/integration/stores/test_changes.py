"""changes / read_after on both stores (issue 27), and LiveFolds, the supervisor's folded
live jobs: a look reports what was written since the last one and never misses a commit;
the events after a version are that record's tail, checked; an old store migrates on open."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import msgspec
import pytest
from tests.integration.stores.helpers import Backdoor, build_v1_store

from dispatch.core.events import EscalationRaised, JobCreated, OutcomeCommitted
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.record import fold
from dispatch.core.spec import JobSpec
from dispatch.stores.base import SCHEMA_VERSION, JobNotFound, RecordDamaged, RecordStore
from dispatch.stores.live import LiveFolds
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def created(job_id: str, scope: str = "") -> JobCreated:
    return JobCreated(seq=1, at=T0, job_id=job_id, scope=scope,
                      spec=JobSpec(name=job_id, command=("true",), backend="local"),
                      declarations=Declarations(backend="local"))


def note(seq: int, text: str = "x") -> EscalationRaised:
    return EscalationRaised(seq=seq, at=T0, message=text)


def ended(seq: int) -> OutcomeCommitted:
    return OutcomeCommitted(seq=seq, at=T0, state=State.SUCCEEDED,
                            cause=Cause(kind=CauseKind.NONE))


def test_a_look_reports_what_changed_since_the_last(store: RecordStore) -> None:
    store.create_many([created("a"), created("b"), created("c", scope="other")])
    first, mark = store.changes(None)
    assert [(c.job_id, c.version, c.terminal) for c in first] == [
        ("a", 1, False), ("b", 1, False), ("c", 1, False)]
    again, mark2 = store.changes(mark)
    assert again == []  # nothing written since: nothing to read
    store.append("b", [note(2)], 1)
    store.append("a", [ended(2)], 1)
    changed, mark3 = store.changes(mark2)
    assert {(c.job_id, c.version, c.terminal) for c in changed} == {
        ("b", 2, False), ("a", 2, True)}
    assert store.changes(mark3)[0] == []
    store.create(created("d"))
    assert [c.job_id for c in store.changes(mark3)[0]] == ["d"]
    assert [c.job_id for c in store.changes(None, scope="other")[0]] == ["c"]
    assert [c.job_id for c in store.changes(None)[0]] == ["b", "c", "d"]  # live only


def test_no_commit_is_missed_by_looks_between_concurrent_writers(
        store: RecordStore, store_url: str) -> None:
    ids = [f"j{i}" for i in range(6)]
    store.create_many([created(i) for i in ids])
    _, mark = store.changes(None)
    seen: dict[str, int] = {}
    stop = threading.Event()

    def write(job_id: str) -> None:
        with open_store(store_url) as s:
            for seq in range(2, 12):
                s.append(job_id, [note(seq)], seq - 1)

    writers = [threading.Thread(target=write, args=(i,)) for i in ids]
    for w in writers:
        w.start()
    while not stop.is_set():
        done = not any(w.is_alive() for w in writers)
        changed, mark = store.changes(mark)
        for c in changed:
            seen[c.job_id] = max(seen.get(c.job_id, 0), c.version)
        if done:
            stop.set()
    for w in writers:
        w.join()
    changed, mark = store.changes(mark)
    for c in changed:
        seen[c.job_id] = max(seen.get(c.job_id, 0), c.version)
    assert seen == {i: 11 for i in ids}


def test_read_after_is_the_record_s_tail_checked(store: RecordStore) -> None:
    store.create_many([created("a"), created("b")])
    store.append("a", [note(2), note(3, "y"), ended(4)], 1)
    whole = store.read("a")
    tails = store.read_after({"a": 2, "b": 1})
    assert tails == {"a": whole[2:], "b": []}
    assert store.read_after({"a": 0}) == {"a": whole}
    with pytest.raises(RecordDamaged, match="behind seq 9"):
        store.read_after({"a": 9})
    with pytest.raises(JobNotFound, match="nope"):
        store.read_after({"a": 1, "nope": 0})
    assert store.read_after({}) == {}


def test_read_after_refuses_a_gap(store: RecordStore, backdoor: Backdoor) -> None:
    store.create(created("a"))
    store.append("a", [note(2), note(3)], 1)
    backdoor.execute("DELETE FROM events WHERE seq = 2",
                     "DELETE FROM dispatch_events WHERE seq = 2")
    with pytest.raises(RecordDamaged, match="after seq 1"):
        store.read_after({"a": 1})


def test_live_folds_fold_on_what_changed_only(store: RecordStore) -> None:
    store.create_many([created("a"), created("b"), created("c")])
    live = LiveFolds(store)
    jobs, errors = live.refresh(T0)
    assert [j.id for j in jobs] == ["a", "b", "c"] and errors == {}
    held = {j.id: j for j in jobs}
    store.append("b", [note(2)], 1)
    store.append("c", [ended(2)], 1)
    jobs, errors = live.refresh(T0)
    assert [j.id for j in jobs] == ["a", "b"] and errors == {}
    assert jobs[0] is held["a"]  # unchanged: not read, not folded again
    assert jobs[1] == fold(store.read("b"), T0) and jobs[1].version == 2


def test_live_folds_read_many_jobs_in_key_order_and_answer_in_creation_order(
        store: RecordStore) -> None:
    """A read of BULK jobs or more goes in the tables' key order (ids are random, issue 49);
    refresh still answers in creation order, a job already held keeps its place, and new
    jobs come after, in creation order."""
    from dispatch.stores.live import BULK

    def made(i: int) -> JobCreated:  # ids in no order: creation order is not key order
        job = created(f"{(i * 7919) % 10007:05d}-{i}")
        return msgspec.structs.replace(job, at=T0 + timedelta(seconds=i))

    n = BULK + 50
    store.create_many([made(i) for i in range(n)])
    order = [made(i).job_id for i in range(n)]
    assert order != sorted(order)
    live = LiveFolds(store)
    jobs, errors = live.refresh(T0)
    assert [j.id for j in jobs] == order and errors == {}
    kept = {j.id: j for j in jobs}
    # BULK changed jobs again, and new ones: a bulk read of jobs held and jobs not held
    for job_id in order[: BULK]:
        store.append(job_id, [note(2)], 1)
    store.create_many([made(n + i) for i in range(3)])
    jobs, errors = live.refresh(T0)
    assert [j.id for j in jobs] == order + [made(n + i).job_id for i in range(3)]
    assert errors == {}
    assert all(j.version == 2 for j in jobs[:BULK])
    assert all(j is kept[j.id] for j in jobs[BULK:n])  # not changed: not read again
    assert list(live.folded) == [j.id for j in jobs]


def test_live_folds_set_a_bad_record_aside_and_keep_the_others(
        store: RecordStore, backdoor: Backdoor) -> None:
    store.create_many([created("a"), created("b")])
    live = LiveFolds(store)
    live.refresh(T0)
    store.append("a", [note(2)], 1)
    store.append("b", [note(2)], 1)
    backdoor.execute("UPDATE events SET body = '{\"type\":\"nope\"}' WHERE job_id = 'a'"
                     " AND seq = 2",
                     "UPDATE dispatch_events SET body = '{\"type\":\"nope\"}'"
                     " WHERE job_id = 'a' AND seq = 2")
    jobs, errors = live.refresh(T0)
    assert [j.id for j in jobs] == ["b"] and jobs[0].version == 2
    assert list(errors) == ["a"] and "seq 2" in str(errors["a"])
    jobs, errors = live.refresh(T0)  # still bad: reported again, not forgotten
    assert list(errors) == ["a"]


def test_an_old_store_migrates_and_its_jobs_are_seen(store_url: str) -> None:
    build_v1_store(store_url, {"old": [created("old"), note(2)], "done": [created("done"),
                                                                          ended(2)]})
    with open_store(store_url) as s:
        assert Backdoor(store_url).schema_version() == SCHEMA_VERSION
        changes, mark = s.changes(None)
        assert [(c.job_id, c.version) for c in changes] == [("old", 2)]
        s.append("old", [note(3)], 2)
        assert [(c.job_id, c.version) for c in s.changes(mark)[0]] == [("old", 3)]
        jobs, _ = LiveFolds(s).refresh(T0)
        assert jobs == [fold(s.read("old"), T0)]
