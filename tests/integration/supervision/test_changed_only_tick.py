"""Issue 49: a tick that skips the quiet jobs none of whose objects changed (the backend
says which changed: Discovery.changes) decides exactly what a tick that decides every job
decides, over random sequences of changes: objects appearing (submits), ending, going
away, their nodes lost; record appends (a person's cancel); time passing; a reader's look
between two ticks and a look that fails (changes the supervisor never saw). Both stores.

Two supervisors run side by side, each on a store and a scheduler of its own fed the same
sequence: one whose scheduler reports changes, one that forgets every quiet answer before
each tick (decide() on every job). Each tick's decisions must be the same, in order.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from dispatch.backends.base import ChangeJournal, DryRun, LogSource, Submission
from dispatch.backends.local import LocalBackend
from dispatch.backends.local.journal import note_change
from dispatch.backends.local.looks import FULL_LOOK_EVERY, LocalLooks
from dispatch.backends.local.procs import boot_id, read_proc_stat
from dispatch.backends.local.wire import ObjectMeta, ObjectStatus, RootMarker, RunnerInfo
from dispatch.core import events as ev
from dispatch.core import model as m
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    ObjectReport,
    SchedulerUnreachable,
    State,
)
from dispatch.core.next_due import objects_seen
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.base import RecordStore
from dispatch.stores.select import open_store
from dispatch.supervise import quiet
from dispatch.supervise.loop import Supervisor

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAME = "standin"


class Scheduler:
    """A scheduler in this process: objects in a dict, discover() answers from it and, when
    ``reports_changes``, says which of its objects changed since its previous look."""

    name = NAME
    submit_in_flight = timedelta(seconds=30)

    def __init__(self, reports_changes: bool) -> None:
        self.reports_changes = reports_changes
        self.objects: dict[str, ObjectReport] = {}
        self.journal = ChangeJournal()
        self.now = T0
        self.unreachable = False

    def _set(self, ref: str, report: ObjectReport | None) -> None:
        old = self.objects.pop(ref, None)
        for o in (old, report):
            if o is not None:
                self.journal.note(o.ref, o.token)
        if report is not None:
            self.objects[ref] = report

    def declarations(self) -> Declarations:
        return Declarations(backend=NAME)

    def validate(self, spec: JobSpec) -> None:
        return None

    def ready(self) -> None:
        return None

    def admit(self, spec: JobSpec) -> None:
        return None

    def dry_run(self, submission: Submission) -> DryRun:
        return DryRun(backend=NAME)

    def submit(self, submission: Submission) -> str:
        ref = f"obj-{submission.token}"
        self._set(ref, ObjectReport(
            ref=ref, token=submission.token, state=State.RUNNING,
            cause=Cause(kind=CauseKind.NONE),
            executions=(m.Execution(index=0, started_at=self.now),)))
        return ref

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        if self.unreachable:
            self.unreachable = False
            raise SchedulerUnreachable(NAME, "down for this look")
        wanted_t, wanted_r = set(tokens), set(refs)
        objs = tuple(o for o in self.objects.values()
                     if o.ref in wanted_r or o.token in wanted_t)
        changes = self.journal.take() if self.reports_changes else None
        return Discovery(at=self.now, objects=objs, changes=changes)

    def end(self, ref: str, state: State, by: str | None = None) -> None:
        o = self.objects.get(ref)
        if o is None or o.ended:
            return
        cause = Cause(kind=CauseKind.NONE if state is State.SUCCEEDED else
                      CauseKind.CANCELLED if by else CauseKind.NON_ZERO_EXIT,
                      at=self.now, actor=by)
        self._set(ref, ObjectReport(ref=ref, token=o.token, state=state, cause=cause,
                                    executions=(m.Execution(
                                        index=0, started_at=o.executions[0].started_at,
                                        ended_at=self.now, cause=cause),)))

    def stop(self, ref: str) -> None:
        self.end(ref, State.CANCELLED, "dispatch")

    def cancel(self, ref: str) -> None:
        self.end(ref, State.CANCELLED, "someone")

    def open_gate(self, ref: str) -> None:
        return None

    def logs(self, ref: str) -> Sequence[LogSource]:
        return ()

    def close(self) -> None:
        return None


# One step of the sequence: (what, which, how much, then a reader's look?, then a tick?).
STEPS = st.tuples(
    st.sampled_from(["create", "end-ok", "end-failed", "vanish", "lose-node", "cancel",
                     "time", "nothing", "unreachable"]),
    st.integers(0, 50), st.integers(1, 400), st.booleans(), st.booleans())


class Side:
    """One supervisor, its store, its scheduler and its clock."""

    def __init__(self, store: RecordStore, reports_changes: bool,
                 sched: Any = None) -> None:
        self.store = store
        self.sched: Any = sched if sched is not None else Scheduler(reports_changes)
        self.decided: list[tuple[str, str]] = []
        self.sup = Supervisor(store, lambda _n: self.sched, clock=lambda: self.sched.now,
                              name="prop", on_decision=lambda j, d: self.decided.append(
                                  (j.id, repr(d))))
        self.every_job = not reports_changes

    def apply(self, what: str, which: int, amount: int, jobs: list[str]) -> None:
        refs = sorted(self.sched.objects)
        ref = refs[which % len(refs)] if refs else None
        now = self.sched.now
        if what == "create":
            job_id = f"job{len(jobs):03d}"
            self.store.create(ev.JobCreated(
                seq=1, at=now, job_id=job_id,
                spec=JobSpec(name=job_id, command=("true",), backend=NAME, nodes=1),
                declarations=Declarations(backend=NAME)))
        elif what in ("end-ok", "end-failed") and ref is not None:
            self.sched.end(ref, State.SUCCEEDED if what == "end-ok" else State.FAILED)
        elif what == "vanish" and ref is not None:
            self.sched._set(ref, None)
        elif what == "lose-node" and ref is not None:
            o = self.sched.objects[ref]
            if not o.ended and o.lost_since is None:
                self.sched._set(ref, ObjectReport(
                    ref=o.ref, token=o.token, state=o.state, cause=o.cause,
                    executions=o.executions, lost_since=now))
        elif what == "cancel" and jobs:
            job_id = jobs[which % len(jobs)]
            version = self.store.version(job_id)
            self.store.append(job_id, [ev.CancelRequested(seq=version + 1, at=now,
                                                          actor="someone")], version)
        elif what == "kill" and ref is not None:  # a runner SIGKILLed: nothing written
            self.sched.kill(ref)
        elif what == "time":
            self.sched.now = now + timedelta(seconds=amount)
        elif what == "unreachable":  # the next tick's look fails
            self.sched.unreachable = True

    def tick(self) -> tuple[list[tuple[str, str]], int, list[str]]:
        if self.every_job:
            self.sup.quiet.clear()  # decide() on every job, as without next_due or changes
        self.decided = []
        report = self.sup.tick()
        # each job's decisions in order; the order between jobs means nothing (a tick that
        # visits only some jobs visits them by id)
        return sorted(self.decided, key=lambda d: d[0]), report.appended, sorted(report.errors)


def run_both(urls: tuple[str, str], steps: list[tuple[str, int, int, bool, bool]],
             scheds: tuple[Any, Any] | None = None,
             same: Callable[[object], object] = lambda x: x) -> None:
    with open_store(urls[0]) as a, open_store(urls[1]) as b:
        fast = Side(a, True, scheds[0] if scheds else None)
        every = Side(b, False, scheds[1] if scheds else None)
        jobs: list[str] = []
        for i, (what, which, amount, read, tick) in enumerate(steps):
            for side in (fast, every):
                side.apply(what, which, amount, jobs)
                if read and not side.sched.unreachable:  # a reader's look (status, ls)
                    side.sched.discover([], [])
            if what == "create":
                jobs.append(f"job{len(jobs):03d}")
            if not tick and i < len(steps) - 1:
                continue
            got, want = same(fast.tick()), same(every.tick())
            assert got == want, f"step {i} {what}: the skipping tick decided {got}, " \
                                f"every job's tick {want}"
        # and the records agree, event for event
        for job_id in jobs:
            assert [type(e) for e in a.read(job_id)] == [type(e) for e in b.read(job_id)]


# A job's object ends while it is quiet, and a reader's look (or a failed tick) sees that
# change first: the tick after must still decide the job.
_QUIET = [("create", 0, 1, False, True)] + [("nothing", 0, 1, False, True)] * 3
READ_FIRST = [*_QUIET, ("end-ok", 0, 1, True, True), ("nothing", 0, 1, False, True)]
FAILED_FIRST = [*_QUIET, ("unreachable", 0, 1, False, False), ("end-failed", 0, 1, False, True),
                ("nothing", 0, 1, False, True)]

# Quiet ticks, then an object ends (nothing in the record): the job must be visited. And a
# lost node, then time passes the node-loss window (5 min): the fence comes due.
END_QUIET = [*_QUIET, ("end-ok", 0, 1, False, True), ("nothing", 0, 1, False, True)]
FENCE_DUE = [*_QUIET, ("lose-node", 0, 1, False, True), ("nothing", 0, 1, False, True),
             ("time", 0, 200, False, True), ("time", 0, 101, False, True),
             ("nothing", 0, 1, False, True)]

SEQUENCES = st.lists(STEPS, min_size=1, max_size=40).map(
    lambda s: [("create", 0, 1, False, True), ("create", 0, 1, False, True), *s])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=SEQUENCES)
@example(steps=READ_FIRST)
@example(steps=FAILED_FIRST)
@example(steps=END_QUIET)
@example(steps=FENCE_DUE)
def test_skipping_unchanged_jobs_decides_what_deciding_every_job_decides_sqlite(
        steps: list[tuple[str, int, int, bool, bool]]) -> None:
    with tempfile.TemporaryDirectory(prefix="changed-tick-") as tmp:
        run_both((f"sqlite://{Path(tmp) / 'a.sqlite3'}",
                  f"sqlite://{Path(tmp) / 'b.sqlite3'}"), steps)


@pytest.mark.postgres
@settings(max_examples=15, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=SEQUENCES)
@example(steps=READ_FIRST)
def test_skipping_unchanged_jobs_decides_what_deciding_every_job_decides_postgres(
        postgres_cluster: object, steps: list[tuple[str, int, int, bool, bool]]) -> None:
    new = postgres_cluster.new_database  # type: ignore[attr-defined]
    run_both((new(), new()), steps)


def test_a_steady_tick_compares_no_objects_when_the_scheduler_says_what_changed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The skip itself: with changes reported, a steady tick compares no job's objects, and
    a tick after one object ended compares that job's only (decides it)."""
    with open_store(f"sqlite://{tmp_path / 'r.sqlite3'}") as store:
        side = Side(store, True)
        jobs: list[str] = []
        for _ in range(5):
            side.apply("create", 0, 1, jobs)
            jobs.append(f"job{len(jobs):03d}")
        for _ in range(3):
            side.tick()  # submit, bind, see running
        compared: list[str] = []

        def counting(job, discovery):  # type: ignore[no-untyped-def]
            compared.append(job.id)
            return objects_seen(job, discovery)

        monkeypatch.setattr(quiet, "objects_seen", counting)
        visited: list[str] = []
        visit = side.sup._visit

        def visiting(job, *args, **kwargs):  # type: ignore[no-untyped-def]
            visited.append(job.id)
            return visit(job, *args, **kwargs)

        monkeypatch.setattr(side.sup, "_visit", visiting)
        decided, appended, _ = side.tick()
        # no job visited at all (issue 49: supervise/visits.py), and each counted as skipped
        assert (decided, appended, compared, visited) == ([], 0, [], [])
        assert side.sup.quiet.keys() == set(jobs) and side.sup.tick().skipped == 5
        ended = next(r for r in side.sched.objects if "job002" in r)
        side.sched.end(ended, State.SUCCEEDED)
        decided, appended, _ = side.tick()
        assert {j for j, _ in decided} == {"job002"} and appended > 0
        assert set(compared) == {"job002"} and set(visited) == {"job002"}


