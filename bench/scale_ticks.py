"""bench_scale.py's tick part (issue 49): the tick in which 1 % of the live jobs ended, each
committing its outcome, against a steady tick, with the stand-in scheduler reporting changes.

    python bench/bench_scale.py --ticks --no-postgres --live 10000 --live 100000
    python bench/bench_scale.py --ticks --live 10000 --before /tmp/endtick-before

The store is filled once per row with ``live`` running jobs (created, submitted, bound and
seen running by a real supervisor ticking against the stand-in, with the store's durability
off for that fill only: SQLite synchronous=OFF, PostgreSQL synchronous_commit off in the
filling session; none of it is measured). Each measurement then runs in a process of its own
on a copy of that store (SQLite: the file copied; PostgreSQL: a database made from it as a
template), with full durability: a first tick (the first look, every job folded), two more,
then ROUNDS rounds of five steady ticks (median) and one tick after 1 % of the objects
ended (different objects each round). CPU is the process's (all threads) less the stand-in's
discover(); "writes" is the CPU spent inside the store's append calls of that tick.

``--before DIR``: each row is measured by the code under DIR/src too (a ``git archive`` of the
tree before), one after the other on copies of the same store, this bench's own code driving
both (it uses only Supervisor and the stores' public calls).
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROUNDS = 3


def fill_running(b: Any, url: str, live: int, finished: int, objects: str) -> None:
    """``live`` running jobs (and ``finished`` finished ones); the stand-in's objects are
    saved to ``objects`` (ref -> token) for the measuring processes. ``b``: bench_scale."""
    from dispatch.stores import sqlite as sqlite_store
    from dispatch.supervise.loop import Supervisor

    b.fill(url, live, finished)
    sqlite_store.SYNCHRONOUS = "OFF"  # the fill only: not measured
    standin = b.StandInScheduler()
    with b.open_store(url) as store:
        if hasattr(store, "_db"):
            store._db.execute("SET synchronous_commit TO off")
        sup = Supervisor(store, lambda name: standin, name="bench")
        for _ in range(3):  # submit, bind, see running
            sup.tick()
        report = sup.tick()
        assert report.appended == 0, f"the fill's jobs are not all running: {report}"
    Path(objects).write_text(json.dumps({r: o.token for r, o in standin.objects.items()}))


def copy_store(url: str, pg: Any, into: str) -> str:
    """A copy of the filled store for one measuring process."""
    if url.startswith("sqlite://"):
        src = Path(url.removeprefix("sqlite://"))
        dst = Path(into) / "r.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            if Path(f"{src}{suffix}").exists():
                shutil.copyfile(f"{src}{suffix}", f"{dst}{suffix}")
        return f"sqlite://{dst}"
    import psycopg

    name = "copy_" + os.urandom(6).hex()
    with psycopg.connect(pg.url(), autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{url.rsplit("/", 1)[1]}"')
    return str(pg.url(name))


def measure_ticks(b: Any, url: str, live: int, objects: str) -> dict[str, Any]:
    import dispatch
    from dispatch.supervise.loop import Supervisor

    standin = b.StandInScheduler()
    saved = json.loads(Path(objects).read_text())
    standin.objects = {r: b.running(r, t) for r, t in saved.items()}
    standin.n = len(saved)
    out: dict[str, Any] = {"code": str(Path(dispatch.__file__).parent.parent)}
    with b.open_store(url) as store:
        out["batched"] = hasattr(store, "append_many")
        writes = [0.0]
        for name in ("append", "append_many"):
            if hasattr(store, name):
                setattr(store, name, _timed(getattr(store, name), writes))
        sup = Supervisor(store, lambda name: standin, name="bench")
        collector = CollectorTime()
        start = time.perf_counter()
        sup.tick()  # the first look: every job folded and compared
        out["first_tick_s"] = time.perf_counter() - start
        out["first_tick_gc_ms"] = collector.cpu * 1000
        for _ in range(2):
            sup.tick()
        refs = sorted(standin.objects)
        changed = max(1, live // 100)
        rounds = []
        for r in range(ROUNDS):
            steady = [_tick(sup, standin, writes)[0] for _ in range(5)]
            for ref in refs[r * changed:(r + 1) * changed]:
                standin.end(ref)
            gc_before, full_before = collector.cpu, collector.full
            cpu, wall, wrote, appended = _tick(sup, standin, writes)
            assert appended >= changed, f"the tick appended {appended} events"
            rounds.append({"steady_ms": statistics.median(steady) * 1000,
                           "ended_ms": cpu * 1000, "ended_wall_ms": wall * 1000,
                           "writes_ms": wrote * 1000,
                           "gc_ms": (collector.cpu - gc_before) * 1000,
                           "gc_full": collector.full - full_before})
        out["changed"] = changed
        out["rounds"] = rounds
    return out


def _timed(fn: Any, acc: list[float]) -> Any:
    def timed(*args: Any, **kwargs: Any) -> Any:
        start = time.process_time()
        try:
            return fn(*args, **kwargs)
        finally:
            acc[0] += time.process_time() - start
    return timed


class CollectorTime:
    """CPU spent in the cyclic garbage collector's collections of the oldest generation
    (gc.callbacks), which scan every object the process keeps: the folded live jobs too."""

    def __init__(self) -> None:
        self.cpu = 0.0
        self.full = 0
        self._start = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._start = time.process_time()
        else:
            self.cpu += time.process_time() - self._start
            self.full += 1


def _tick(sup: Any, standin: Any, writes: list[float]) -> tuple[float, float, float, int]:
    """(CPU less the stand-in's, wall, CPU in the store's appends, events appended)."""
    before_sched, before_writes = standin.cpu, writes[0]
    wall, start = time.perf_counter(), time.process_time()
    report = sup.tick()
    cpu = time.process_time() - start - (standin.cpu - before_sched)
    return cpu, time.perf_counter() - wall, writes[0] - before_writes, report.appended


def child(bench: Path, args: list[str], src: str | None = None) -> dict[str, Any]:
    env = dict(os.environ)
    if src is not None:
        env["DISPATCH_BENCH_SRC"] = src
    res = subprocess.run([sys.executable, str(bench), *args], capture_output=True, text=True,
                         check=False, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{res.stderr[-3000:]}")
    lines = res.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def ticks_table(bench: Path, stores: list[tuple[str, Any]], lives: list[int],
                finisheds: list[int], before: str | None) -> None:
    import tempfile

    print("| store | live | tree (code) | load before | first tick (wall) "
          "| steady tick CPU (median of rounds) | 1 % ended: tick CPU (each round) "
          "| of it in the store's appends | of it in full collections (count) | tick wall "
          "| per changed job |")
    print("|---" * 11 + "|")
    trees = ([("before", f"{before}/src")] if before else []) + [("this", None)]
    for store_name, pg in stores:
        for finished in finisheds:
            for live in lives:
                with tempfile.TemporaryDirectory(prefix="bench-ticks-") as tmp:
                    url = f"sqlite://{tmp}/filled.sqlite3" if pg is None else pg.new_database()
                    objects = f"{tmp}/objects.json"
                    child(bench, ["--fill-running", url, str(live), str(finished), objects])
                    for tree, src in trees:
                        with tempfile.TemporaryDirectory(prefix="bench-ticks-copy-") as cp:
                            load = Path("/proc/loadavg").read_text().split()[0]
                            copy = copy_store(url, pg, cp)
                            r = child(bench, ["--measure-ticks", copy, str(live), objects], src)
                        _row(store_name, live, tree, load, r)


def _row(store_name: str, live: int, tree: str, load: str, r: dict[str, Any]) -> None:
    rounds = r["rounds"]
    steady = statistics.median(x["steady_ms"] for x in rounds)

    def each(key: str) -> str:
        return ", ".join(f"{x[key]:.0f}" for x in rounds) + " ms"

    gc_each = ", ".join(f"{x.get('gc_ms', 0):.0f} ({x.get('gc_full', 0)})" for x in rounds) + " ms"
    per = (statistics.median(x["ended_ms"] for x in rounds) - steady) / r["changed"] * 1000
    how = "batched" if r["batched"] else "one append a job"
    print(f"| {store_name} | {live:,} | {tree} ({how}) | {load} | {r['first_tick_s']:.1f} s "
          f"| {steady:.1f} ms | {each('ended_ms')} ({r['changed']:,} ended) "
          f"| {each('writes_ms')} | {gc_each} | {each('ended_wall_ms')} | {per:.0f} µs |",
          flush=True)
