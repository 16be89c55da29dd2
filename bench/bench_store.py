"""Record store benchmark (a benchmark, not a test: nothing here asserts a time).

    python bench/bench_store.py                 # SQLite and a throwaway PostgreSQL
    python bench/bench_store.py --no-postgres   # SQLite only
    python bench/bench_store.py --jobs 2000     # a smaller run

Measures, in one run, as printed Markdown (copied into bench/RESULTS.md):
1. append throughput: one-event appends (one supervisor decision each) and 39-event batches,
   on SQLite with synchronous=FULL (what the store uses) and NORMAL (for the cost of FULL),
   and on PostgreSQL (a durable throwaway cluster: fsync on, synchronous_commit on);
2. the batched read of JOBS jobs x 40 events with read_many (one query);
3. P1: fold + project of every job, against merely decoding the same records (target: at
   most 2x). Project is measured with no discovery (record only), with a per-job discovery
   (each job sees its own objects) and with one shared discovery of every object (what a
   caller gets by passing a whole backend's Discovery to each project() call).
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
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from dispatch.core import events as ev  # noqa: E402
from dispatch.core.codec import decode_event  # noqa: E402
from dispatch.core.model import Cause, CauseKind, Discovery, ObjectReport, State, token_for  # noqa: E402
from dispatch.core.policy import Action, Declarations, RecoveryPolicy, Rule  # noqa: E402
from dispatch.core.spec import JobSpec  # noqa: E402
from dispatch.stores.base import RecordStore  # noqa: E402
from dispatch.stores.postgres import PostgresStore  # noqa: E402
from dispatch.stores.sqlite import SQLiteStore  # noqa: E402

try:  # the lead's core; the P1 part is skipped (and says so) without it
    from dispatch.core.record import fold
    from dispatch.core.status import project
except ImportError as err:  # pragma: no cover - only before fold/project landed
    fold = project = None  # type: ignore[assignment]
    CORE_MISSING = str(err)
else:
    CORE_MISSING = ""

T0 = datetime(2026, 1, 1, tzinfo=UTC)
EVENTS_PER_JOB = 40
POLICY = RecoveryPolicy(rules=(
    Rule(on=(CauseKind.PREEMPTED, CauseKind.NODE_LOST), action=Action.RESUBMIT, budget=10),
    Rule(on=(CauseKind.NON_ZERO_EXIT,), action=Action.ESCALATE),
))


def created(job_id: str, i: int) -> ev.JobCreated:
    return ev.JobCreated(
        seq=1, at=T0 + timedelta(seconds=i), job_id=job_id,
        spec=JobSpec(name=f"train-{i % 500}", command=("python", "train.py", "--lr", "3e-4"),
                     backend="slurm", nodes=4, time_limit=86_400, policy=POLICY,
                     env={"WANDB_PROJECT": "bench"}),
        declarations=Declarations(backend="slurm",
                                  native_actions=frozenset({Action.REQUEUE})),
    )


def story(job_id: str, i: int) -> list[ev.Event]:
    """Events 2..40 of a plausible record: seven preemptions each recovered by resubmit, then
    either the eighth submission running (odd jobs) or an outcome committed (even jobs)."""
    out: list[ev.Event] = []
    at = T0 + timedelta(seconds=i)

    def add(e: Any) -> None:
        # Each event at its own time (as a real record is; identical times would flatter
        # any encoding that compresses or shares them).
        out.append(msgspec.structs.replace(e, at=at + timedelta(seconds=37 * e.seq,
                                                                 microseconds=e.seq)))

    def preempted_at(k: int) -> Cause:
        return Cause(kind=CauseKind.PREEMPTED, detail="PREEMPTED Reason=None",
                     at=at + timedelta(seconds=185 * k))

    seq = 2
    recoveries = 7 if i % 2 else 6
    for k in range(1, recoveries + 1):
        ref = f"{1000 + i * 10 + k}"
        preempted = preempted_at(k)
        add(ev.SubmissionIntended(seq=seq, at=at, submission=k, token=token_for(job_id, k),
                                  cause=preempted_at(k - 1) if k > 1 else None))
        add(ev.SubmissionAttempted(seq=seq + 1, at=at, submission=k, supervisor="bench"))
        add(ev.SubmissionBound(seq=seq + 2, at=at, submission=k, ref=ref))
        add(ev.ExecutionEnded(seq=seq + 3, at=at, submission=k, ref=ref, execution=0,
                              cause=preempted))
        add(ev.RecoveryStarted(seq=seq + 4, at=at, rule=0, action=Action.RESUBMIT,
                               cause=preempted))
        seq += 5
    k = recoveries + 1
    ref = f"{1000 + i * 10 + k}"
    add(ev.SubmissionIntended(seq=seq, at=at, submission=k, token=token_for(job_id, k),
                              cause=preempted_at(k - 1)))
    add(ev.SubmissionAttempted(seq=seq + 1, at=at, submission=k, supervisor="bench"))
    add(ev.SubmissionBound(seq=seq + 2, at=at, submission=k, ref=ref))
    seq += 3
    if i % 2:
        add(ev.EscalationRaised(seq=seq, at=at, message="slow progress"))
    else:
        done = Cause(kind=CauseKind.NONE, detail="COMPLETED", exit_code=0, at=at)
        add(ev.ExecutionEnded(seq=seq, at=at, submission=k, ref=ref, execution=0, cause=done))
        add(ev.SegmentPublished(seq=seq + 1, at=at, unit_job_id=ref, task_id=ref,
                                reason="node n3 DRAIN", nodes=("n3",)))
        add(ev.SegmentCleared(seq=seq + 2, at=at, unit_job_id=ref, task_id=ref))
        add(ev.EscalationRaised(seq=seq + 3, at=at, message="node n3 drained"))
        add(ev.EscalationRaised(seq=seq + 4, at=at, message="node n3 back"))
        add(ev.OutcomeCommitted(seq=seq + 5, at=at, state=State.SUCCEEDED, cause=done))
    assert len(out) == EVENTS_PER_JOB - 1 and out[-1].seq == EVENTS_PER_JOB, (i, len(out))
    return out


def best(fn: Callable[[], Any], repeat: int = 3) -> tuple[float, Any]:
    """Best of ``repeat``. Data kept from earlier steps is frozen out of the cyclic GC first,
    so each step pays only for the objects it makes (as a real caller would)."""
    times, result = [], None
    for _ in range(repeat):
        result = None
        gc.collect()
        gc.freeze()
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return min(times), result


def bench_appends(store: RecordStore, label: str, n_single: int, n_batch: int) -> list[str]:
    prefix = f"a-{label}-{time.monotonic_ns()}"
    store.create_many([created(f"{prefix}-{j}", j) for j in range(n_batch + 1)])
    single_job = f"{prefix}-{n_batch}"
    t = time.perf_counter()
    for k in range(n_single):
        store.append(single_job, [ev.EscalationRaised(seq=2 + k, at=T0, message="m")], 1 + k)
    single = time.perf_counter() - t
    t = time.perf_counter()
    for j in range(n_batch):
        store.append(f"{prefix}-{j}", story(f"{prefix}-{j}", j), 1)
    batch = time.perf_counter() - t
    return [
        f"| {label} | 1-event appends | {n_single} | {single:.2f} s | "
        f"{n_single / single:,.0f} appends/s |",
        f"| {label} | 39-event batch appends | {n_batch} | {batch:.2f} s | "
        f"{n_batch / batch:,.0f} appends/s ({n_batch * 39 / batch:,.0f} events/s) |",
    ]


def populate(store: RecordStore, n: int) -> tuple[list[str], float]:
    ids = [f"job-{i:06d}" for i in range(n)]
    t = time.perf_counter()
    for start in range(0, n, 2000):
        store.create_many([created(ids[i], i) for i in range(start, min(n, start + 2000))])
    for i, job_id in enumerate(ids):
        store.append(job_id, story(job_id, i), 1)
    return ids, time.perf_counter() - t


def discovery_for(records: dict[str, list[ev.Event]]) -> dict[str, Discovery]:
    """What a backend would show: each live job's current object running."""
    out = {}
    for job_id, rec in records.items():
        objs: tuple[ObjectReport, ...] = ()
        bound = [e for e in rec if isinstance(e, ev.SubmissionBound)]
        if not any(isinstance(e, ev.OutcomeCommitted) for e in rec) and bound:
            last = bound[-1]
            objs = (ObjectReport(ref=last.ref, token=token_for(job_id, last.submission),
                                 state=State.RUNNING, cause=Cause(kind=CauseKind.NONE)),)
        out[job_id] = Discovery(at=T0 + timedelta(days=1), objects=objs)
    return out


