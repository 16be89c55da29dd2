"""/metrics on PostgreSQL (and SQLite): a cold collector's first scrape with no part kept and
with the parts a previous collector left, and a scrape after 1 % of the live jobs ended
(issue 49; a benchmark, not a test: nothing here asserts a time).

    python bench/bench_metrics_cache.py --live 10000 --live 100000 --before DIR

Each tree gets a store of its own, filled by its own code (bench_scale's ``fill``: 1,000
finished jobs, each live job its created event), on a throwaway PostgreSQL cluster (fsync
on) or, with ``--sqlite``, a SQLite file. Three child processes of that tree then measure
in turn, CPU of the process (all threads) and wall: **cold**, a collector's first scrape
(and, apart, its writer's thread keeping the parts it computed, where the tree has one);
**cached**, another process's first scrape, with what the first one left; **ended**, a
collector built, then 1 % of the live jobs given their outcome through another
connection, and one scrape (and, apart, its writer's).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def timed(fn: Any) -> tuple[float, float]:
    wall, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - wall, time.process_time() - cpu


def measure(url: str, what: str, live: int) -> dict[str, Any]:
    from bench_scale import fill
    from prometheus_client import CollectorRegistry, generate_latest

    from dispatch.core import events as ev
    from dispatch.core.model import Cause, CauseKind, State
    from dispatch.http.metrics import RecordCollector
    from dispatch.service import Service
    from dispatch.stores.select import open_store

    if what == "fill":
        fill(url, live, 1000)
        return {}
    collector = RecordCollector(lambda: Service(open_store(url)))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    writer = getattr(collector, "parts_writer", None)
    out: dict[str, Any] = {}
    if what == "ended":
        generate_latest(registry)
        if writer is not None:
            writer.flush()
        now = datetime.now(UTC)
        with open_store(url) as store:
            for i in range(0, live, 100):
                job_id = f"live{i:07d}"
                v = store.version(job_id)
                store.append(job_id, [ev.OutcomeCommitted(
                    seq=v + 1, at=now, state=State.SUCCEEDED,
                    cause=Cause(kind=CauseKind.NONE))], v)
    out["wall_s"], out["cpu_s"] = timed(lambda: generate_latest(registry))
    out["kept_cpu_s"] = timed(writer.flush)[1] if writer is not None else 0.0
    return out


def child(args: list[str], src: str | None) -> dict[str, Any]:
    env = dict(os.environ, DISPATCH_BENCH_SRC=str(Path(src or ROOT) / "src"))
    res = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         check=False, env=env)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--live", type=int, action="append")
    ap.add_argument("--before", help="another tree's root, measured on a store of its own")
    ap.add_argument("--sqlite", action="store_true", help="SQLite instead of PostgreSQL")
    ap.add_argument("--child", nargs=3)  # url what live
    a = ap.parse_args()
    sys.path[:0] = [os.environ.get("DISPATCH_BENCH_SRC", str(ROOT / "src")), str(ROOT),
                    str(ROOT / "bench")]
    if a.child:
        print(json.dumps(measure(a.child[0], a.child[1], int(a.child[2]))))
        return
    cluster = None
    if not a.sqlite:
        from tests.conftest_pg import ThrowawayPostgres

        cluster = ThrowawayPostgres(fast=False).start()
    print(f"bench_metrics_cache on {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
          f"{'SQLite' if a.sqlite else 'PostgreSQL'}")
    print("| tree | live | cold collector's first scrape (then: writing parts) | the same, "
          "parts left by the one before | after 1 % ended (then: writing parts) |")
    print("|---|---|---|---|---|")
    try:
        with tempfile.TemporaryDirectory(prefix="bench-metrics-cache-") as tmp:
            for live in a.live or [10_000]:
                for name, src in [("this", None)] + ([("before", a.before)] if a.before else []):
                    url = (f"sqlite://{tmp}/{name}-{live}.sqlite3" if cluster is None
                           else cluster.new_database())
                    child(["--child", url, "fill", str(live)], src)
                    r = {w: child(["--child", url, w, str(live)], src)
                         for w in ("cold", "cached", "ended")}
                    c, k, e = r["cold"], r["cached"], r["ended"]
                    print(f"| {name} | {live:,} | {c['wall_s']:.2f} s ({c['cpu_s']:.2f} s CPU; "
                          f"{c['kept_cpu_s']:.2f} s) | {k['wall_s']:.2f} s ({k['cpu_s']:.2f} s "
                          f"CPU) | {e['wall_s'] * 1000:.0f} ms ({e['cpu_s'] * 1000:.0f} ms CPU; "
                          f"{e['kept_cpu_s'] * 1000:.0f} ms) |", flush=True)
                print(f"(load {os.getloadavg()[0]:.1f})", flush=True)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
