"""Issue 49: LiveFolds that share their folded jobs (serve's held index and its in-process
supervisors), and reads of many jobs in chunks with the cyclic collector paused. Whatever is
written between refreshes, each LiveFolds gives exactly the whole fold of every live job of
its scope, as one that shares nothing does; a job folded at a version by one is the other's
too, unread. Both stores, real connections."""

from __future__ import annotations

import gc
import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.record import Job, fold
from dispatch.core.spec import JobSpec
from dispatch.stores import live
from dispatch.stores.base import RecordStore
from dispatch.stores.live import LiveFolds, SharedFolds
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOLDER = ev.Holder(host="h", boot_id="b", pid=1, start_ticks=1)


def created(i: int) -> ev.JobCreated:
    return ev.JobCreated(seq=1, at=T0 + timedelta(seconds=i), job_id=f"j{i}",
                         scope="a" if i % 2 else "b",
                         spec=JobSpec(name=f"n{i}", command=("true",), backend="local"),
                         declarations=Declarations(backend="local"))


def next_event(op: str, seq: int) -> ev.Event:
    at = T0 + timedelta(hours=1, seconds=seq)
    if op == "submit":
        return ev.SubmissionIntended(seq=seq, at=at, submission=1, token="t.1",
                                     holder=HOLDER)
    if op == "hold":
        return ev.HoldPlaced(seq=seq, at=at, cause=Cause(kind=CauseKind.NON_ZERO_EXIT))
    if op == "end":
        return ev.OutcomeCommitted(seq=seq, at=at, state=State.FAILED,
                                   cause=Cause(kind=CauseKind.NON_ZERO_EXIT))
    return ev.EscalationRaised(seq=seq, at=at, message=op)


def whole(store: RecordStore, scope: str | None) -> dict[str, Job]:
    """Every live job of ``scope``, each record folded whole."""
    ids = [c.job_id for c in store.changes(None, scope=scope)[0] if not c.terminal]
    return {j: fold(store.read(j), T0, job_id=j) for j in ids}


def by_id(jobs: list[Job]) -> dict[str, Job]:
    return {j.id: j for j in jobs}


def test_shared_folds_always_give_the_whole_fold(store_url: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Random writes through another connection between refreshes of three LiveFolds
    sharing their jobs (every scope, scope a, scope b: as serve's held index and two
    supervisors) and one sharing nothing; reads in chunks of 3 jobs."""
    monkeypatch.setattr(live, "CHUNK", 3)
    monkeypatch.setattr(live, "BULK", 4)
    rng = random.Random(49)
    with open_store(store_url) as writer, open_store(store_url) as r1, \
            open_store(store_url) as r2, open_store(store_url) as r3, \
            open_store(store_url) as alone_store:
        made = 6
        writer.create_many([created(i) for i in range(made)])
        shared = SharedFolds()
        folds = [LiveFolds(r1, None, shared), LiveFolds(r2, "a", shared),
                 LiveFolds(r3, "b", shared)]
        alone = LiveFolds(alone_store)
        for _ in range(12):
            for _ in range(rng.randint(0, 6)):
                op = rng.choice(["submit", "hold", "note", "note", "end", "create"])
                if op == "create":
                    writer.create_many([created(made)])
                    made += 1
                    continue
                job_id = f"j{rng.randrange(made)}"
                version = writer.version(job_id)
                if isinstance(writer.read(job_id)[-1], ev.OutcomeCommitted):
                    continue  # nothing follows an outcome
                writer.append(job_id, [next_event(op, version + 1)], version)
            order = rng.sample(folds, len(folds))  # any of them may look first
            got = {id(f): f.refresh(T0) for f in order}
            for f in folds:
                jobs, errors = got[id(f)]
                assert errors == {}
                assert by_id(jobs) == whole(writer, f.scope)
            assert alone.refresh(T0)[0] == got[id(folds[0])][0]  # in the same order too
            # one copy of each job at a version, whoever folded it
            everyone = {j.id: j for j in got[id(folds[0])][0]}
            for f in folds[1:]:
                for j in got[id(f)][0]:
                    if everyone[j.id].version == j.version:
                        assert j is everyone[j.id]


def test_a_job_another_folded_at_that_version_is_not_read_again(
        store: RecordStore, monkeypatch: pytest.MonkeyPatch) -> None:
    store.create_many([created(i) for i in range(5)])
    shared = SharedFolds()
    first = LiveFolds(store, None, shared)
    jobs, _ = first.refresh(T0)
    store.append("j1", [next_event("note", 2)], 1)
    asked: list[dict[str, int]] = []
    read_after = store.read_after

    def counted(versions: dict[str, int]) -> dict[str, list[ev.Event]]:
        asked.append(dict(versions))
        return read_after(versions)

    monkeypatch.setattr(store, "read_after", counted)
    second = LiveFolds(store, None, shared)
    again, _ = second.refresh(T0)
    assert asked == [{"j1": 0}]  # only the job written to since the first folded it
    assert by_id(again) == whole(store, None)
    assert [a is b for a, b in zip(again, jobs, strict=True)] == [True, False, True, True,
                                                                   True]


def test_a_read_of_many_jobs_runs_in_chunks_with_the_collector_paused(
        store: RecordStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor's first look folds every live job: in chunks (their rows and events
    dropped once folded) with the cyclic collector paused (it rescanned what the fold keeps,
    40 % of a first tick's CPU at 100,000 live jobs). A small read leaves it running."""
    monkeypatch.setattr(live, "CHUNK", 2)
    monkeypatch.setattr(live, "BULK", 3)
    store.create_many([created(i) for i in range(5)])
    seen: list[tuple[list[str], bool]] = []
    read_after = store.read_after

    def watched(versions: dict[str, int]) -> Any:
        seen.append((list(versions), gc.isenabled()))
        return read_after(versions)

    monkeypatch.setattr(store, "read_after", watched)
    gc.enable()
    folds = LiveFolds(store)
    jobs, errors = folds.refresh(T0)
    assert gc.isenabled()  # on again once the read is done
    assert errors == {} and by_id(jobs) == whole(store, None)
    assert seen == [(["j0", "j1"], False), (["j2", "j3"], False), (["j4"], False)]
    seen.clear()
    store.append("j2", [next_event("note", 2)], 1)
    assert by_id(folds.refresh(T0)[0]) == whole(store, None)
    assert seen == [(["j2"], True)]
