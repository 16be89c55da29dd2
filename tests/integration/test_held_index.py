"""Issue 27: serve pins the held jobs above its list without folding every live job at each
refresh (service/held.py keeps them folded on between refreshes). The answer is always the
record's: whatever is written between refreshes, through another connection, the held jobs
are exactly those a whole fold of every live job shows held. Real SQLite, two connections.
"""

from __future__ import annotations

import gc
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.service import Service, held
from dispatch.service.counts import state_counts
from dispatch.service.held import HeldIndex
from dispatch.service.listing import held_count, held_jobs
from dispatch.stores.query import JobQuery
from dispatch.stores.sqlite import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOLD = Cause(kind=CauseKind.NON_ZERO_EXIT, detail="exit 1")
EVERY = JobQuery()


def created(i: int) -> ev.JobCreated:
    return ev.JobCreated(seq=1, at=T0 + timedelta(seconds=i), job_id=f"j{i}",
                         spec=JobSpec(name="n", command=("true",), backend="local"),
                         declarations=Declarations(backend="local"))


def event_for(op: str, seq: int) -> ev.Event:
    at = T0 + timedelta(hours=1)
    if op == "hold":
        return ev.HoldPlaced(seq=seq, at=at, cause=HOLD)
    if op == "release":
        return ev.HoldReleased(seq=seq, at=at, actor="alice")
    if op == "give-up":
        return ev.GiveUpRequested(seq=seq, at=at, actor="alice")
    if op == "cancel":
        return ev.CancelRequested(seq=seq, at=at, actor="alice")
    return ev.OutcomeCommitted(seq=seq, at=at, state=State.FAILED, cause=HOLD)


OPS = st.sampled_from(["hold", "hold", "release", "give-up", "cancel", "end", "create"])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.lists(st.tuples(OPS, st.integers(0, 7)), max_size=4),
                      min_size=1, max_size=8))