# ---- the same, through the real local backend's look (issue 49) ------------------------


class LocalSim(LocalBackend):
    """The real local backend's look (its change journal, its runners' pidfds, its files),
    with objects this test makes and ends as a runner would: a runner is a ``sleep``
    process, each status is written and then named in the journal; ``kill`` SIGKILLs a
    runner and writes nothing. ``reports_changes`` False: every look is a full look (a new
    LocalLooks each time), and the supervisor compares every job."""

    name = NAME
    submit_in_flight = timedelta(seconds=30)

    def __init__(self, root: Path, reports_changes: bool, now: datetime) -> None:
        root.mkdir(parents=True)
        (root / "root.json").write_bytes(msgspec.json.encode(RootMarker(
            id="5ca1ab1e" * 2, created_at=now)))  # one id for both sides: the same refs
        super().__init__(root)
        self.reports_changes = reports_changes
        self.objects: dict[str, ObjectReport] = {}
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.now = now
        self.unreachable = False
        self.n = 0

    def declarations(self) -> Declarations:
        return Declarations(backend=NAME)

    def validate(self, spec: JobSpec, source: str = "<spec>") -> None:
        return None

    def submit(self, submission: Submission) -> str:
        for ref, o in self.objects.items():
            if o.token == submission.token:
                return ref
        self.n += 1
        ref = f"l-5ca1ab1e-{self.n:08x}"
        proc = subprocess.Popen(["sleep", "600"])  # noqa: S603,S607 - a stand-in runner
        stat = read_proc_stat(proc.pid)
        assert stat is not None
        objdir = self.objects_dir / ref
        (objdir / "control").mkdir(parents=True)
        meta = ObjectMeta(ref=ref, token=submission.token, job_id=submission.job_id,
                          submission=submission.number, name="n", nodes=1, argv=("x",),
                          workdir="/", created_at=self.now, root_id="5ca1ab1e" * 2)
        (objdir / "meta.json").write_bytes(msgspec.json.encode(meta))
        (objdir / "runner.json").write_bytes(msgspec.json.encode(RunnerInfo(
            pid=proc.pid, start_ticks=stat.start_ticks, boot_id=boot_id())))
        self.procs[ref] = proc
        self._set(ref, ObjectReport(ref=ref, token=submission.token, state=State.RUNNING,
                                    cause=Cause(kind=CauseKind.NONE),
                                    executions=(m.Execution(index=0, started_at=self.now),)))
        return ref

    def _set(self, ref: str, report: ObjectReport | None) -> None:
        if report is None:
            self._runner_ends(ref, signal.SIGKILL)
            shutil.rmtree(self.objects_dir / ref, ignore_errors=True)
            self.objects.pop(ref, None)
        else:
            status = ObjectStatus(ref=ref, token=report.token or "", state=report.state,
                                  cause=report.cause, executions=report.executions,
                                  lost_since=report.lost_since, updated_at=self.now,
                                  heartbeat_at=self.now)
            tmp = self.objects_dir / ref / ".status.tmp"
            tmp.write_bytes(msgspec.json.encode(status))
            os.replace(tmp, self.objects_dir / ref / "status.json")
            self.objects[ref] = report
        note_change(self.root, ref)
        if report is not None and report.ended:
            self._runner_ends(ref, signal.SIGTERM)

    def _runner_ends(self, ref: str, signum: int) -> None:
        proc = self.procs.pop(ref, None)
        if proc is not None:
            proc.send_signal(signum)
            proc.wait()

    def kill(self, ref: str) -> None:
        o = self.objects[ref]
        if ref in self.procs and not o.ended:
            self._runner_ends(ref, signal.SIGKILL)
            self.objects[ref] = ObjectReport(ref=ref, token=o.token, state=State.FAILED,
                                             cause=Cause(kind=CauseKind.UNKNOWN))

    def end(self, ref: str, state: State, by: str | None = None) -> None:
        Scheduler.end(self, ref, state, by)  # type: ignore[arg-type]  # same fields used

    def stop(self, ref: str) -> None:
        self.end(ref, State.CANCELLED, "dispatch")

    def cancel(self, ref: str, actor: str | None = None) -> None:
        self.end(ref, State.CANCELLED, "someone")

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        if self.unreachable:
            self.unreachable = False
            raise SchedulerUnreachable(NAME, "down for this look")
        if not self.reports_changes:
            self.looks.close()
            self.looks = LocalLooks(self, FULL_LOOK_EVERY)
        return super().discover(tokens, refs)

    def close(self) -> None:
        for ref in list(self.procs):
            self._runner_ends(ref, signal.SIGKILL)
        super().close()


