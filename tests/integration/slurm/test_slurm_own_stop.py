"""Issue 21 item 15 on the real cluster: dispatch marks its own stop in the job's Comment
before its scancel, so a person's scancel stays final (S14) even when the person is the very
user the supervisor runs as (here both are root, so Slurm says "CANCELLED by 0" for both).

The supervisor runs in this process on a real SQLite record and the real SlurmBackend. The
stop comes from a rule: a job that Slurm runs again (``scontrol requeue``) under a policy that
holds on ``requeued`` is stopped by dispatch, and dispatch's stop ends in a hold that keeps
the requeue's cause; a person's cancel in that stop's way ends the job cancelled for good.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from slurm_helpers import slurm
from tests.specs import parse_spec

from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.core.model import CauseKind, State
from dispatch.core.record import Job, fold
from dispatch.service.requests import create_job
from dispatch.stores.base import RecordStore as Store
from dispatch.stores.select import open_store
from dispatch.supervise.loop import Supervisor, utcnow

pytestmark = pytest.mark.slurm

WAIT_S = 120.0  # a bound for a hung run on a slow shared machine, never a timing assertion
# The requeue rule makes the job requeueable (sbatch --requeue); a person's requeue then
# meets the hold rule, which no native requeue may satisfy: dispatch stops the job.
HOLD_ON_REQUEUE = {"rules": [{"on": ["preempted"], "action": "requeue", "budget": 1},
                             {"on": ["requeued"], "action": "hold"}]}


class PersonCancelsFirst(SlurmBackend):
    """The race: a person runs ``scancel`` as the supervisor's own user after dispatch has
    decided to stop the job (its intent is in the record) and before dispatch's own stop
    reaches Slurm."""

    cancelled = False

    def stop(self, ref: str) -> None:
        if not self.cancelled:
            self.cancelled = True
            # The person, as root: "CANCELLED by 0", like our own; once Slurm has finished
            # requeueing (a COMPLETING job refuses a scancel), so that theirs is what ends it.
            wait_state(ref, "PENDING")
            slurm("scancel", ref)
            wait_state(ref, "CANCELLED")
        super().stop(ref)


def wait_state(ref: str, state: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while (now := subprocess.run(["squeue", "-h", "-j", ref, "-t", "all", "-o", "%T"],
                                 capture_output=True, text=True, timeout=30,
                                 check=False).stdout.strip()) != state:
        assert time.monotonic() < deadline, f"job {ref} never {state} (is {now!r})"
        time.sleep(0.2)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = open_store(f"sqlite://{tmp_path / 'record.sqlite3'}")
    yield s
    s.close()


def supervise(store: Store, job_id: str, backend: SlurmBackend, done: Callable[[Job], bool],
              what: str) -> Job:
    sup = Supervisor(store, lambda _name: backend)
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        sup.tick()
        job = fold(store.read(job_id), utcnow())
        if done(job):
            return job
        time.sleep(0.5)
    raise AssertionError(f"{what} not reached in {WAIT_S:g}s: {fold(store.read(job_id), utcnow())}")


def requeued_under_a_hold_rule(store: Store, backend: SlurmBackend, name: str) -> tuple[str, str]:
    """A job running on the testbed, then requeued by Slurm (a person's ``scontrol requeue``):
    dispatch's plan stops it (no rule lets it run again). Returns (job id, Slurm ref)."""
    spec = parse_spec({"name": name, "backend": "slurm", "command": ["sleep", "300"],
                       "time_limit": "5m", "policy": HOLD_ON_REQUEUE})
    job_id = create_job(store, spec, backend.declarations(), utcnow())
    job = supervise(store, job_id, backend, lambda j: j.current is not None
                    and j.current.ref is not None, "the submission bound")
    ref = job.current.ref  # type: ignore[union-attr]
    assert ref is not None
    running = backend.discover(set(), {ref}).get(ref)
    deadline = time.monotonic() + WAIT_S
    while running is None or running.state is not State.RUNNING:
        assert time.monotonic() < deadline, f"job {ref} never ran: {running}"
        time.sleep(0.5)
        running = backend.discover(set(), {ref}).get(ref)
    slurm("scontrol", "requeue", ref)
    return job_id, ref


def comment_of(ref: str) -> str:
    return subprocess.run(["squeue", "-h", "-j", ref, "-t", "all", "-O", "Comment:200"],
                          capture_output=True, text=True, timeout=30, check=False).stdout.strip()


def test_our_stop_is_marked_at_the_scheduler_and_read_back_as_ours(
        store: Store, tmp_path: Path) -> None:
    backend = SlurmBackend(output_dir=tmp_path, node_loss_window=timedelta(seconds=30))
    job_id, ref = requeued_under_a_hold_rule(store, backend, "mark-ours")
    try:
        job = supervise(store, job_id, backend, lambda j: j.hold is not None
                        or j.outcome is not None, "dispatch's stop to end in the hold")
        assert job.outcome is None, job.outcome
        assert job.hold is not None and job.hold.cause.kind is CauseKind.REQUEUED
        assert comment_of(ref).startswith("dispatch-stop:")  # the mark, read back by squeue
        # The next process reads the mark from the scheduler, not from memory.
        fresh = SlurmBackend(output_dir=tmp_path).discover(set(), {ref}).get(ref)
        assert fresh is not None and fresh.state is State.CANCELLED
        assert fresh.cause.actor == "dispatch", fresh.cause
        assert "Comment=dispatch-stop:" in fresh.cause.detail
    finally:
        subprocess.run(["scancel", ref], capture_output=True, timeout=30, check=False)


def test_a_persons_scancel_as_our_own_user_during_our_stop_is_final(
        store: Store, tmp_path: Path) -> None:
    backend = PersonCancelsFirst(output_dir=tmp_path, node_loss_window=timedelta(seconds=30))
    job_id, ref = requeued_under_a_hold_rule(store, backend, "mark-person")
    try:
        job = supervise(store, job_id, backend, lambda j: j.hold is not None
                        or j.outcome is not None, "the job's end")
        assert job.hold is None, job.hold  # not our stop's recovery hold
        assert job.outcome is not None and job.outcome.state is State.CANCELLED
        assert job.outcome.cause.kind is CauseKind.CANCELLED
        assert job.outcome.cause.actor == "0", job.outcome.cause  # the person, by uid
        assert not comment_of(ref).startswith("dispatch-stop:")  # never marked: it had ended
    finally:
        subprocess.run(["scancel", ref], capture_output=True, timeout=30, check=False)
