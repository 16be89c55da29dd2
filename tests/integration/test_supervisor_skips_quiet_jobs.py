"""Issue 27: a supervisor skips decide() for a job whose record and objects did not change
and whose next time-based decision is not due, and still makes that decision on time.

Real local backend (a real process) and SQLite record; the supervisor's clock is set by the
test so "on time" is exact. The backend's cancel is refused silently (counted, the process
keeps running), so the supervisor must send the cancel again RESEND_AFTER later.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta
from pathlib import Path

from tests.specs import parse_spec

from dispatch.backends.local import LocalBackend
from dispatch.backends.registry import declarations_for
from dispatch.core.decide import RESEND_AFTER
from dispatch.core.model import State
from dispatch.core.record import fold
from dispatch.service.requests import create_job, request_cancel
from dispatch.stores.select import open_store
from dispatch.supervise.loop import Supervisor, utcnow


class CancelNeverLands(LocalBackend):
    """A scheduler that takes a cancel and does nothing with it (a lost cancel)."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.cancels: list[str] = []

    def cancel(self, ref: str) -> None:
        self.cancels.append(ref)


class SetClock:
    def __init__(self) -> None:
        self.now = utcnow()

    def __call__(self) -> datetime:
        return self.now


def test_a_resend_after_the_wait_happens_on_time_while_quiet_ticks_are_skipped(
        tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'r.sqlite3'}")
    backend = CancelNeverLands(tmp_path / "local")
    clock = SetClock()
    spec = parse_spec({"name": "quiet", "command": ["sleep", "120"]})
    job_id = create_job(store, spec, declarations_for("local"), clock())
    sup = Supervisor(store, lambda _n: backend, clock=clock)
    ref: str | None = None
    try:
        deadline = time.monotonic() + 30
        running = False
        while time.monotonic() < deadline and not running:  # wait for the object to run
            sup.tick()
            job = fold(store.read(job_id), clock())
            ref = job.current.ref if job.current is not None else None
            found = backend.discover([], [ref]).get(ref) if ref is not None else None
            running = found is not None and found.state is State.RUNNING \
                and 0 in job.current.executions_started  # type: ignore[union-attr]
            time.sleep(0.1)
        assert running and ref is not None
        # Past the submit's claim, nothing of this job is due any more: the ticks skip it.
        clock.now += timedelta(minutes=1)
        sup.tick()
        assert sup.tick().skipped == 1

        request_cancel(store, job_id, clock(), "alice")
        report = sup.tick()  # the record changed: decided, the cancel sent
        assert report.skipped == 0 and backend.cancels == [ref]
        sent = clock()
        clock.now = sent + timedelta(seconds=1)
        report = sup.tick()  # its own events changed the record: decided again, nothing to do
        assert report.skipped == 0 and report.decisions == 0
        clock.now = sent + RESEND_AFTER / 2
        assert sup.tick().skipped == 1
        clock.now = sent + RESEND_AFTER - timedelta(microseconds=1)
        assert sup.tick().skipped == 1
        assert backend.cancels == [ref]  # nothing sent again before the wait is over
        clock.now = sent + RESEND_AFTER
        report = sup.tick()
        assert report.skipped == 0 and backend.cancels == [ref, ref]  # sent again on time
        job = fold(store.read(job_id), clock())
        assert job.outcome is None  # still waiting for the scheduler to end it
    finally:
        if ref is not None:
            backend.stop(ref)  # the process this test left running
        store.close()


def test_a_changed_object_is_decided_again_at_once(tmp_path: Path) -> None:
    """The object ends between two ticks: the next tick decides (no skip), however far the
    next time-based decision is."""
    store = open_store(f"sqlite://{tmp_path / 'r.sqlite3'}")
    backend = LocalBackend(tmp_path / "local")
    clock = SetClock()
    spec = parse_spec({"name": "short", "command": ["sleep", "2"]})
    job_id = create_job(store, spec, declarations_for("local"), clock())
    sup = Supervisor(store, lambda _n: backend, clock=clock)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            clock.now += timedelta(minutes=1)
            sup.tick()
            if fold(store.read(job_id), clock()).outcome is not None:
                break
            time.sleep(0.2)
        job = fold(store.read(job_id), clock())
        assert job.outcome is not None and job.outcome.state is State.SUCCEEDED
    finally:
        store.close()
