"""Scale benchmark (issue 27; a benchmark, not a test: nothing here asserts a time).

    python bench/bench_scale.py                          # SQLite and a throwaway PostgreSQL
    python bench/bench_scale.py --no-postgres            # SQLite only
    python bench/bench_scale.py --no-sqlite              # a throwaway PostgreSQL only
    python bench/bench_scale.py --live 1000 --finished 100000 --live 10000
    python bench/bench_scale.py --smoke                  # tiny sizes: does it run at all

For each store, each number of live jobs and each number of finished jobs, a store is
filled (in a child process, so that loading does not count in the peak RSS) and measured in
another child process:

- steady tick: ``Supervisor.tick()`` when nothing changed, CPU of this process (all threads)
  less the CPU the scheduler stand-in spent answering discover();
- 1 % ended: a tick in which 1 % of the live jobs' objects ended (each commits an outcome),
  and the cost per changed job: (that tick - a steady tick) / changed jobs;
- ``ls`` first page (``ls --all``: the newest 100 jobs, ``service.pages.ls_page``), and
  ``status JOB`` (``Service.view``) of a finished and of a live job: wall time, median;
- serve's list refresh: the dashboard's first page (``service.listing.list_page``) with
  serve's held index, built in the background as serve does (issue 36): the first refresh
  (which does not wait for the index; whether it knew the held count), the time the index
  took to build, later refreshes (median), and the list's bytes per job (its rows' JSON);
- a /metrics scrape (the record's collector, as serve registers it, issue 36): the first of
  a cold collector (which reads every record), serve's first scrape after start (while the
  background build runs: the store's counts, issue 49; before, it waited for the build),
  the background build serve starts with and the first scrape after it, later ones when
  nothing changed (median), and one after 1 % of the live jobs ended; and the same scrapes
  of the collectors of before (commit fb9837c, bench/metrics_before.py), in the same
  process on the same store;
- P1 with snapshots: 10,000 jobs of 40 events (half of them finished), each with its
  snapshot, folded and projected through the snapshots, against decoding their records in
  memory and against reading and decoding them (``read_many``);
- peak RSS of the measuring process.

The scheduler is **StandInScheduler**, an in-process stand-in for this benchmark only: it
answers discover() from a dict of its objects (no Slurm, no processes), so a tick's cost
is dispatch's own.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# DISPATCH_BENCH_SRC: measure another tree's code (--ticks --before DIR) with this bench.
sys.path[:0] = [os.environ.get("DISPATCH_BENCH_SRC", str(ROOT / "src")), str(ROOT)]

from dispatch.backends.base import ChangeJournal, Submission  # noqa: E402
from dispatch.core import events as ev  # noqa: E402
from dispatch.core.codec import decode_event, encode_event  # noqa: E402
from dispatch.core.model import (  # noqa: E402
    Cause,
    CauseKind,
    Discovery,
    Execution,
    ObjectReport,
    State,
)
from dispatch.core.policy import Declarations  # noqa: E402
from dispatch.core.spec import JobSpec  # noqa: E402
from dispatch.core.status import project  # noqa: E402
from dispatch.stores.base import RecordStore, sort_key_us  # noqa: E402
from dispatch.stores.select import open_store  # noqa: E402

T0 = datetime(2026, 1, 1, tzinfo=UTC)
BACKEND = "local"  # the name the jobs carry; every name is answered by the stand-in


class StandInScheduler:
    """A stand-in scheduler for this benchmark only: objects live in a dict, discover()
    answers from it, submit() adds a running object. Counts the CPU it spends answering."""

    name = BACKEND

    def __init__(self, reports_changes: bool = True) -> None:
        self.objects: dict[str, ObjectReport] = {}
        self.cpu = 0.0
        self.n = 0
        # Reports what changed since its previous look (Discovery.changes); False: the
        # compare-everything path, for the ratio old/new in one process.
        self.reports_changes = reports_changes
        self.journal = ChangeJournal()

    def _changed(self, ref: str) -> None:
        self.journal.note(ref, self.objects[ref].token)

    def declarations(self) -> Declarations:
        return Declarations(backend=BACKEND)

    def validate(self, spec: JobSpec) -> None:
        return None

    def ready(self) -> None:
        return None

    def submit(self, submission: Submission) -> str:
        self.n += 1
        ref = f"obj{self.n}"
        self.objects[ref] = running(ref, f"{submission.job_id}.{submission.number}")
        self._changed(ref)
        return ref

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        start = time.thread_time()
        wanted = set(refs)
        objs = tuple(o for r, o in self.objects.items() if r in wanted)
        changes = self.journal.take() if self.reports_changes else None
        self.cpu += time.thread_time() - start
        return Discovery(at=datetime.now(UTC), objects=objs, changes=changes)

    def end(self, ref: str) -> None:
        o = self.objects[ref]
        now = datetime.now(UTC)
        done = Cause(kind=CauseKind.NONE, at=now)
        self.objects[ref] = ObjectReport(
            ref=ref, token=o.token, state=State.SUCCEEDED, cause=done,
            executions=(Execution(index=0, started_at=T0, ended_at=now, cause=done),))
        self._changed(ref)

    def stop(self, ref: str) -> None:
        self.end(ref)

    def cancel(self, ref: str) -> None:
        self.end(ref)

    def open_gate(self, ref: str) -> None:
        return None

    def logs(self, ref: str) -> Sequence[Any]:
        return []

    def close(self) -> None:
        return None


def running(ref: str, token: str) -> ObjectReport:
    return ObjectReport(ref=ref, token=token, state=State.RUNNING,
                        cause=Cause(kind=CauseKind.NONE),
                        executions=(Execution(index=0, started_at=T0),))


def created(job_id: str, i: int) -> ev.JobCreated:
    return ev.JobCreated(
        seq=1, at=T0 + timedelta(seconds=i), job_id=job_id,
        spec=JobSpec(name=f"sweep-{i % 1000}", command=("python", "train.py", "--lr", "3e-4"),
                     backend=BACKEND, nodes=1),
        declarations=Declarations(backend=BACKEND))


# ---- filling a store ------------------------------------------------------------------

def fill(url: str, live: int, finished: int) -> None:
    """``finished`` jobs (created, outcome) written in bulk, then ``live`` jobs created."""
    with open_store(url) as store:
        bulk_finished(store, finished)
        for start in range(0, live, 5000):
            store.create_many([created(f"live{i:07d}", finished + i)
                               for i in range(start, min(live, start + 5000))])


def bulk_finished(store: RecordStore, n: int) -> None:
    """Finished jobs inserted as the store would hold them, in large transactions (loading
    a million records one append at a time is not what this benchmark measures)."""
    pg = type(store).__name__ == "PostgresStore"
    jobs_t, events_t, mark = (("dispatch_jobs", "dispatch_events", "%s") if pg
                              else ("jobs", "events", "?"))
    cols = "job_id, name, backend, created_at, created_us, version, terminal, scope, outcome"
    jobs_sql = (f"INSERT INTO {jobs_t} ({cols}) VALUES ({', '.join([mark] * 9)})")
    events_sql = f"INSERT INTO {events_t} (job_id, seq, body) VALUES ({mark}, {mark}, {mark})"
    for start in range(0, n, 20000):
        jobs, events = [], []
        for i in range(start, min(n, start + 20000)):
            c = created(f"done{i:07d}", i)
            end = ev.OutcomeCommitted(seq=2, at=c.at, state=State.SUCCEEDED,
                                      cause=Cause(kind=CauseKind.NONE))
            jobs.append((c.job_id, c.spec.name, BACKEND, c.at.isoformat(), sort_key_us(c.at),
                         2, True if pg else 1, BACKEND, "succeeded"))
            for e in (c, end):
                body = encode_event(e)
                events.append((c.job_id, e.seq, body.decode() if pg else body))
        if pg:
            with store._db.cursor() as cur, store._db.transaction():  # type: ignore[attr-defined]
                cur.executemany(jobs_sql, jobs)
                cur.executemany(events_sql, events)
        else:
            c_ = store._conn  # type: ignore[attr-defined]
            c_.execute("BEGIN IMMEDIATE")
            c_.executemany(jobs_sql, jobs)
            c_.executemany(events_sql, events)
            c_.execute("COMMIT")


# ---- measuring ------------------------------------------------------------------------

def rss_now() -> int:
    """This process's resident set now, in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def cpu_of_tick(sup: Any, standin: StandInScheduler) -> tuple[float, int]:
    before_sched = standin.cpu
    start = time.process_time()
    report = sup.tick()
    cpu = time.process_time() - start - (standin.cpu - before_sched)
    return cpu, report.appended


