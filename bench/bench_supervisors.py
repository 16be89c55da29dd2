"""Supervisors under leases (issue 16). A benchmark, not a test: nothing here asserts a time.

    python bench/bench_supervisors.py                       # everything, throwaway PostgreSQL
    python bench/bench_supervisors.py --window 20 --kills 20
    python bench/bench_supervisors.py --chaos-report FILE   # also summarise the chaos test's
                                                            # takeovers ($DISPATCH_TAKEOVER_REPORT)

Measures, as printed Markdown (copied into bench/RESULTS.md):
1. scheduler calls per tick period on one scope of the local backend, counted on the calls
   themselves (each supervisor process logs every discover()): 1 supervisor, 3 supervisors
   under leases (target: the same as 1), and 3 supervisors without leases (as before issue 16,
   for comparison);
2. takeover time: the active supervisor of 3 killed with SIGKILL (kill to the standby's
   lease, polled every 20 ms) and stopped with SIGTERM (a planned handover), in seconds and in
   lease periods.

Supervisors are real processes (tests/integration/supervision/sup_child.py: the Supervision
loop over the real local backend) on a throwaway PostgreSQL cluster (fsync off: this measures
coordination, not disk).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from tests.conftest_pg import ThrowawayPostgres  # noqa: E402
from tests.integration.supervision.helpers import (  # noqa: E402
    Procs,
    create_jobs,
    jobs,
    lease_of,
    log_lines,
    spec,
    wait_for,
)

from dispatch.backends.local import LocalBackend  # noqa: E402
from dispatch.supervise.leases import local_scope  # noqa: E402


def calls_per_period(cluster: ThrowawayPostgres, tmp: Path, supervisors: int, leased: bool,
                     window: float, poll: float, lease: float, n_jobs: int) -> dict[str, Any]:
    url = cluster.new_database()
    tag = f"{supervisors}{'L' if leased else 'N'}"
    root, log = tmp / f"root-{tag}", tmp / f"calls-{tag}.log"
    scope = local_scope(root)
    procs = Procs()
    try:
        ids = create_jobs(url, root, [spec(f"b{i}", ["sleep", "600"]) for i in range(n_jobs)])
        for i in range(supervisors):
            procs.child(url, root, log, f"S{i}", [scope], lease=lease, poll=poll,
                        no_lease=not leased).wait_line(lambda s: s.startswith("ready"))
        # Measure once every job is bound to its object: a steady tick, no submissions.
        wait_for(lambda: all(j.current is not None and j.current.ref
                             for j in jobs(url).values()), what="every job bound")
        time.sleep(2 * poll)
        start = len(log_lines(log))
        time.sleep(window)
        lines = log_lines(log)[start:]
        per = Counter(w[1] for w in lines if w[0] == "discover")
        return {"supervisors": supervisors, "leases": leased, "window_s": window,
                "poll_s": poll, "periods": window / poll, "discover": sum(per.values()),
                "per_period": sum(per.values()) / (window / poll),
                "by_process": dict(sorted(per.items())), "jobs": n_jobs}
    finally:
        procs.reap()
        backend = LocalBackend(root)
        for j in jobs(url).values():
            for s in j.submissions:
                if s.ref:
                    try:
                        backend.cancel(s.ref)
                    except Exception:  # noqa: S110 - best-effort cleanup of a benchmark
                        pass
        del ids


def takeovers(cluster: ThrowawayPostgres, tmp: Path, kills: int, how: int, lease: float,
              poll: float) -> list[float]:
    url = cluster.new_database()
    root, log = tmp / f"root-take-{how}-{lease}", tmp / f"take-{how}-{lease}.log"
    scope = local_scope(root)
    procs = Procs()
    by_name: dict[str, Any] = {}
    n = 0
    out: list[float] = []
    try:
        create_jobs(url, root, [spec(f"t{i}", ["sleep", "600"]) for i in range(3)])

        def start() -> None:
            nonlocal n
            name = f"P{n}"
            n += 1
            by_name[name] = procs.child(url, root, log, name, [scope], lease=lease, poll=poll)
            by_name[name].wait_line(lambda s: s.startswith("ready"))
        for _ in range(3):
            start()
        for _ in range(kills):
            current = wait_for(lambda: (got := lease_of(url, scope)) is not None
                               and got.state == "active" and got, what="an active one")
            time.sleep(lease * 0.5)  # somewhere inside a renewal interval
            current = lease_of(url, scope)
            assert current is not None
            victim = by_name.pop(current.holder)
            t0 = time.monotonic()
            victim.signal(how)
            wait_for(lambda e=current.epoch: (got := lease_of(url, scope)) is not None
                     and got.epoch > e and got.state == "active", every=0.02,
                     what="a takeover")
            out.append(time.monotonic() - t0)
            victim.p.wait(10)
            start()
        return out
    finally:
        procs.reap()
        backend = LocalBackend(root)
        for j in jobs(url).values():
            for s in j.submissions:
                if s.ref:
                    try:
                        backend.cancel(s.ref)
                    except Exception:  # noqa: S110 - best-effort cleanup of a benchmark
                        pass


def _stats(xs: list[float], lease: float) -> str:
    xs = sorted(xs)
    p90 = xs[max(0, int(round(0.9 * len(xs))) - 1)]
    return (f"{statistics.median(xs):.2f} s ({statistics.median(xs) / lease:.2f}) | "
            f"{p90:.2f} s ({p90 / lease:.2f}) | {xs[-1]:.2f} s ({xs[-1] / lease:.2f}) | "
            f"{xs[0]:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--window", type=float, default=15.0, help="seconds counted per config")
    ap.add_argument("--poll", type=float, default=0.5)
    ap.add_argument("--lease", type=float, default=3.0, help="lease for part 1")
    ap.add_argument("--jobs", type=int, default=10)
    ap.add_argument("--kills", type=int, default=15)
    ap.add_argument("--chaos-report", type=Path, default=None)
    args = ap.parse_args()
    print("### bench_supervisors")
    print(f"machine: {platform.node()} {platform.machine()}, {os.cpu_count()} CPUs, "
          f"Python {platform.python_version()}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())} at start")
    print("command: python bench/bench_supervisors.py " + " ".join(sys.argv[1:]))
    with ThrowawayPostgres(fast=True) as cluster, \
            tempfile.TemporaryDirectory(prefix="dispatch-bench-sup-") as tmpdir:
        tmp = Path(tmpdir)
        print(f"\n#### Scheduler calls per tick period ({args.jobs} live local jobs, poll "
              f"{args.poll:g} s, lease {args.lease:g} s, {args.window:g} s counted)\n")
        print("| supervisors on the scope | leases | discover() calls | per tick period |"
              " by process |")
        print("| --- | --- | --- | --- | --- |")
        for k, leased in ((1, True), (3, True), (3, False)):
            r = calls_per_period(cluster, tmp, k, leased, args.window, args.poll, args.lease,
                                 args.jobs)
            print(f"| {k} | {'yes' if leased else 'no (before issue 16)'} | {r['discover']} |"
                  f" {r['per_period']:.2f} | {json.dumps(r['by_process'])} |", flush=True)
        print(f"\n#### Takeover time, 3 supervisors, {args.kills} stops each (poll 0.2 s)\n")
        print("| stop | lease | median (periods) | p90 (periods) | max (periods) | min |")
        print("| --- | --- | --- | --- | --- | --- |")
        for how, name in ((signal.SIGKILL, "kill -9"), (signal.SIGTERM, "SIGTERM")):
            for lease in (1.0, 3.0):
                xs = takeovers(cluster, tmp, args.kills, how, lease, 0.2)
                print(f"| {name} | {lease:g} s | {_stats(xs, lease)} |", flush=True)
    if args.chaos_report is not None:
        rep = json.loads(args.chaos_report.read_text())
        xs = [t["seconds"] for t in rep["takeovers"]]
        print(f"\n#### The chaos test's takeovers ({rep['kills']} kills of `dispatch supervise`"
              f" processes, lease {rep['lease_s']:g} s, poll {rep['poll_s']:g} s, "
              f"{rep['jobs']} jobs, {rep['recoveries']} preemptions recovered)\n")
        print("| median (periods) | p90 (periods) | max (periods) | min |")
        print("| --- | --- | --- | --- |")
        print(f"| {_stats(xs, rep['lease_s'])} |")


if __name__ == "__main__":
    main()