def p1(records: dict[str, list[ev.Event]], raw: Sequence[tuple[str, int, bytes | str]],
       shared_sizes: Sequence[int], reads: dict[str, float]) -> list[str]:
    now = T0 + timedelta(days=1)
    n = len(records)
    lines = []
    t_decode, _ = best(lambda: [decode_event(b, job_id=j, seq=s) for j, s, b in raw])
    lines.append(f"| decode only ({len(raw):,} events) | {t_decode:.3f} s | 1.00x |")
    if fold is None or project is None:
        lines.append(f"| fold + project | not measured: {CORE_MISSING} | |")
        return lines
    t_fold, jobs = best(lambda: [fold(rec, now) for rec in records.values()])
    lines.append(f"| fold only | {t_fold:.3f} s | {t_fold / t_decode:.2f}x |")
    t_proj, _ = best(lambda: [project(job, None, now) for job in jobs])
    lines.append(f"| fold + project, no discovery | {t_fold + t_proj:.3f} s | "
                 f"{(t_fold + t_proj) / t_decode:.2f}x |")
    lines.append(f"| **P1**: decode + fold + project, no discovery | "
                 f"{t_decode + t_fold + t_proj:.3f} s | "
                 f"**{(t_decode + t_fold + t_proj) / t_decode:.2f}x** |")
    for label, t_read in reads.items():
        lines.append(f"| {label}: read_many + fold + project, no discovery, against read_many | "
                     f"{t_read + t_fold + t_proj:.3f} s | "
                     f"{(t_read + t_fold + t_proj) / t_read:.2f}x |")
    per_job = discovery_for(records)
    t_proj_d, _ = best(lambda: [project(job, per_job[job.id], now) for job in jobs])
    lines.append(f"| **P1**: decode + fold + project, per-job discovery | "
                 f"{t_decode + t_fold + t_proj_d:.3f} s | "
                 f"**{(t_decode + t_fold + t_proj_d) / t_decode:.2f}x** |")
    for size in shared_sizes:
        if size > n:
            continue
        subset = jobs[:size]
        shared = Discovery(at=now, objects=tuple(
            o for j in subset for o in per_job[j.id].objects))
        t_shared, _ = best(lambda s=subset, d=shared: [project(j, d, now) for j in s],
                           repeat=1)
        per_decoded = t_decode * size / n
        lines.append(f"| project of {size:,} jobs, one shared discovery of "
                     f"{len(shared.objects):,} objects | {t_shared:.3f} s | "
                     f"{t_shared / per_decoded:.2f}x of decoding those {size:,} |")
    return lines


