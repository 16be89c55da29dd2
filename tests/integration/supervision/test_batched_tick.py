"""Issue 49: a tick writes the decisions of several jobs in one transaction (supervise/
batch.py), then acts on each. It must record exactly what writing each job alone records
(the tick before: decide, append, act, job after job), over random sequences of changes,
with another writer's append landing between a job's decision and its write (a conflict:
that job is re-read and decided again alone, the others' events are kept). Both stores.

Two supervisors run side by side on stores and schedulers of their own, fed the same
sequence (tests/integration/supervision/test_changed_only_tick.py's Side): one writes up to
``batch`` jobs per transaction, the other is the tick before batching (OneAtATime: decide,
append, act, job after job, through the single-job ``append``).
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tests.integration.supervision.test_changed_only_tick import STEPS, T0, Side

from dispatch.backends.base import Backend
from dispatch.core import events as ev
from dispatch.core.codec import encode_event
from dispatch.core.model import Changes, Discovery, State
from dispatch.core.record import Job
from dispatch.errors import DispatchError
from dispatch.stores.base import RecordStore
from dispatch.stores.batch import Append, Outcome
from dispatch.stores.select import open_store
from dispatch.supervise import loop
from dispatch.supervise.batch import Visit
from dispatch.supervise.loop import Supervisor, TickReport


class Interfering:
    """The real store; when a write of a tick's decisions includes job ``target``, another
    writer (a person's cancel) appends to that job first: its decided append is stale."""

    def __init__(self, store: RecordStore) -> None:
        self._store = store
        self.target: str | None = None
        self.ticking = False  # only a tick's writes meet the other writer

    def append_many(self, appends: Sequence[Append], **kw: Any) -> list[Outcome]:
        job = self.target
        if self.ticking and job is not None and any(a.job_id == job for a in appends):
            self.target = None
            version = self._store.version(job)
            self._store.append(job, [ev.CancelRequested(seq=version + 1, at=T0,
                                                        actor="someone")], version)
        return self._store.append_many(appends, **kw)

    def append(self, job_id: str, events: Sequence[ev.Event], expected_version: int,
               **kw: Any) -> int:
        if self.ticking and self.target == job_id:
            self.target = None
            self._store.append(job_id, [ev.CancelRequested(
                seq=expected_version + 1, at=T0, actor="someone")], expected_version)
        return self._store.append(job_id, events, expected_version, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class OneAtATime(Supervisor):
    """The tick before batching: each job decided, appended (its own transaction), acted
    on, then the next; a conflict re-read and decided again, three attempts in all."""

    def _visit(self, job: Job, backend: Backend | None, discovery: Discovery | None,
               report: TickReport, changes: Changes | None) -> Visit:
        visit = Visit(job, self.quiet.get(job.id))
        try:
            gone = self._settle(job, backend, discovery, report, changes)
            if gone is not None:
                self._retry(job, backend, discovery, gone, report, attempts=3)
        except DispatchError as err:
            report.errors.append(f"job {job.id}: {err}")
        return visit


def side(store: RecordStore, one_at_a_time: bool = False) -> tuple[Side, Interfering]:
    wrapped = Interfering(store)
    s = Side(wrapped, True)  # type: ignore[arg-type]
    if one_at_a_time:
        s.sup = OneAtATime(wrapped, lambda _n: s.sched,  # type: ignore[arg-type]
                           clock=lambda: s.sched.now, name="prop",
                           on_decision=lambda j, d: s.decided.append((j.id, repr(d))))
    return s, wrapped


def tick(s: Side, wrapped: Interfering, batch: int | None,
         monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    with monkeypatch.context() as m:
        if batch is not None:
            m.setattr(loop, "BATCH_JOBS", batch)
        wrapped.ticking = True
        try:
            return s.tick()
        finally:
            wrapped.ticking = False


def records(store: RecordStore, jobs: Sequence[str]) -> dict[str, list[bytes]]:
    return {j: [encode_event(e) for e in store.read(j)] for j in jobs}


def run_both(urls: tuple[str, str], batch: int, steps: list[tuple[str, int, int, bool, bool]],
             monkeypatch: pytest.MonkeyPatch) -> None:
    with open_store(urls[0]) as a, open_store(urls[1]) as b:
        (many, many_w), (one, one_w) = side(a), side(b, one_at_a_time=True)
        jobs: list[str] = []
        for i, (what, which, amount, read, do_tick) in enumerate(steps):
            if what == "interfere":  # a person's cancel between the decision and its write
                if jobs:
                    many_w.target = one_w.target = jobs[which % len(jobs)]
            else:
                for s in (many, one):
                    s.apply(what, which, amount, jobs)
                    if read and not s.sched.unreachable:
                        s.sched.discover([], [])
            if what == "create":
                jobs.append(f"job{len(jobs):03d}")
            if not do_tick and i < len(steps) - 1:
                continue
            got = tick(many, many_w, batch, monkeypatch)
            want = tick(one, one_w, None, monkeypatch)
            assert got == want, f"step {i} {what}: batched {got}, one job at a time {want}"
            assert records(a, jobs) == records(b, jobs), f"step {i} {what}"


SEQUENCES = st.lists(
    st.one_of(STEPS, st.tuples(st.just("interfere"), st.integers(0, 50), st.just(1),
                               st.just(False), st.booleans())),
    min_size=1, max_size=40).map(
    lambda s: [("create", 0, 1, False, False), ("create", 0, 1, False, False),
               ("create", 0, 1, False, True), *s])

# Three jobs submitted in one tick, running, then all three end; a cancel lands on the
# middle one between its decision and the batch's write.
ALL_END = [("create", 0, 1, False, False), ("create", 0, 1, False, False),
           ("create", 0, 1, False, True), ("nothing", 0, 1, False, True),
           ("end-ok", 0, 1, False, False), ("end-ok", 1, 1, False, False),
           ("end-failed", 2, 1, False, False), ("interfere", 1, 1, False, True),
           ("nothing", 0, 1, False, True)]
# The cancel lands on a job being submitted.
AT_SUBMIT = [("create", 0, 1, False, False), ("create", 0, 1, False, False),
             ("interfere", 0, 1, False, False), ("create", 0, 1, False, True),
             ("nothing", 0, 1, False, True)]


@settings(max_examples=40, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.sampled_from([2, 3, 100]), steps=SEQUENCES)
@example(batch=100, steps=ALL_END)
@example(batch=2, steps=ALL_END)
@example(batch=100, steps=AT_SUBMIT)
def test_a_batched_tick_records_what_one_job_at_a_time_records_sqlite(
        monkeypatch: pytest.MonkeyPatch, batch: int,
        steps: list[tuple[str, int, int, bool, bool]]) -> None:
    with tempfile.TemporaryDirectory(prefix="batched-tick-") as tmp:
        run_both((f"sqlite://{Path(tmp) / 'a.sqlite3'}",
                  f"sqlite://{Path(tmp) / 'b.sqlite3'}"), batch, steps, monkeypatch)


@pytest.mark.postgres
@settings(max_examples=10, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(batch=st.sampled_from([2, 100]), steps=SEQUENCES)
@example(batch=100, steps=ALL_END)
def test_a_batched_tick_records_what_one_job_at_a_time_records_postgres(
        postgres_cluster: object, monkeypatch: pytest.MonkeyPatch, batch: int,
        steps: list[tuple[str, int, int, bool, bool]]) -> None:
    new = postgres_cluster.new_database  # type: ignore[attr-defined]
    run_both((new(), new()), batch, steps, monkeypatch)


def test_a_conflict_in_a_batch_keeps_the_others_and_is_decided_again(
        tmp_path: Path) -> None:
    """Three jobs end in one tick; a person's cancel lands on job001 between the tick's
    decisions and their write. job000's and job002's outcomes are committed by that one
    write (one COMMIT); job001's append is stale, so it is re-read and decided again on
    what the canceller wrote, alone, as any conflict is."""
    with open_store(f"sqlite://{tmp_path / 'r.sqlite3'}") as store:
        s, wrapped = side(store)
        jobs: list[str] = []
        for _ in range(3):
            s.apply("create", 0, 1, jobs)
            jobs.append(f"job{len(jobs):03d}")
        for _ in range(2):
            s.sup.tick()  # submit, bind, see running
        for ref in sorted(s.sched.objects):
            s.sched.end(ref, State.SUCCEEDED)
        wrapped.target, wrapped.ticking = "job001", True
        conn: sqlite3.Connection = store._conn  # type: ignore[attr-defined]
        statements: list[str] = []
        conn.set_trace_callback(statements.append)
        report = s.sup.tick()
        conn.set_trace_callback(None)
        assert report.conflicts == 1 and not report.errors, report
        kinds = {j: [type(e).__name__ for e in store.read(j)] for j in jobs}
        for j in ("job000", "job002"):
            assert kinds[j][-1] == "OutcomeCommitted", kinds[j]
        # job001: the canceller's event, then what was decided on it (not the stale batch)
        after = kinds["job001"][kinds["job001"].index("CancelRequested") + 1:]
        assert "OutcomeCommitted" in after, kinds["job001"]
        # the canceller's append, the batch of three, and job001's own append after it
        commits = [q for q in statements if q.strip().upper() == "COMMIT"]
        assert len(commits) == 3, statements
        assert not store.list_jobs(live_only=True)


# Before the tick: (what, which) steps applied to both sides, after three jobs... were
# submitted and seen running.
TABLE = {
    "all end": [("end-ok", 0), ("end-ok", 1), ("end-failed", 2), ("end-ok", 3), ("end-ok", 4)],
    "some end, a cancel asked": [("end-ok", 0), ("cancel", 1), ("end-failed", 3)],
    "objects vanish": [("vanish", 0), ("vanish", 2), ("end-ok", 4)],
    "new jobs and ends": [("create", 0), ("create", 0), ("end-ok", 1), ("end-ok", 2)],
}


@pytest.mark.parametrize("case", sorted(TABLE))
def test_one_tick_of_n_changed_jobs_records_what_n_single_job_ticks_record(
        tmp_path: Path, case: str) -> None:
    """Five running jobs; then what ``case`` does; then one tick of every job on one side,
    and on the other a tick of each job alone (``tick(job_ids=[job])``, in id order): the
    records are the same, event for event."""
    with open_store(f"sqlite://{tmp_path / 'a.sqlite3'}") as a, \
            open_store(f"sqlite://{tmp_path / 'b.sqlite3'}") as b:
        sides = [Side(a, True), Side(b, True)]
        jobs: list[str] = []
        for _ in range(5):
            for s in sides:
                s.apply("create", 0, 1, jobs)
            jobs.append(f"job{len(jobs):03d}")
        for _ in range(3):
            for s in sides:
                s.sup.tick()  # submit, bind, see running
        for what, which in TABLE[case]:
            for s in sides:
                s.apply(what, which, 1, jobs)
            if what == "create":
                jobs.append(f"job{len(jobs):03d}")
        together = sides[0].sup.tick()
        alone = [sides[1].sup.tick(job_ids=[j]) for j in sorted(jobs)]
        assert together.decisions == sum(r.decisions for r in alone) > 0
        assert together.appended == sum(r.appended for r in alone)
        assert records(a, jobs) == records(b, jobs)
