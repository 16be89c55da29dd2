"""A stop asked for in the tick that commits the outcome still lands when the scheduler could
not be reached then: the supervisor chases the finished job until nothing of it runs.
Real local backend and SQLite record; the first stop call is refused as unreachable."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

from tests.specs import parse_spec

from dispatch.backends.local import LocalBackend
from dispatch.backends.registry import declarations_for
from dispatch.core.model import CauseKind, SchedulerUnreachable, State
from dispatch.core.record import fold
from dispatch.service.requests import create_job
from dispatch.stores.select import open_store
from dispatch.supervise.loop import Supervisor, utcnow


class FirstStopUnreachable(LocalBackend):
    def __init__(self, root: Path) -> None:
        super().__init__(root, node_loss_window=timedelta(seconds=1), kill_grace=0.5)
        self.refused = 0

    def stop(self, ref: str) -> None:
        if self.refused == 0:
            self.refused += 1
            raise SchedulerUnreachable("local", "injected: stop could not be delivered")
        super().stop(ref)


def test_fenced_job_failed_with_a_lost_stop_is_stopped_afterwards(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'r.sqlite3'}")
    backend = FirstStopUnreachable(tmp_path / "local")
    spec = parse_spec({"name": "chase", "command": ["sleep", "60"], "nodes": 2})  # no rules
    job_id = create_job(store, spec, declarations_for("local"), utcnow())
    sup = Supervisor(store, lambda _n: backend, resend_after=timedelta(seconds=0.2))
    deadline = time.monotonic() + 30
    ref = None
    while time.monotonic() < deadline and ref is None:
        sup.tick()
        job = fold(store.read(job_id), utcnow())
        if job.current is not None and job.current.ref is not None:
            obj = backend.discover([], [job.current.ref]).get(job.current.ref)
            if obj is not None and obj.state is State.RUNNING:
                ref = job.current.ref
        time.sleep(0.1)
    assert ref is not None
    backend.inject(ref, "lose-node", 1)
    # Past the window: the fence stops the object and, with no rule, fails the job; the stop
    # is refused, the commit stands.
    while time.monotonic() < deadline and fold(store.read(job_id), utcnow()).outcome is None:
        sup.tick()
        time.sleep(0.2)
    job = fold(store.read(job_id), utcnow())
    assert job.outcome is not None and job.outcome.state is State.FAILED
    assert job.outcome.cause.kind is CauseKind.NODE_LOST
    assert backend.refused == 1 and job_id in sup.chasing
    assert backend.discover([], [ref]).get(ref).alive  # type: ignore[union-attr]
    # The next ticks deliver the stop; once nothing runs the job is no longer chased.
    while time.monotonic() < deadline and job_id in sup.chasing:
        sup.tick()
        time.sleep(0.2)
    assert job_id not in sup.chasing
    assert not backend.discover([], [ref]).get(ref).alive  # type: ignore[union-attr]
    final = fold(store.read(job_id), utcnow())
    assert final.outcome == job.outcome  # S7: unchanged by what followed
    store.close()
