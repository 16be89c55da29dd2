"""serve and a supervisor started with many live jobs (issue 49; a benchmark, not a test:
nothing here asserts a time).

    python bench/bench_serve_start.py --live 100000                 # this tree
    python bench/bench_serve_start.py --live 100000 --before DIR    # and another tree, the
                                                                    # same store, one after
                                                                    # the other
    python bench/bench_serve_start.py --smoke                       # does it run at all
    python bench/bench_serve_start.py --live 100000 --postgres      # and a throwaway
                                                                    # PostgreSQL (held, tick,
                                                                    # serve + supervisor)

A SQLite store is filled once with ``--finished`` finished jobs and ``--live`` live ones,
each live record as a supervisor leaves a running job (created, submission intended, bound,
execution started: 4 events, no snapshot), written in bulk as the store holds them. Each
tree is measured on its own copy of that store, in child processes (so that filling does not
count in the peak RSS):

- **serve's start** (one process), as ``http/app.make_server`` starts it: its background
  builds (the held index, the /metrics totals), the first list refresh and the first /metrics
  scrape taken at once, when each build was done (seconds since the start), a list and a
  scrape once both are, a scrape when nothing changed (median), and one after 1 % of the live
  jobs ended (their outcomes appended through another connection); the resident set before
  the start and once both builds are done, per live job, and the peak;
- **alone** (one process each): the held index's first build, and a cold collector's first
  scrape (``RecordCollector`` never warmed: its first ``collect`` reads every record, or
  since issue 49 takes the parts the store keeps), CPU and wall, with no part kept (the
  first ever) and then, in another process on the same copy, with the parts the first one
  left (a restarted serve or collector); and a supervisor's first tick over the live jobs
  (``Supervisor.tick`` with bench_scale's stand-in scheduler answering every job's object
  as running: it folds every live record and decides nothing), CPU and wall, and its
  process's peak RSS.
- **serve + supervisor** (one process): serve's start as above and, beside its background
  builds, a supervisor's first tick over the same live jobs (sharing the held index's folded
  jobs where the tree can, as ``dispatch serve`` supervising in-process does): when the tick
  and all were done, the process's CPU, its resident set per live job and its peak.

With ``--postgres`` a throwaway PostgreSQL (fsync on) is filled with the same jobs and the
held index, the tick and serve + supervisor are measured there too.

Wall times on a shared machine are noisy; CPU (this process, all threads) less so. The store
is filled by the ``--before`` tree when one is given (an older build refuses a newer schema;
this tree migrates its copy when it opens it).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def tree_path(src: str | None) -> None:
    """Import dispatch from ``src`` (another tree's root), else from this one."""
    base = Path(src) if src else ROOT
    # bench_scale puts its own tree first unless told which (before this was set, the parts
    # that import it first, held, cold and tick, ran this tree's code for "before" too).
    os.environ["DISPATCH_BENCH_SRC"] = str(base / "src")
    sys.path[:0] = [str(base / "src"), str(ROOT), str(ROOT / "bench")]


def rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


# ---- filling ----------------------------------------------------------------------------

def live_id(i: int) -> str:
    """Live job ``i``'s id: 10 hex digits that look random, as ``new_job_id`` makes them
    (ids in creation order would lie in the tables' key order, which no store of real jobs
    does: reading them in creation order then costs far less than it does for real)."""
    return hashlib.blake2b(i.to_bytes(8, "big"), digest_size=5).hexdigest()


def running_record(i: int, finished: int) -> tuple[Any, list[Any]]:
    """Live job ``i``'s record as a supervisor leaves a running job: created, submission
    intended and bound, execution started (its created event, its 4 events)."""
    from bench_scale import created

    from dispatch.core import events as ev

    c = created(live_id(i), finished + i)
    at = c.at + timedelta(minutes=1)
    holder = ev.Holder(host="bench", boot_id="bench", pid=1, start_ticks=1)
    return c, [c,
               ev.SubmissionIntended(seq=2, at=at, submission=1, token=f"{c.job_id}.1",
                                     holder=holder),
               ev.SubmissionBound(seq=3, at=at, submission=1, ref=f"obj-{c.job_id}"),
               ev.ExecutionStarted(seq=4, at=at, submission=1, execution=0, started=c.at)]


def fill(path: str, live: int, finished: int) -> None:
    from bench_scale import BACKEND, bulk_finished

    from dispatch.core.codec import encode_event
    from dispatch.stores.base import sort_key_us
    from dispatch.stores.sqlite import SQLiteStore

    with SQLiteStore(Path(path)) as store:
        bulk_finished(store, finished)
        conn = store._conn
        mark = conn.execute("SELECT coalesce(max(changed), 0) FROM jobs").fetchone()[0]
        for start in range(0, live, 20000):
            jobs, events = [], []
            for i in range(start, min(live, start + 20000)):
                c, record = running_record(i, finished)
                mark += 1
                jobs.append((c.job_id, c.spec.name, BACKEND, c.at.isoformat(),
                             sort_key_us(c.at), 4, 0, BACKEND, mark))
                events += [(c.job_id, e.seq, encode_event(e)) for e in record]
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany("INSERT INTO jobs (job_id, name, backend, created_at, created_us,"
                             " version, terminal, scope, changed) VALUES (?,?,?,?,?,?,?,?,?)",
                             jobs)
            conn.executemany("INSERT INTO events (job_id, seq, body) VALUES (?,?,?)", events)
            conn.execute("COMMIT")


def fill_pg(url: str, live: int, finished: int) -> None:
    """``fill`` on PostgreSQL: the same jobs and records, each batch's jobs stamped with its
    transaction's change mark as an append stamps them."""
    from bench_scale import BACKEND, bulk_finished

    from dispatch.core.codec import encode_event
    from dispatch.stores.base import sort_key_us
    from dispatch.stores.select import open_store

    with open_store(url) as store:
        bulk_finished(store, finished)
        db = store._db  # type: ignore[attr-defined]
        for start in range(0, live, 20000):
            jobs, events = [], []
            for i in range(start, min(live, start + 20000)):
                c, record = running_record(i, finished)
                jobs.append((c.job_id, c.spec.name, BACKEND, c.at.isoformat(),
                             sort_key_us(c.at), 4, False, BACKEND))
                events += [(c.job_id, e.seq, encode_event(e).decode()) for e in record]
            with db.cursor() as cur, db.transaction():
                cur.executemany("INSERT INTO dispatch_jobs (job_id, name, backend, created_at,"
                                " created_us, version, terminal, scope, changed) VALUES"
                                " (%s,%s,%s,%s,%s,%s,%s,%s,pg_current_xact_id())", jobs)
                cur.executemany("INSERT INTO dispatch_events (job_id, seq, body) VALUES"
                                " (%s,%s,%s)", events)


# ---- measuring --------------------------------------------------------------------------

def timed(fn: Any) -> tuple[Any, float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - wall, time.process_time() - cpu


def thread_named(name: str) -> threading.Thread | None:
    return next((t for t in threading.enumerate() if t.name == name), None)


def serve_start(path: str, live: int) -> dict[str, Any]:
    from prometheus_client import generate_latest

    from dispatch.core import events as ev
    from dispatch.core.model import Cause, CauseKind, State
    from dispatch.http.app import make_server
    from dispatch.http.auth import Tokens
    from dispatch.service.listing import ListRequest, list_page
    from dispatch.stores.sqlite import SQLiteStore

    out: dict[str, Any] = {}
    rss0 = rss_now()
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    server = make_server(f"sqlite://{path}", Tokens({}), loopback_bind=False)
    held_build, totals_build = thread_named("held-index"), thread_named("metrics-totals")

    def listed() -> dict[str, Any]:
        with server.service() as service:
            return list_page(service, ListRequest())

    first, out["list_first_s"], _ = timed(listed)
    out["list_first_held"] = first["held_count"]
    scraped, out["metrics_first_s"], _ = timed(lambda: generate_latest(server.registry))
    out["metrics_first_ready"] = b"dispatch_record_totals_ready 1.0" in scraped
    out["metrics_first_at_s"] = time.perf_counter() - t0
    if held_build is not None:
        held_build.join()
    out["held_built_s"] = time.perf_counter() - t0
    if totals_build is not None:
        totals_build.join()
    out["totals_built_s"] = time.perf_counter() - t0
    keeper = parts_writer(server.registry)
    if keeper is not None:  # the parts the build computed, written to the store's cache
        keeper.flush()
    out["parts_kept_s"] = time.perf_counter() - t0
    out["builds_cpu_s"] = time.process_time() - cpu0
    out["rss_built_per_job"] = (rss_now() - rss0) / live
    _, out["list_built_s"], _ = timed(listed)
    scraped, out["metrics_built_s"], _ = timed(lambda: generate_latest(server.registry))
    out["metrics_built_ready"] = b"dispatch_record_totals_ready 1.0" in scraped
    out["metrics_steady_s"] = statistics.median(
        timed(lambda: generate_latest(server.registry))[1] for _ in range(5))
    ending = [live_id(i) for i in range(0, live, 100)]  # 1 %
    now = datetime.now(UTC)
    with SQLiteStore(Path(path)) as writer:
        for job_id in ending:
            writer.append(job_id, [ev.OutcomeCommitted(
                seq=5, at=now, state=State.SUCCEEDED, cause=Cause(kind=CauseKind.NONE))], 4)
    _, out["metrics_ended_s"], out["metrics_ended_cpu_s"] = timed(
        lambda: generate_latest(server.registry))
    # the parts of the jobs that ended, written by the collector's own thread after the
    # scrape (issue 49): its CPU, apart (some of it may fall inside the scrape's window)
    out["ended_kept_cpu_s"] = timed(keeper.flush)[2] if keeper is not None else 0.0
    out["ended"] = len(ending)
    out["peak_rss_mb"] = peak_mb()
    return out


def parts_writer(registry: Any) -> Any:
    """The record collector's writer of cached parts (issue 49), if this tree has one."""
    for collector in list(registry._collector_to_names):
        if hasattr(collector, "parts_writer"):
            return collector.parts_writer
    return None


def alone(path: str, what: str) -> dict[str, Any]:
    from bench_scale import StandInScheduler
    from prometheus_client import CollectorRegistry, generate_latest

    from dispatch.backends.registry import Backends
    from dispatch.http.metrics import RecordCollector
    from dispatch.service import Service
    from dispatch.service.held import HeldIndex
    from dispatch.stores.select import open_store
    from dispatch.support.clock import utcnow

    out: dict[str, Any] = {}
    standin = StandInScheduler()
    url = store_url(path)
    if what == "held":
        with open_store(url) as store:
            index = HeldIndex()
            _, out["wall_s"], out["cpu_s"] = timed(lambda: index.live(store, utcnow()))
    elif what in ("cold", "cached"):
        registry = CollectorRegistry(auto_describe=False)
        registry.register(RecordCollector(
            lambda: Service(open_store(url), Backends(lambda n: standin))))
        _, out["wall_s"], out["cpu_s"] = timed(lambda: generate_latest(registry))
        writer = parts_writer(registry)  # the parts it computed, kept: wait, and time it
        out["kept_cpu_s"] = timed(writer.flush)[2] if writer is not None else 0.0
    elif what == "servetick":
        return serve_and_tick(url, standin)
    else:  # a supervisor's first tick
        from dispatch.supervise.loop import Supervisor

        with open_store(url) as store:
            answer_running(store, standin)
            sup = Supervisor(store, lambda name: standin, name="bench")  # type: ignore[arg-type]
            report, out["wall_s"], out["cpu_s"] = timed(sup.tick)
            out["appended"] = report.appended
    out["peak_rss_mb"] = peak_mb()
    return out


def store_url(path: str) -> str:
    return path if "://" in path else f"sqlite://{path}"


def answer_running(store: Any, standin: Any) -> None:
    """The stand-in scheduler answers every live job's object as running."""
    from bench_scale import running

    for row in store.list_jobs():
        if not row.terminal:
            ref = f"obj-{row.job_id}"
            standin.objects[ref] = running(ref, f"{row.job_id}.1")


def serve_and_tick(url: str, standin: Any) -> dict[str, Any]:
    """serve with an in-process supervisor, as ``dispatch serve`` runs by default: its
    background builds and, at once beside them, a supervisor's first tick over every live
    job (through the held index's shared folds where the tree has them, as
    http/server.py wires them). The process's CPU, the tick's wall time, its peak RSS."""
    from dispatch.http.app import make_server
    from dispatch.http.auth import Tokens
    from dispatch.stores.select import open_store
    from dispatch.supervise.loop import Supervisor

    out: dict[str, Any] = {}
    with open_store(url) as store:
        answer_running(store, standin)
        live = len(standin.objects)
        rss0 = rss_now()
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        server = make_server(url, Tokens({}), loopback_bind=False)
        builds = [thread_named("held-index"), thread_named("metrics-totals")]
        shared = getattr(server.held_index, "shared", None)
        kw = {"shared_folds": shared} if shared is not None else {}
        sup = Supervisor(store, lambda name: standin, name="bench", **kw)  # type: ignore[arg-type]
        report = sup.tick()
        out["tick_done_s"] = time.perf_counter() - t0
        out["appended"] = report.appended
        for t in builds:
            if t is not None:
                t.join()
        out["all_done_s"] = time.perf_counter() - t0
        out["cpu_s"] = time.process_time() - cpu0
        out["rss_per_job"] = (rss_now() - rss0) / live
        out["shared"] = shared is not None
    out["peak_rss_mb"] = peak_mb()
    return out


# ---- driver -----------------------------------------------------------------------------

def child(args: list[str], src: str | None) -> dict[str, Any]:
    cmd = [sys.executable, __file__, *args] + (["--src", src] if src else [])
    # bench_scale puts its own tree's src/ first on import unless told which: without
    # this, a child of another tree that imports it (the fill, every "alone" part) ran this
    # tree's dispatch (runs 14 to 19 in bench/RESULTS.md measured that)
    env = dict(os.environ, DISPATCH_BENCH_SRC=str(Path(src) / "src")) if src else None
    res = subprocess.run(cmd, capture_output=True, text=True, check=False, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def measure_tree(template: str, live: int, src: str | None, tmp: str) -> dict[str, Any]:
    r: dict[str, Any] = {}
    copy = f"{tmp}/copy.sqlite3"
    for part in ("serve", "held", "cold", "cached", "tick", "servetick"):
        if part != "cached":  # the cold collector's copy, with the parts it left
            shutil.copyfile(template, copy)
        args = ["--serve", copy, str(live)] if part == "serve" else ["--alone", copy, part]
        r[part] = child(args, src)
    os.remove(copy)
    return r


def measure_tree_pg(cluster: Any, live: int, src: str | None) -> dict[str, Any]:
    """The held index, a supervisor's first tick, and serve with a supervisor, each on its
    own copy (a database made from the filled one as its template)."""
    import psycopg

    r: dict[str, Any] = {}
    for part in ("held", "tick", "servetick"):
        with psycopg.connect(cluster.url(), autocommit=True) as admin:
            admin.execute("DROP DATABASE IF EXISTS benchcopy")
            admin.execute("CREATE DATABASE benchcopy TEMPLATE benchfilled")
        r[part] = child(["--alone", cluster.url("benchcopy"), part], src)
    return r


def served_with_tick(r: dict[str, Any]) -> str:
    st = r["servetick"]
    return (f"{st['tick_done_s']:.2f} s / {st['all_done_s']:.2f} s ({st['cpu_s']:.2f} s CPU"
            f"{', shared' if st['shared'] else ''}), {st['rss_per_job']:,.0f} B a job, "
            f"{st['peak_rss_mb']:.0f} MB")


def row(name: str, live: int, r: dict[str, Any]) -> str:
    s, h, c, k, t = r["serve"], r["held"], r["cold"], r["cached"], r["tick"]
    return (f"| {name} | {live:,} | {s['list_first_s'] * 1000:.0f} ms ({s['list_first_held']}) "
            f"| {s['metrics_first_s'] * 1000:.0f} ms ({s['metrics_first_ready']}) "
            f"| {s['held_built_s']:.2f} s | {s['totals_built_s']:.2f} s "
            f"| {s['builds_cpu_s']:.2f} s | {s['list_built_s'] * 1000:.0f} ms "
            f"| {s['metrics_built_s'] * 1000:.0f} ms | {s['metrics_steady_s'] * 1000:.0f} ms "
            f"| {s['metrics_ended_s'] * 1000:.0f} ms ({s['metrics_ended_cpu_s'] * 1000:.0f} ms "
            f"CPU; then {s.get('ended_kept_cpu_s', 0) * 1000:.0f} ms writing parts) "
            f"| {s['rss_built_per_job']:,.0f} B | {s['peak_rss_mb']:.0f} MB "
            f"| {h['wall_s']:.2f} s ({h['cpu_s']:.2f} s CPU), {h['peak_rss_mb']:.0f} MB "
            f"| {c['wall_s']:.2f} s ({c['cpu_s']:.2f} s CPU; then {c.get('kept_cpu_s', 0):.2f} s "
            f"writing parts) | {k['wall_s']:.2f} s ({k['cpu_s']:.2f} s CPU) "
            f"| {t['wall_s']:.2f} s ({t['cpu_s']:.2f} s CPU, {t['appended']} appended), "
            f"{t['peak_rss_mb']:.0f} MB | {served_with_tick(r)} |")


def row_pg(name: str, live: int, r: dict[str, Any]) -> str:
    h, t = r["held"], r["tick"]
    return (f"| {name} | {live:,} | {h['wall_s']:.2f} s ({h['cpu_s']:.2f} s CPU), "
            f"{h['peak_rss_mb']:.0f} MB | {t['wall_s']:.2f} s ({t['cpu_s']:.2f} s CPU, "
            f"{t['appended']} appended), {t['peak_rss_mb']:.0f} MB | {served_with_tick(r)} |")


def postgres_table(lives: list[int], finished: int, trees: list[tuple[str, str | None]]
                   ) -> None:
    import psycopg
    from tests.conftest_pg import ThrowawayPostgres  # durable: fsync on

    print("\nPostgreSQL (a throwaway cluster, fsync on)")
    print("| tree | live | held index alone, peak RSS | supervisor's first tick, its peak "
          "RSS | serve + supervisor: tick done / all done, RSS a live job, peak RSS |")
    print("|---" * 5 + "|")
    cluster = ThrowawayPostgres(fast=False).start()
    try:
        for live in lives:
            with psycopg.connect(cluster.url(), autocommit=True) as admin:
                admin.execute("DROP DATABASE IF EXISTS benchfilled")
                admin.execute("CREATE DATABASE benchfilled")
            # filled by the tree before when there is one: an older build refuses a newer schema
            before = next((src for name, src in trees if name == "before"), None)
            child(["--fill-pg", cluster.url("benchfilled"), str(live), str(finished)], before)
            for name, src in trees:
                print(row_pg(name, live, measure_tree_pg(cluster, live, src)), flush=True)
            print(f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        cluster.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--live", type=int, action="append")
    ap.add_argument("--finished", type=int, default=1000)
    ap.add_argument("--before", help="another tree's root, measured on the same store")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--src")  # a child: the tree to import dispatch from
    ap.add_argument("--fill", nargs=3)  # a child: path live finished
    ap.add_argument("--serve", nargs=2)  # a child: path live
    ap.add_argument("--alone", nargs=2)  # a child: path held|cold|tick|servetick
    ap.add_argument("--fill-pg", nargs=3)  # a child: url live finished
    ap.add_argument("--postgres", action="store_true", help="PostgreSQL too (held, tick)")
    ap.add_argument("--no-sqlite", action="store_true")
    a = ap.parse_args()
    tree_path(a.src)
    if a.fill:
        fill(a.fill[0], int(a.fill[1]), int(a.fill[2]))
        print("{}")
        return
    if a.fill_pg:
        fill_pg(a.fill_pg[0], int(a.fill_pg[1]), int(a.fill_pg[2]))
        print("{}")
        return
    if a.serve:
        print(json.dumps(serve_start(a.serve[0], int(a.serve[1]))))
        return
    if a.alone:
        print(json.dumps(alone(a.alone[0], a.alone[1])))
        return
    lives = a.live or ([200] if a.smoke else [10_000, 100_000])
    finished = 50 if a.smoke else a.finished
    print(f"bench_serve_start on {os.cpu_count()} CPUs, python {sys.version.split()[0]}, "
          f"load {os.getloadavg()[0]:.1f}, {finished:,} finished jobs")
    trees = [("this", None)] + ([("before", a.before)] if a.before else [])
    if not a.no_sqlite:
        print("| tree | live | first list (held count) | first /metrics (totals ready?) "
              "| held index built | totals built | CPU of both builds | list, built "
              "| /metrics, built | /metrics | /metrics after 1 % ended | RSS per live job "
              "(built) | peak RSS (serve) | held index alone, peak RSS | cold collector's "
              "first scrape | the same, parts left by the one before | supervisor's first "
              "tick, its peak RSS | serve + supervisor: tick done / all done, RSS a live "
              "job, peak RSS |")
        print("|---" * 18 + "|")
        for live in lives:
            with tempfile.TemporaryDirectory(prefix="bench-serve-start-") as tmp:
                template = f"{tmp}/r.sqlite3"
                child(["--fill", template, str(live), str(finished)], a.before)
                for name, src in trees:
                    print(row(name, live, measure_tree(template, live, src, tmp)), flush=True)
            print(f"(load {os.getloadavg()[0]:.1f})", flush=True)
    if a.postgres:
        postgres_table(lives, finished, trees)


if __name__ == "__main__":
    main()
