"""R1 and R2 on real processes, a real record store and the real local backend.

R1: kill -9 the supervisor at random moments, at least 300 times: no two objects for one
submission, no committed outcome lost or changed, no budget overspent — and once a
supervisor is finally let run, every job ends exactly as its policy says.
R2: two supervisors on one store (SQLite and PostgreSQL), at least 100 jobs, in parallel: no
submission is made twice.

Supervisors run in forked children (fast to start, so hundreds of kills fit in CI); the
children are killed with SIGKILL, never asked to stop.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401  (fixtures)
from tests.specs import parse_spec

from dispatch.backends.base import Submission
from dispatch.backends.local import LocalBackend
from dispatch.backends.registry import declarations_for
from dispatch.core.model import State
from dispatch.core.policy import Declarations
from dispatch.core.record import Job, fold
from dispatch.service.requests import create_job
from dispatch.stores.select import open_store
from dispatch.supervise.loop import Supervisor, utcnow

pytestmark = pytest.mark.chaos

FORK = multiprocessing.get_context("fork")

# Exits 3 on its first two submissions, then 0: the policy decides how that ends.
FLAKY = ["python3", "-c",
         "import os,sys,time; time.sleep(0.05); "
         "sys.exit(3 if int(os.environ['DISPATCH_SUBMISSION']) <= 2 else 0)"]


def spec_for(i: int, budget: int) -> dict[str, object]:
    return {"name": f"job{i}", "backend": "local", "command": FLAKY, "nodes": 1 + i % 2,
            "policy": {"rules": [{"on": ["non-zero-exit"], "action": "resubmit",
                                  "budget": budget},
                                 {"on": ["preempted", "node-lost"], "action": "resubmit",
                                  "budget": 2}]}}


def expected_outcome(budget: int) -> tuple[State, int]:
    """FLAKY under a non-zero-exit budget: (final state, submissions made)."""
    return (State.SUCCEEDED, 3) if budget >= 2 else (State.FAILED, budget + 1)


class CountingLocal(LocalBackend):
    """The real local backend, writing one line per submit call to a log (O_APPEND)."""

    def __init__(self, root: Path, log: Path) -> None:
        super().__init__(root, node_loss_window=timedelta(seconds=2))
        self.log = log

    def submit(self, submission: Submission) -> str:
        fd = os.open(self.log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, (submission.token + "\n").encode())
        finally:
            os.close(fd)
        return super().submit(submission)


def _supervise(store_url: str, root: str, log: str, poll: float, lease: float) -> None:
    """Body of a forked supervisor child: serve until killed."""
    random.seed(os.getpid())
    store = open_store(store_url)
    backend = CountingLocal(Path(root), Path(log))
    sup = Supervisor(store, lambda _name: backend, attempt_lease=timedelta(seconds=lease),
                     resend_after=timedelta(seconds=1))
    signal.signal(signal.SIGTERM, lambda *_: sup.stopping.set())
    sup.serve(poll)
    os._exit(0)


def _start(store_url: str, root: Path, log: Path, poll: float = 0.02,
           lease: float = 0.3) -> multiprocessing.process.BaseProcess:
    p = FORK.Process(target=_supervise, args=(store_url, str(root), str(log), poll, lease),
                     daemon=True)
    p.start()
    return p


def _jobs(store_url: str) -> dict[str, Job]:
    with open_store(store_url) as store:
        ids = [r.job_id for r in store.list_jobs()]
        records = store.read_many(ids)
    now = utcnow()
    return {j: fold(records[j], now) for j in ids}


def _objects_per_token(root: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for meta in (root / "objects").glob("*/meta.json"):
        counts[json.loads(meta.read_text())["token"]] += 1
    return counts


def _check_invariants(jobs: dict[str, Job], seen: dict[str, tuple[str, str, int]],
                      root: Path) -> None:
    for job_id, job in jobs.items():
        for i, rule in enumerate(job.spec.policy.rules):
            assert job.budget_used[i] <= (rule.budget or 0), f"{job_id}: budget overspent"
        if job.outcome is not None:
            now_seen = (job.outcome.state.value, job.outcome.cause.kind.value, job.outcome.seq)
            assert seen.setdefault(job_id, now_seen) == now_seen, \
                f"{job_id}: committed outcome changed {seen[job_id]} -> {now_seen}"
        elif job_id in seen:
            raise AssertionError(f"{job_id}: committed outcome {seen[job_id]} was lost")
        numbers = [s.number for s in job.submissions]
        assert numbers == list(range(1, len(numbers) + 1))
    dupes = {t: n for t, n in _objects_per_token(root).items() if n > 1}
    assert not dupes, f"two objects for one submission: {dupes}"


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite://{tmp_path / 'record.sqlite3'}"


def _create_jobs(store_url: str, start: int, count: int) -> dict[str, int]:
    budgets: dict[str, int] = {}
    with open_store(store_url) as store:
        for i in range(start, start + count):
            budget = i % 4  # 0..3: some fail on a spent budget, some succeed
            spec = parse_spec(spec_for(i, budget), f"<job{i}>")
            job_id = create_job(store, spec, _declarations(), utcnow())
            budgets[job_id] = budget
    return budgets


def _declarations() -> Declarations:
    return declarations_for("local")


@pytest.fixture
def reaper() -> Iterator[list[multiprocessing.process.BaseProcess]]:
    procs: list[multiprocessing.process.BaseProcess] = []
    yield procs
    for p in procs:
        if p.is_alive():
            p.kill()
        p.join(5)


def test_r1_kill_minus_9_the_supervisor_300_times(tmp_path: Path, sqlite_url: str,
                                                  reaper: list) -> None:
    root, log = tmp_path / "local", tmp_path / "submits.log"
    rng = random.Random(20261130)
    budgets: dict[str, int] = {}
    seen: dict[str, tuple[str, str, int]] = {}
    kills = 0
    created = 0
    while kills < 300:
        jobs = _jobs(sqlite_url)
        if all(j.outcome is not None for j in jobs.values()):
            budgets.update(_create_jobs(sqlite_url, created, 4))
            created += 4
        p = _start(sqlite_url, root, log)
        reaper.append(p)
        time.sleep(rng.uniform(0.0, 0.25))
        os.kill(p.pid, signal.SIGKILL)  # type: ignore[arg-type]
        p.join(5)
        kills += 1
        _check_invariants(_jobs(sqlite_url), seen, root)
    # Let one supervisor finish the work; every job ends as its policy says.
    p = _start(sqlite_url, root, log)
    reaper.append(p)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        jobs = _jobs(sqlite_url)
        if all(j.outcome is not None for j in jobs.values()):
            break
        time.sleep(0.2)
    jobs = _jobs(sqlite_url)
    _check_invariants(jobs, seen, root)
    assert created >= 8, "the kills should have spanned several generations of jobs"
    for job_id, job in jobs.items():
        state, submissions = expected_outcome(budgets[job_id])
        assert job.outcome is not None, f"{job_id} never finished"
        assert (job.outcome.state, len(job.submissions)) == (state, submissions), job_id


@pytest.mark.parametrize("which", ["sqlite", pytest.param("postgres",
                                                          marks=pytest.mark.postgres)])
def test_r2_two_supervisors_on_one_store_never_submit_twice(
        which: str, tmp_path: Path, request: pytest.FixtureRequest, reaper: list) -> None:
    store_url = (f"sqlite://{tmp_path / 'record.sqlite3'}" if which == "sqlite"
                 else request.getfixturevalue("postgres_url"))
    root, log = tmp_path / "local", tmp_path / "submits.log"
    budgets = _create_jobs(store_url, 0, 100)
    for _ in range(2):
        p = _start(store_url, root, log, poll=0.05, lease=30.0)
        reaper.append(p)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        jobs = _jobs(store_url)
        if all(j.outcome is not None for j in jobs.values()):
            break
        time.sleep(0.5)
    jobs = _jobs(store_url)
    calls = Counter(log.read_text().split())
    twice = {t: n for t, n in calls.items() if n > 1}
    assert not twice, f"submitted more than once: {twice}"
    _check_invariants(jobs, {}, root)
    for job_id, job in jobs.items():
        state, submissions = expected_outcome(budgets[job_id])
        assert job.outcome is not None, f"{job_id} never finished"
        assert (job.outcome.state, len(job.submissions)) == (state, submissions), job_id
    assert sum(calls.values()) == sum(len(j.submissions) for j in jobs.values())