LOCAL_STEPS = st.tuples(
    st.sampled_from(["create", "end-ok", "end-failed", "vanish", "kill", "lose-node",
                     "cancel", "time", "nothing", "unreachable"]),
    st.integers(0, 50), st.integers(1, 400), st.booleans(), st.booleans())
LOCAL_SEQUENCES = st.lists(LOCAL_STEPS, min_size=1, max_size=25).map(
    lambda s: [("create", 0, 1, False, True), ("create", 0, 1, False, True), *s])
_TIMES = re.compile(r"datetime\.datetime\([^)]*\)|pid \d+")


def run_local(tmp: Path, urls: tuple[str, str],
              steps: list[tuple[str, int, int, bool, bool]]) -> None:
    now = datetime.now(UTC)
    scheds = (LocalSim(tmp / "fast", True, now), LocalSim(tmp / "every", False, now))

    def same(decided: object) -> object:
        # The two roots' paths, and what the look stamps with the real time or a runner's
        # pid (a vanished runner's verdict, a missing object's), are each side's own.
        text = repr(decided).replace(str(tmp / "fast"), "ROOT").replace(
            str(tmp / "every"), "ROOT")
        return _TIMES.sub("T", text)

    try:
        run_both(urls, steps, scheds, same)
        assert scheds[0].looks.full_looks == 1  # every later look was a changed one
    finally:
        for sched in scheds:
            sched.close()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=LOCAL_SEQUENCES)