def raw_rows_sqlite(path: Path) -> list[tuple[str, int, bytes]]:
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT job_id, seq, body FROM events WHERE job_id LIKE 'job-%'"
                            " ORDER BY job_id, seq").fetchall()
    finally:
        conn.close()


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=10_000)
    ap.add_argument("--single", type=int, default=1000, help="1-event appends to time")
    ap.add_argument("--batches", type=int, default=500, help="39-event appends to time")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--shared", default="1000,2000",
                    help="job counts for the shared-discovery projection (quadratic)")
    args = ap.parse_args(argv)
    shared_sizes = [int(x) for x in args.shared.split(",") if x]

    print(f"# bench_store: {args.jobs:,} jobs x {EVENTS_PER_JOB} events")
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    print(f"command: python bench/bench_store.py {' '.join(argv)}".rstrip())
    tmp = Path(tempfile.mkdtemp(prefix="dispatch-bench-"))
    stores: list[tuple[str, RecordStore]] = []
    cluster = None
    try:
        full = SQLiteStore(tmp / "full.sqlite3")
        normal = SQLiteStore(tmp / "normal.sqlite3")
        normal._conn.execute("PRAGMA synchronous = NORMAL")  # for comparison only
        stores += [("SQLite FULL", full), ("SQLite NORMAL", normal)]
        if not args.no_postgres:
            from tests.conftest_pg import ThrowawayPostgres

            cluster = ThrowawayPostgres(fast=False).start()
            stores.append(("PostgreSQL", PostgresStore(cluster.new_database())))
            print(f"PostgreSQL: {cluster.bindir}, durable (fsync on, synchronous_commit on)")

        print("\n## Append throughput\n")
        print("| store | what | count | time | rate |\n| --- | --- | --- | --- | --- |")
        for label, store in stores:
            for line in bench_appends(store, label, args.single, args.batches):
                print(line, flush=True)

        print(f"\n## Batched read of {args.jobs:,} jobs x {EVENTS_PER_JOB} events\n")
        print("| store | populate (create_many + one 39-event append per job) | "
              "read_many (one query, decoded) | list_jobs |")
        print("| --- | --- | --- | --- |")
        records: dict[str, list[ev.Event]] = {}
        reads: dict[str, float] = {}
        for label, store in stores:
            if label == "SQLite NORMAL":
                continue
            ids, t_pop = populate(store, args.jobs)
            t_read, got = best(lambda s=store, i=ids: s.read_many(i))
            t_list, rows = best(lambda s=store: s.list_jobs())
            assert len(got) == args.jobs and all(len(r) == EVENTS_PER_JOB for r in got.values())
            assert len(rows) >= args.jobs
            print(f"| {label} | {t_pop:.1f} s | {t_read:.2f} s | {t_list:.3f} s |", flush=True)
            records = records or got
            reads[label] = t_read
            del got

        print(f"\n## P1: status of {args.jobs:,} jobs against merely decoding their records\n")
        print("Decoding is codec.decode_event over the stored bytes, in memory (no I/O); "
              "the ratios are to that time.\n")
        print("| what | time | ratio |\n| --- | --- | --- |")
        raw = raw_rows_sqlite(tmp / "full.sqlite3")
        for line in p1(records, raw, shared_sizes, reads):
            print(line, flush=True)
    finally:
        for _, store in stores:
            store.close()
        if cluster is not None:
            cluster.stop()
        for f in tmp.iterdir():
            f.unlink()
        tmp.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

