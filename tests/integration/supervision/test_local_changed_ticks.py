"""Issue 49: a supervisor on the real local backend, which reports changes: its steady ticks
read no object's files and decide no job, and each way a running object ends is still seen
by those changed-only looks, never by a full look: a runner SIGKILLed (it writes nothing:
its pidfd says it died), a job whose command exits 0, a person's cancel.

Real runners and node processes, a real SQLite record. Each wait is for the committed
state it then reads (bounded for slow machines, never a timing assertion).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import msgspec
import pytest
from tests.specs import parse_spec

from dispatch.backends.local import LocalBackend
from dispatch.backends.local.wire import RunnerInfo
from dispatch.backends.registry import declarations_for
from dispatch.core.model import CauseKind, State
from dispatch.core.record import Job, fold
from dispatch.service.requests import create_job, request_cancel
from dispatch.stores.base import RecordStore
from dispatch.stores.select import open_store
from dispatch.supervise.loop import Supervisor, TickReport
from dispatch.support.clock import utcnow

WAIT_S = 60.0


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.store: RecordStore = open_store(f"sqlite://{tmp / 'r.sqlite3'}")
        self.backend = LocalBackend(tmp / "local", kill_grace=1.0)
        self.sup = Supervisor(self.store, lambda _n: self.backend, name="changed")
        self.last = TickReport()

    def job(self, command: list[str]) -> str:
        spec = parse_spec({"name": "j", "command": command, "workdir": str(self.tmp)})
        return create_job(self.store, spec, declarations_for("local"), utcnow())

    def read(self, job_id: str) -> Job:
        return fold(self.store.read(job_id), utcnow())

    def tick_until(self, job_id: str, done: Callable[[Job], bool]) -> Job:
        deadline = time.monotonic() + WAIT_S
        while True:
            self.last = self.sup.tick()
            job = self.read(job_id)
            if done(job):
                return job
            assert time.monotonic() < deadline, f"never got there: {job}"
            time.sleep(0.05)

    def running(self, job_id: str) -> str:
        """Ticks until the job's object runs and the supervisor has nothing left to do for
        it: then a steady tick skips it, reads no object's files, and looks fully no more."""
        job = self.tick_until(job_id, lambda j: j.current is not None
                              and 0 in j.current.executions_started)
        assert job.current is not None and job.current.ref is not None
        for _ in range(2):
            self.sup.tick()
        reads, full = self.backend.looks.reads, self.backend.looks.full_looks
        report = self.sup.tick()
        assert (report.skipped, report.decisions) == (1, 0)
        assert (self.backend.looks.reads, self.backend.looks.full_looks) == (reads, full)
        return job.current.ref

    def runner(self, ref: str) -> RunnerInfo:
        raw = (self.backend.root / "objects" / ref / "runner.json").read_bytes()
        return msgspec.json.decode(raw, type=RunnerInfo)


@pytest.fixture
def harness(tmp_path: Path) -> Iterator[Harness]:
    h = Harness(tmp_path)
    yield h
    for ref in h.backend.disk.scan():
        h.backend.stop(ref)
    h.backend.close()
    h.store.close()


def test_a_sigkilled_runner_is_seen_by_a_changed_look(harness: Harness) -> None:
    job_id = harness.job(["sleep", "120"])
    ref = harness.running(job_id)
    full = harness.backend.looks.full_looks
    os.kill(harness.runner(ref).pid, signal.SIGKILL)  # writes nothing
    job = harness.tick_until(job_id, lambda j: j.submissions[0].ended)
    cause = job.submissions[0].end_cause
    assert cause is not None and cause.kind is CauseKind.UNKNOWN
    assert "vanished" in (cause.detail or "")
    assert harness.backend.looks.full_looks == full


def test_a_job_that_exits_0_is_seen_by_a_changed_look(harness: Harness) -> None:
    go = harness.tmp / "go"
    job_id = harness.job(["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"])
    harness.running(job_id)
    full = harness.backend.looks.full_looks
    go.write_bytes(b"")
    job = harness.tick_until(job_id, lambda j: j.outcome is not None)
    assert job.outcome is not None and job.outcome.state is State.SUCCEEDED
    assert harness.backend.looks.full_looks == full


def test_a_cancel_is_carried_out_and_seen_by_changed_looks(harness: Harness) -> None:
    job_id = harness.job(["sleep", "120"])
    ref = harness.running(job_id)
    full = harness.backend.looks.full_looks
    request_cancel(harness.store, job_id, utcnow(), "alice")
    job = harness.tick_until(job_id, lambda j: j.outcome is not None)
    assert job.outcome is not None and job.outcome.state is State.CANCELLED
    ended = harness.backend.discover([], [ref]).get(ref)
    assert ended is not None and ended.state is State.CANCELLED
    assert harness.backend.looks.full_looks == full
