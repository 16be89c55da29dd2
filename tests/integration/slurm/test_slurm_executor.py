"""dispatch.Executor on the real Slurm testbed (issue 26): a return value, an exception with
its traceback, a two-node function that sees its rank, a real preemption (a high-priority
exclusive job) resumed from a Checkpointable's checkpoint, and map_array as one job array."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from slurm_helpers import slurm

import dispatch
from dispatch import CauseKind, State

pytestmark = pytest.mark.slurm
WAIT_S = 300.0  # the testbed is shared: a job may wait in the queue


def add(a: int, b: int) -> int:
    print(f"adding {a} and {b} on {os.environ.get('SLURMD_NODENAME')}", flush=True)
    return a + b


class Broken(Exception):
    pass


def raise_broken() -> None:
    raise Broken("it broke on slurm")


def whoami() -> dict[str, str]:
    print(f"I am rank {os.environ['RANK']}", flush=True)
    return {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                       "MASTER_PORT")}


class Counter(dispatch.Checkpointable):
    """Counts to ``total``; on the first submission it stops at 3 (saying so in ``marker``)
    until it is preempted. The checkpoint keeps ``count``."""

    def __init__(self, marker: str) -> None:
        self.marker = marker
        self.count = 0

    def __call__(self, total: int) -> tuple[int, int, str]:
        started_at = self.count
        while self.count < total:
            self.count += 1
            if os.environ["DISPATCH_SUBMISSION"] == "1" and self.count == 3:
                Path(self.marker).write_text("at 3")
                time.sleep(300)
        return started_at, self.count, os.environ["DISPATCH_SUBMISSION"]


class Harness:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.store = str(tmp / "record.sqlite3")
        self.jobs: list[dispatch.FunctionJob] = []

    def executor(self, **parameters: Any) -> dispatch.Executor:
        return dispatch.Executor(self.tmp / "runs", backend="slurm", store=self.store,
                                 timeout_min=5, **parameters)

    def keep(self, *jobs: dispatch.FunctionJob) -> None:
        self.jobs.extend(jobs)


@pytest.fixture
def harness(slurm_version: str, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Harness]:
    out = tmp_path / "slurm-out"
    out.mkdir()
    out.chmod(0o777)
    monkeypatch.setenv("DISPATCH_SLURM_OUTPUT_DIR", str(out))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DISPATCH_STORE", raising=False)
    h = Harness(tmp_path)
    yield h
    refs = {r for j in h.jobs for r in j.job.record().objects}
    if refs:
        subprocess.run(["scancel", *refs], capture_output=True, timeout=30, check=False)


def test_value_exception_and_ranks_on_slurm(harness: Harness) -> None:
    ex = harness.executor()
    ok = ex.submit(add, 2, 3)
    bad = ex.submit(raise_broken)
    ex.update_parameters(nodes=2)
    ranks = ex.submit(whoami)
    harness.keep(ok, bad, ranks)
    assert ok.result(timeout=WAIT_S, poll=1.0) == 5
    assert (ok.stdout() or "").startswith("adding 2 and 3 on n")
    with pytest.raises(dispatch.FunctionFailed) as caught:
        bad.result(timeout=WAIT_S, poll=1.0)
    err = caught.value
    assert err.status.cause is not None and err.status.cause.kind is CauseKind.NON_ZERO_EXIT
    assert err.remote is not None and err.remote.type.endswith("Broken")
    assert err.remote.message == "it broke on slurm" and "in raise_broken" in err.remote.traceback
    assert isinstance(err.__cause__, Broken)
    seen = ranks.result(timeout=WAIT_S, poll=1.0)
    assert seen["RANK"] == "0" and seen["WORLD_SIZE"] == "2" and seen["LOCAL_RANK"] == "0"
    assert seen["MASTER_ADDR"].startswith("n") and seen["MASTER_PORT"].isdigit()
    assert ranks.stdout(rank=0) == "I am rank 0\n"
    assert ranks.stdout(rank=1) == "I am rank 1\n"


def test_a_real_preemption_resumes_from_the_checkpoint(harness: Harness) -> None:
    marker = harness.tmp / "at-3"
    policy = {"rules": [{"on": ["preempted"], "action": "resubmit", "budget": 1}]}
    ex = harness.executor(policy=policy, slurm_exclusive=True, slurm_nodelist="n1")
    job = ex.submit(Counter(str(marker)), 10)
    harness.keep(job)
    results: list[Any] = []
    waiter = threading.Thread(target=lambda: results.append(job.result(timeout=WAIT_S,
                                                                          poll=0.5)))
    waiter.start()
    deadline = time.monotonic() + WAIT_S
    while not marker.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert marker.exists(), "the first submission never reached step 3"
    high = slurm("sbatch", "--parsable", "-o", "/dev/null", "-p", "high", "--exclusive",
                 "-w", "n1", "--wrap", "sleep 2").strip()
    try:
        waiter.join(WAIT_S)
    finally:
        subprocess.run(["scancel", high], capture_output=True, check=False)
    assert results == [(3, 10, "2")]
    st = job.job.record()
    assert st.submissions == 2
    assert [t.cause.kind for t in st.history
            if t.state is State.RECOVERING and t.cause is not None] == [CauseKind.PREEMPTED]
    assert "resuming from the checkpoint" in (job.stderr() or "")


def test_map_array_is_one_slurm_job_array(harness: Harness) -> None:
    jobs = harness.executor(slurm_array_parallelism=2).map_array(add, [1, 2, 3],
                                                                 [10, 20, 30])
    harness.keep(*jobs)
    assert len(jobs) == 3 and len({j.id for j in jobs}) == 1  # one job: one array
    assert [j.task for j in jobs] == [0, 1, 2]
    assert [j.result(timeout=WAIT_S, poll=1.0) for j in jobs] == [11, 22, 33]
    assert jobs[2].stdout() is not None and "adding 3 and 30" in (jobs[2].stdout() or "")


def inverse(x: int) -> float:
    return 1 / x


def test_one_failing_task_of_an_array_keeps_the_others_values(harness: Harness) -> None:
    jobs = harness.executor().map_array(inverse, [1, 0, 4])
    harness.keep(*jobs)
    assert jobs[0].result(timeout=WAIT_S, poll=1.0) == 1.0
    assert jobs[2].result(timeout=WAIT_S, poll=1.0) == 0.25
    with pytest.raises(dispatch.FunctionFailed) as caught:
        jobs[1].result(timeout=WAIT_S, poll=1.0)
    assert caught.value.status.state is State.FAILED  # the array failed: one task did
    assert caught.value.remote is not None
    assert caught.value.remote.type == "ZeroDivisionError"
    assert isinstance(jobs[1].exception(), dispatch.FunctionFailed)
    assert jobs[0].exception() is None