def test_the_held_index_always_names_what_a_whole_fold_names(
        steps: list[list[tuple[str, int]]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "r.sqlite3"
        writer = SQLiteStore(path)
        writer.create_many([created(i) for i in range(4)])
        index = HeldIndex()
        made = 4
        try:
            for batch in steps:
                for op, i in batch:  # written by another connection between two refreshes
                    if op == "create":
                        writer.create_many([created(made)])
                        made += 1
                        continue
                    job_id = f"j{i % made}"
                    version = writer.version(job_id)
                    if writer.read(job_id)[-1].__class__ is ev.OutcomeCommitted:
                        continue  # finished: nothing follows an outcome
                    writer.append(job_id, [event_for(op, version + 1)], version)
                # Each refresh through a new connection, as each request of a server is.
                with SQLiteStore(path) as reader:
                    kept = held_jobs(Service(reader, held_index=index))
                with SQLiteStore(path) as reader:
                    whole = held_jobs(Service(reader))
                assert [d["job"] for d in kept] == [d["job"] for d in whole]
                assert kept == whole
                # the counts by state the index keeps between refreshes (issue 49)
                with SQLiteStore(path) as reader:
                    kept_counts = state_counts(Service(reader, held_index=index), EVERY, {})
                    assert kept_counts == state_counts(Service(reader), EVERY, {})
        finally:
            writer.close()


def test_a_refresh_folds_only_the_jobs_written_to(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "r.sqlite3")
    store.create_many([created(i) for i in range(50)])
    for i in (3, 7):
        store.append(f"j{i}", [event_for("hold", 2)], 1)
    index = HeldIndex()
    service = Service(store, held_index=index)
    assert [d["job"] for d in held_jobs(service)] == ["j7", "j3"]  # newest first
    live = index._live
    assert live is not None
    before = dict(live.folded)
    store.append("j9", [event_for("hold", 2)], 1)
    store.append("j3", [event_for("release", 3)], 2)
    assert [d["job"] for d in held_jobs(service)] == ["j9", "j7"]
    refolded = {j for j, job in live.folded.items() if job is not before.get(j)}
    assert refolded == {"j9", "j3"}  # the other 48 jobs were not read again
    store.close()


def test_the_count_waits_for_the_background_build_never_the_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: serve builds the index in the background; until it is built a list never
    folds every live job itself. Issue 49: it folds only the jobs the store says may be held
    (a hold writes its cause to the job's history causes), and says the count is not known
    (None) when those are more than ``CANDIDATES_MAX``."""
    path = tmp_path / "r.sqlite3"
    store = SQLiteStore(path)
    store.create_many([created(i) for i in range(20)])
    for i in (2, 5):
        store.append(f"j{i}", [event_for("hold", 2)], 1)
    store.append("j7", [event_for("hold", 2), event_for("release", 3)], 1)
    index = HeldIndex()
    service = Service(store, held_index=index)
    assert held_count(service) == 2  # not built yet: the three candidates folded, no more
    assert index._live is None
    monkeypatch.setattr(held, "CANDIDATES_MAX", 2)
    assert held_count(service) is None  # too many to fold at each request
    index.warm(lambda: SQLiteStore(path), lambda: T0 + timedelta(hours=2)).join()
    assert held_count(service) == 2  # built (CANDIDATES_MAX no longer matters)
    store.append("j9", [event_for("hold", 2)], 1)
    assert held_count(service) == 3  # built: later refreshes fold on
    assert held_count(Service(store)) == 3  # without an index: every live job folded


def test_the_first_build_runs_with_the_cyclic_collector_paused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: the first build folds every live job; the cyclic collector, rescanning what
    the build keeps, cost about as much CPU as the fold (support/gc_pause.py). Later
    refreshes fold a few jobs and leave it running. The answers are the whole fold's
    either way (the property test above)."""
    from dispatch.stores.live import LiveFolds

    seen: list[bool] = []
    refresh = LiveFolds.refresh

    def watched(self: LiveFolds, now: datetime) -> Any:
        seen.append(gc.isenabled())
        return refresh(self, now)

    monkeypatch.setattr(LiveFolds, "refresh", watched)
    gc.enable()
    store = SQLiteStore(tmp_path / "r.sqlite3")
    store.create_many([created(i) for i in range(5)])
    store.append("j1", [event_for("hold", 2)], 1)
    index = HeldIndex()
    index.warm(lambda: SQLiteStore(tmp_path / "r.sqlite3"), lambda: T0).join()
    assert gc.isenabled()  # on again once the build is done
    service = Service(store, held_index=index)
    assert [d["job"] for d in held_jobs(service)] == ["j1"]
    assert seen == [False, True]  # paused for the first build only
    store.close()


def test_a_refresh_in_which_nothing_changed_judges_no_job_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 49: a list's counts by state and its held jobs come from the index's last
    answers while a refresh returns the very same folded jobs: at 100,000 live jobs judging
    each job's state at every list cost about a third of its CPU. Once a job changes, the
    answers are judged anew and are the whole fold's."""
    from dispatch.core import status

    judged: list[str] = []
    judge = status._state

    def counted(job: Any, *args: Any, **kwargs: Any) -> Any:
        judged.append(job.id)
        return judge(job, *args, **kwargs)

    monkeypatch.setattr(status, "_state", counted)
    store = SQLiteStore(tmp_path / "r.sqlite3")
    store.create_many([created(i) for i in range(6)])
    store.append("j2", [event_for("hold", 2)], 1)
    index = HeldIndex()
    index.warm(lambda: SQLiteStore(tmp_path / "r.sqlite3"), lambda: T0).join()
    service = Service(store, held_index=index)

    def answers(s: Service) -> tuple[dict[str, int], list[str]]:
        return state_counts(s, EVERY, {}), [d["job"] for d in held_jobs(s)]

    first = answers(service)
    judged.clear()
    again = answers(service)
    # nothing changed: no job judged again but the held one the list shows (its row)
    assert set(judged) == {"j2"}
    assert again == first == answers(Service(store))  # without an index: every job folded
    store.append("j4", [event_for("hold", 2)], 1)
    judged.clear()
    changed = answers(service)
    assert judged  # a job changed: judged anew
    assert changed == answers(Service(store))
    assert changed[1] == ["j4", "j2"] and changed[0]["held"] == 2
    store.close()