@example(steps=[*_QUIET, ("kill", 0, 1, False, True), ("nothing", 0, 1, False, True)])
@example(steps=[*_QUIET, ("kill", 0, 1, True, True), ("nothing", 0, 1, False, True)])
@example(steps=END_QUIET)
@example(steps=FENCE_DUE)
def test_skipping_decides_what_deciding_every_job_decides_on_the_local_look_sqlite(
        steps: list[tuple[str, int, int, bool, bool]]) -> None:
    with tempfile.TemporaryDirectory(prefix="changed-tick-local-") as tmp:
        run_local(Path(tmp), (f"sqlite://{Path(tmp) / 'a.sqlite3'}",
                              f"sqlite://{Path(tmp) / 'b.sqlite3'}"), steps)


@pytest.mark.postgres
@settings(max_examples=10, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=LOCAL_SEQUENCES)
@example(steps=[*_QUIET, ("kill", 0, 1, False, True), ("nothing", 0, 1, False, True)])
def test_skipping_decides_what_deciding_every_job_decides_on_the_local_look_postgres(
        postgres_cluster: object, steps: list[tuple[str, int, int, bool, bool]]) -> None:
    new = postgres_cluster.new_database  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory(prefix="changed-tick-local-") as tmp:
        run_local(Path(tmp), (new(), new()), steps)