def wall(fn: Any, n: int = 7) -> float:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def measure(url: str, live: int) -> dict[str, Any]:

    from dispatch.service import Service
    from dispatch.service.held import HeldIndex
    from dispatch.service.listing import ListRequest, list_page
    from dispatch.service.pages import ls_page
    from dispatch.supervise.loop import Supervisor
    from dispatch.support.clock import utcnow

    standin = StandInScheduler()
    out: dict[str, Any] = {}
    with open_store(url) as store:
        gc.collect()
        rss_before = rss_now()
        sup = Supervisor(store, lambda name: standin, name="bench")  # type: ignore[arg-type]
        for _ in range(3):  # submit, bind, see running: then nothing changes
            sup.tick()
        gc.collect()
        # What the supervisor holds per live job (its folds, quiet answers; the stand-in's
        # objects too): the growth of the resident set over the first ticks.
        out["held_bytes_per_job"] = (rss_now() - rss_before) / live
        refs = list(standin.objects)
        changed = max(1, live // 100)
        # The old path (the stand-in reports no changes: every job's objects compared) and
        # the new one, in this process: 1 % of the objects end in each, different ones.
        for mode, reports in (("before_", False), ("", True)):
            standin.reports_changes = reports
            sup.tick()  # the first look of a mode compares everything
            steady = []
            for _ in range(5):
                cpu, appended = cpu_of_tick(sup, standin)
                assert appended == 0, f"a steady tick appended {appended} events"
                steady.append(cpu)
            out[f"{mode}steady_ms"] = statistics.median(steady) * 1000
            ending, refs = refs[:changed], refs[changed:]
            for ref in ending:
                standin.end(ref)
            cpu, appended = cpu_of_tick(sup, standin)
            out[f"{mode}ended_ms"] = cpu * 1000
            out[f"{mode}per_changed_us"] = (cpu - statistics.median(steady)) / changed * 1e6
        out["changed"] = changed
        service = Service(store, held_index=HeldIndex())  # as serve makes it (http/app.py)
        service.backends = lambda name: standin  # type: ignore[assignment,method-assign]
        out["ls_ms"] = wall(lambda: ls_page(service, finished=True, limit=100)) * 1000
        done = store.query_jobs(__import__("dispatch.stores.query", fromlist=["JobQuery"])
                                .JobQuery(terminal=True, limit=1, descending=True))
        if done:
            out["status_done_ms"] = wall(lambda: service.view(done[0].job_id)) * 1000
        live_id = sup.live.folded and next(iter(sup.live.folded))
        if live_id:
            out["status_live_ms"] = wall(lambda: service.view(live_id)) * 1000
        # As serve does (http/app.py): the held index is built in the background from the
        # start, and the first refresh does not wait for it (issue 36).
        index = HeldIndex()
        service = Service(store, held_index=index)
        service.backends = lambda name: standin  # type: ignore[assignment,method-assign]
        built = time.perf_counter()
        warm = index.warm(lambda: open_store(url), utcnow)
        first: dict[str, Any] = {}
        out["serve_first_ms"] = wall(lambda: first.update(
            list_page(service, ListRequest())), 1) * 1000
        out["serve_first_held"] = first["held_count"]  # None: not known yet (issue 49)
        warm.join()
        out["held_index_s"] = time.perf_counter() - built
        out["serve_list_ms"] = wall(lambda: list_page(service, ListRequest()), 3) * 1000
        page = list_page(service, ListRequest())
        out["row_bytes"] = len(json.dumps(page["jobs"]).encode()) / max(1, len(page["jobs"]))
        out["held_count"] = page["held_count"]
        out.update(scrapes(url, standin, sup))
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out


def scrapes(url: str, standin: StandInScheduler, sup: Any) -> dict[str, Any]:
    """/metrics as serve scrapes it (issue 36), and the collectors of before (commit fb9837c,
    bench/metrics_before.py) in the same process on the same store."""
    from bench.metrics_before import GoodputCollector as GoodputBefore
    from bench.metrics_before import RecordCollector as RecordBefore
    from prometheus_client import CollectorRegistry, generate_latest

    from dispatch.backends.registry import Backends
    from dispatch.http.metrics import RecordCollector
    from dispatch.service import Service

    def opened() -> Any:
        return Service(open_store(url), Backends(lambda name: standin))  # type: ignore[arg-type,return-value]

    def registry_of(*collectors: Any) -> Any:
        registry = CollectorRegistry(auto_describe=False)
        for c in collectors:
            registry.register(c)
        return registry

    out: dict[str, Any] = {}
    # the first scrape of a cold collector: every record read once
    cold = registry_of(RecordCollector(opened))
    out["scrape_first_ms"] = wall(lambda: generate_latest(cold), 1) * 1000
    # as serve starts: the totals built in the background and a scrape at once (issue 49:
    # it answers the store's counts, not waiting for them), then the first after the build
    collector = RecordCollector(opened)
    start = time.perf_counter()
    build = collector.warm()
    now = registry_of(collector)
    at_start: list[bytes] = []
    out["scrape_at_start_ms"] = wall(lambda: at_start.append(generate_latest(now)), 1) * 1000
    out["at_start_ready"] = b"dispatch_record_totals_ready 1.0" in at_start[0]
    build.join()
    out["warm_s"] = time.perf_counter() - start
    out["scrape_after_warm_ms"] = wall(lambda: generate_latest(now), 1) * 1000
    out["scrape_ms"] = wall(lambda: generate_latest(now), 5) * 1000
    before = registry_of(RecordBefore(opened), GoodputBefore(opened))
    out["before_first_ms"] = wall(lambda: generate_latest(before), 1) * 1000
    out["before_ms"] = wall(lambda: generate_latest(before), 3) * 1000
    # 1 % of the live jobs end (a tick commits their outcomes), then one scrape each
    refs = [r for r, o in standin.objects.items() if o.state is State.RUNNING]
    for ref in refs[:max(1, len(refs) // 100)]:
        standin.end(ref)
    sup.tick()
    out["scrape_changed_ms"] = wall(lambda: generate_latest(now), 1) * 1000
    out["before_changed_ms"] = wall(lambda: generate_latest(before), 1) * 1000
    out["scrape_bytes"] = len(generate_latest(now))
    return out


def p1(url: str, jobs: int) -> dict[str, Any]:
    """P1 with snapshots: fold + project through the snapshots vs decoding the records."""
    from bench.bench_store import created as rich_created
    from bench.bench_store import story

    from dispatch.stores import snapshot

    with open_store(url) as store:
        ids = [f"p1-{i:06d}" for i in range(jobs)]
        store.create_many([rich_created(j, i) for i, j in enumerate(ids)])
        for i, j in enumerate(ids):
            store.append(j, story(j, i), 1)
        snapshot.fold_with_snapshots(store, ids, T0)  # writes them (due at the outcome / K)
        bodies = store.read_many(ids)
        raw = [(j, e.seq, encode_event(e)) for j in ids for e in bodies[j]]

        def decode_only() -> Any:
            return [decode_event(body, job_id=j, seq=seq) for j, seq, body in raw]

        def through_snapshots() -> Any:
            folded, _ = snapshot.fold_with_snapshots(store, ids, T0)
            return [project(job, None, T0) for job in folded]

        # Interleaved, best of 5 each: this VM runs fast and slow for seconds at a time, and
        # three runs of one after three of the other measured the machine, not the code.
        runs: dict[str, list[float]] = {"d": [], "r": [], "s": []}
        for _ in range(5):
            runs["d"].append(best(decode_only, 1))
            runs["r"].append(best(lambda: store.read_many(ids), 1))
            runs["s"].append(best(through_snapshots, 1))
        d, r, s = (min(runs[k]) for k in "drs")
    return {"decode_s": d, "read_s": r, "snap_s": s, "ratio": s / d, "ratio_read": s / r}


def best(fn: Any, repeat: int = 3) -> float:
    """Best of ``repeat``, as bench_store.py measures P1: what earlier steps keep is frozen
    out of the cyclic GC, so each step pays for the objects it makes."""
    times = []
    for _ in range(repeat):
        gc.collect()
        gc.freeze()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


# ---- driver ---------------------------------------------------------------------------

def child(args: list[str]) -> dict[str, Any]:
    cmd = [sys.executable, __file__, *args]
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1]) if res.stdout.strip() else {}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--live", type=int, action="append")
    ap.add_argument("--finished", type=int, action="append")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--no-sqlite", action="store_true")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--p1-jobs", type=int, default=10_000)  # P1 is defined at 10,000
    ap.add_argument("--fill", nargs=3)  # url live finished (a child)
    ap.add_argument("--measure", nargs=2)  # url live (a child)
    ap.add_argument("--p1", nargs=2)  # url jobs (a child)
    ap.add_argument("--local", action="store_true")  # the local backend's ticks only
    ap.add_argument("--nofile", type=int, default=1 << 20)  # 0: the machine's own limit
    ap.add_argument("--measure-local", nargs=4)  # url live root nofile (a child)
    ap.add_argument("--ticks", action="store_true")  # the 1 % ended tick only (scale_ticks)
    ap.add_argument("--before")  # --ticks: also measure the code under this tree's src/
    ap.add_argument("--fill-running", nargs=4)  # url live finished objects (a child)
    ap.add_argument("--measure-ticks", nargs=3)  # url live objects (a child)
    a = ap.parse_args()
    if a.fill_running or a.measure_ticks:
        from bench import scale_ticks

        me = sys.modules[__name__]
        if a.fill_running:
            u, n, f, o = a.fill_running
            scale_ticks.fill_running(me, u, int(n), int(f), o)
        else:
            u, n, o = a.measure_ticks
            print(json.dumps(scale_ticks.measure_ticks(me, u, int(n), o)))
        return
    if a.measure_local:
        from bench.scale_local import measure_local

        u, n, r, nofile = a.measure_local
        print(json.dumps(measure_local(u, int(n), r, int(nofile))))
        return
    if a.fill:
        fill(a.fill[0], int(a.fill[1]), int(a.fill[2]))
        return
    if a.measure:
        print(json.dumps(measure(a.measure[0], int(a.measure[1]))))
        return
    if a.p1:
        print(json.dumps(p1(a.p1[0], int(a.p1[1]))))
        return
    lives = a.live or ([20, 200] if a.smoke else [1000, 10000])
    finisheds = a.finished or ([100] if a.smoke else [100_000])
    p1_jobs = 50 if a.smoke else a.p1_jobs
    stores: list[tuple[str, Any]] = [] if a.no_sqlite else [("SQLite", None)]
    cluster = None
    if not a.no_postgres:
        from tests.conftest_pg import ThrowawayPostgres  # durable: fsync on

        cluster = ThrowawayPostgres(fast=False).start()
        stores.append(("PostgreSQL", cluster))
    print(f"bench_scale on {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    if a.ticks:
        from bench.scale_ticks import ticks_table

        try:
            ticks_table(Path(__file__), stores, lives, finisheds, a.before)
        finally:
            if cluster is not None:
                cluster.stop()
        return
    if a.local:
        try:
            local_table(stores, lives, finisheds, a.nofile)
        finally:
            if cluster is not None:
                cluster.stop()
        return
    print("| store | live | finished | steady tick CPU | 1% ended tick | per changed job "
          "| ls first page | status (finished) | status (live) | serve list (first) "
          "| serve list | held count at first refresh | held index built | list row "
          "| /metrics (first, cold) | /metrics at serve start (totals ready?) "
          "| /metrics totals built (background) | /metrics (first after built) | /metrics "
          "| /metrics after 1% ended | before: /metrics (first) | before: /metrics "
          "| before: after 1% ended | peak RSS | held per live job |")
    print("|---" * 25 + "|")
    try:
        for store_name, pg in stores:
            for finished in finisheds:
                for live in lives:
                    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
                        url = (f"sqlite://{tmp}/r.sqlite3" if pg is None
                               else pg.new_database())
                        child(["--fill", url, str(live), str(finished)])
                        r = child(["--measure", url, str(live)])
                    print(f"| {store_name} | {live:,} | {finished:,} | {r['steady_ms']:.1f} ms "
                          f"(before: {r['before_steady_ms']:.1f} ms, "
                          f"{r['before_steady_ms'] / r['steady_ms']:.1f}x) "
                          f"| {r['ended_ms']:.1f} ms ({r['changed']} ended; before: "
                          f"{r['before_ended_ms']:.1f} ms, "
                          f"{r['before_ended_ms'] / r['ended_ms']:.1f}x) "
                          f"| {r['per_changed_us']:.0f} µs (before: "
                          f"{r['before_per_changed_us']:.0f} µs) | {r['ls_ms']:.1f} ms "
                          f"| {r.get('status_done_ms', 0):.1f} ms "
                          f"| {r.get('status_live_ms', 0):.1f} ms | {r['serve_first_ms']:.0f} ms "
                          f"| {r['serve_list_ms']:.0f} ms "
                          f"| {r['serve_first_held']} "
                          f"| {r['held_index_s']:.2f} s | {r['row_bytes']:.0f} B/job "
                          f"| {r['scrape_first_ms']:.0f} ms "
                          f"| {r['scrape_at_start_ms']:.1f} ms ({r['at_start_ready']}) "
                          f"| {r['warm_s']:.2f} s "
                          f"| {r['scrape_after_warm_ms']:.1f} ms | {r['scrape_ms']:.1f} ms "
                          f"| {r['scrape_changed_ms']:.1f} ms | {r['before_first_ms']:.0f} ms "
                          f"| {r['before_ms']:.0f} ms | {r['before_changed_ms']:.0f} ms "
                          f"| {r['peak_rss_mb']:.0f} MB "
                          f"| {r['held_bytes_per_job']:,.0f} B |", flush=True)
            with tempfile.TemporaryDirectory(prefix="bench-scale-p1-") as tmp:
                url = f"sqlite://{tmp}/r.sqlite3" if pg is None else pg.new_database()
                r = child(["--p1", url, str(p1_jobs)])
            print(f"\nP1 with snapshots ({store_name}, {p1_jobs:,} jobs x 40 events): "
                  f"decoding the records (in memory) {r['decode_s']:.3f} s, reading and "
                  f"decoding them (read_many) {r['read_s']:.3f} s, status through the "
                  f"snapshots (read, fold on, project) {r['snap_s']:.3f} s = "
                  f"**{r['ratio']:.2f}x** decode, **{r['ratio_read']:.2f}x** read_many\n",
                  flush=True)
    finally:
        if cluster is not None:
            cluster.stop()


def local_table(stores: list[tuple[str, Any]], lives: list[int], finisheds: list[int],
                nofile: int) -> None:
    """The local backend reporting changes against a full look at every tick (scale_local)."""
    print("| store | live | finished | pidfds (unwatched) | steady tick CPU (its look) "
          "| before: steady tick (its look) | before / after | 1% ended tick "
          "| before: 1% ended | per changed job | runners SIGKILLed: tick (seen, full looks) "
          "| tick with the safety net's full look | peak RSS | held per live job |")
    print("|---" * 14 + "|")
    for store_name, pg in stores:
        for finished in finisheds:
            for live in lives:
                with tempfile.TemporaryDirectory(prefix="bench-scale-local-") as tmp:
                    url = f"sqlite://{tmp}/r.sqlite3" if pg is None else pg.new_database()
                    child(["--fill", url, str(live), str(finished)])
                    r = child(["--measure-local", url, str(live), f"{tmp}/local",
                               str(nofile)])
                    local_row(store_name, live, finished, r)  # before the tree's removal


def local_row(store_name: str, live: int, finished: int, r: dict[str, Any]) -> None:
    """One row of local_table."""
    print(f"| {store_name} | {live:,} | {finished:,} | {r['watched']:,} "
          f"({r['unwatched']:,}) | {r['steady_ms']:.1f} ms ({r['look_ms']:.1f} ms) "
          f"| {r['before_steady_ms']:.1f} ms ({r['before_look_ms']:.1f} ms) "
          f"| **{r['before_steady_ms'] / r['steady_ms']:.1f}x** "
          f"| {r['ended_ms']:.1f} ms ({r['changed']:,} ended) "
          f"| {r['before_ended_ms']:.1f} ms | {r['per_changed_us']:.0f} µs "
          f"(before: {r['before_per_changed_us']:.0f} µs) "
          f"| {r['killed_ms']:.1f} ms ({r['killed_seen']} of {r['killed']}, "
          f"{r['killed_full_looks']}) | {r['full_look_tick_ms']:.0f} ms "
          f"| {r['peak_rss_mb']:.0f} MB | {r['held_bytes_per_job']:,.0f} B |",
          flush=True)


if __name__ == "__main__":
    main()
