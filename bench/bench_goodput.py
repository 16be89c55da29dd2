"""Goodput benchmark (a benchmark, not a test: nothing here asserts a time).

    python bench/bench_goodput.py               # 10,000 finished jobs
    python bench/bench_goodput.py --jobs 2000   # a smaller run

Measures, in one process, on one SQLite store of JOBS finished jobs (each: two submissions,
one preempted after a checkpoint, then success; 20 events), best of 3:
- status: what `dispatch ls --all` reads from the record for every job (Service.views without
  asking a scheduler: read_many + fold + project), the P1 path;
- goodput: what `dispatch goodput --since 30d` computes (service.goodput.fleet_times: read_many
  + fold + job_time, then the 30-day split), without printing.
Target (issue 25): goodput at most 2x the status time. Printed as Markdown for RESULTS.md.
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from dispatch.core import events as ev  # noqa: E402
from dispatch.core.goodput import By  # noqa: E402
from dispatch.core.model import Cause, CauseKind, State, token_for  # noqa: E402
from dispatch.core.policy import Action, Declarations, RecoveryPolicy, Rule  # noqa: E402
from dispatch.core.spec import JobSpec  # noqa: E402
from dispatch.service import Service  # noqa: E402
from dispatch.service.goodput import fleet_times, groups  # noqa: E402
from dispatch.stores.sqlite import SQLiteStore  # noqa: E402

POLICY = RecoveryPolicy(rules=(
    Rule(on=(CauseKind.PREEMPTED, CauseKind.NODE_LOST), action=Action.RESUBMIT, budget=10),))


def record(job_id: str, i: int, start: datetime) -> list[ev.Event]:
    at = start + timedelta(minutes=i % 1000)
    s = timedelta(seconds=1)
    created = ev.JobCreated(
        seq=1, at=at, job_id=job_id, actor=f"user{i % 7}",
        spec=JobSpec(name=f"train-{i % 500}", command=("python", "train.py"),
                     backend="slurm", nodes=1 + i % 8, policy=POLICY),
        declarations=Declarations(backend="slurm", native_actions=frozenset({Action.REQUEUE})))
    pre = Cause(kind=CauseKind.PREEMPTED, detail="PREEMPTED", at=at + 600 * s)
    done = Cause(kind=CauseKind.NONE, detail="COMPLETED", exit_code=0, at=at + 1500 * s)
    out: list[Any] = [created]

    def add(cls: Any, t: float, **kw: Any) -> None:
        out.append(cls(seq=len(out) + 1, at=at + t * s, **kw))

    for k, (t0, cause_in, end, cause_out) in enumerate(
            ((0, None, 600, pre), (700, pre, 1500, done)), start=1):
        ref = f"{1000 + i * 10 + k}"
        add(ev.SubmissionIntended, t0, submission=k, token=token_for(job_id, k),
            cause=cause_in)
        add(ev.SubmissionAttempted, t0, submission=k, supervisor="bench")
        add(ev.SubmissionBound, t0 + 1, submission=k, ref=ref)
        add(ev.ExecutionStarted, t0 + 30, submission=k, execution=0,
            started=at + (t0 + 25) * s, nodes=1 + i % 8)
        add(ev.CheckpointRecorded, t0 + 300, submission=k, execution=0, step=100 * k,
            written=at + (t0 + 299) * s)
        add(ev.CheckpointRecorded, t0 + 450, submission=k, execution=0, step=100 * k + 50,
            written=at + (t0 + 449) * s)
        add(ev.ExecutionEnded, end, submission=k, ref=ref, execution=0, cause=cause_out)
        if k == 1:
            add(ev.RecoveryStarted, end, rule=0, action=Action.RESUBMIT, cause=pre)
    add(ev.EscalationRaised, 1500, message="node n3 drained")
    add(ev.OutcomeCommitted, 1501, state=State.SUCCEEDED, cause=done)
    return out


def best(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    times, result = [], None
    for _ in range(repeat):
        result = None
        gc.collect()
        gc.freeze()
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    args = ap.parse_args(argv)
    now = datetime.now(UTC)
    start = now - timedelta(days=20)
    print(f"# bench_goodput: {args.jobs:,} finished jobs")
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}; "
          f"date: {now:%Y-%m-%d %H:%M} UTC")
    print(f"command: python bench/bench_goodput.py {' '.join(argv)}".rstrip())
    tmp = Path(tempfile.mkdtemp(prefix="dispatch-bench-goodput-"))
    try:
        store = SQLiteStore(tmp / "record.sqlite3")
        ids = [f"job-{i:06d}" for i in range(args.jobs)]
        recs = [record(j, i, start) for i, j in enumerate(ids)]
        n_events = sum(len(r) for r in recs)
        for lo in range(0, args.jobs, 2000):
            chunk = recs[lo:lo + 2000]
            store.create_many([r[0] for r in chunk])  # type: ignore[misc]
            for r in chunk:
                store.append(r[0].job_id, r[1:], 1)  # type: ignore[attr-defined]
        del recs
        service = Service(store, clock=lambda: now)

        def status() -> Any:
            return service.views(ids, ask_scheduler=False)

        def goodput() -> Any:
            found, errors = fleet_times(store, now)
            assert not errors
            return groups(found, By.CAUSE, now, timedelta(days=30))

        t_status, views = best(status)
        assert len(views) == args.jobs and all(v.status is not None and v.status.settled
                                               for v in views)
        t_goodput, parts = best(goodput)
        whole = parts[""]
        assert whole.jobs == args.jobs
        print(f"\n{args.jobs:,} jobs, {n_events:,} events; goodput {whole.goodput():.3f}, "
              f"preempted badput {whole.badput()[CauseKind.PREEMPTED].total_seconds() / 3600:.0f}"
              " node-h\n")
        print("| what | time | ratio |\n| --- | --- | --- |")
        print(f"| status from the record (read_many + fold + project) | {t_status:.3f} s | "
              "1.00x |")
        print(f"| `goodput --since 30d` (read_many + fold + job_time + split) | "
              f"{t_goodput:.3f} s | **{t_goodput / t_status:.2f}x** |")
        store.close()
    finally:
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
