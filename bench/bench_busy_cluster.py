"""A tick on a busy cluster: does its cost grow with other users' jobs? (issue 14, P2)

Run by hand, as root, against a testbed that nobody else is using for a benchmark:

    scripts/slurm-testbed exec [--version 24.11] python bench/bench_busy_cluster.py

Two supervisors tick: one whose Slurm tools run as a plain user (``dispatchuser``: how dispatch
runs on a real cluster) and one as root (how the test suites run; squeue takes uid 0 for "no
user" and reads every job for root). Each submits 3 jobs (sleep, one node each). In the same
run, with 0 and then 3,000 foreign pending jobs (held, ``--hold``, so they never run, of the
user ``dispatchbench``; users created if missing, jobs removed at the end), each measures
discover() of its 3 jobs in three ways:

- ``steady``: a tick that does not read nodes (the last node read stands);
- ``nodes``: a tick that reads the nodes of our jobs (``node_interval`` 0);
- ``poll``: ``--ticks`` ticks 2 s apart on a simulated clock (``supervise``'s default poll) with
  the default node interval (15 s): what a supervisor really costs per tick, on average.

Per way and load: the median wall time of discover() (mean for ``poll``), the bytes the Slurm
tools printed, tool calls and slurmctld RPCs per tick by type from ``sdiag`` (reset after a
warm-up of 3 ticks; on a shared testbed other clients' RPCs count too, which is why the
per-type table is printed). The old whole-cluster tick (``queries="json"``: ``squeue --json``
+ ``sinfo --json`` every tick) is measured beside them for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from slurm_bench import ctld_counts  # bench/, beside this file

from dispatch.backends.base import Submission
from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.backends.slurm.tools import Result
from dispatch.core.model import SchedulerUnreachable, token_for
from dispatch.core.spec import JobSpec

FOREIGN = "dispatchbench"
OURS = "dispatchuser"
WAYS = (("compact", "steady"), ("compact", "nodes"), ("compact", "poll"), ("json", "nodes"))
POLL = timedelta(seconds=2)


class CountingRunner:
    """A runner, counting the bytes each tool printed."""

    def __init__(self, run: Callable[[Sequence[str], float], Result]) -> None:
        self.run = run
        self.bytes = 0

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        res = self.run(argv, timeout)
        self.bytes += len(res.stdout.encode()) + len(res.stderr.encode())
        return res


def sh(*argv: str, check: bool = True) -> str:
    res = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=600)
    if check and res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {res.stderr.strip()}")
    return res.stdout


def sdiag_rpcs() -> Counter[str]:
    """slurmctld RPCs by message type since the last ``sdiag -r`` (sdiag's own excluded)."""
    counts = ctld_counts().count
    counts.pop("REQUEST_STATS_INFO", None)
    return counts


def ensure_user(name: str) -> None:
    try:
        pwd.getpwnam(name)
    except KeyError:
        sh("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", name)


def submit_foreign(n: int) -> None:
    """n held jobs of the foreign user, submitted by one shell loop (one process per sbatch)."""
    sh("runuser", "-u", FOREIGN, "--", "bash", "-c",
       f'for i in $(seq {n}); do sbatch --hold -o /dev/null -J foreign --wrap "sleep 1" '
       '>/dev/null || exit 1; done')
    pending = sh("squeue", "-h", "-u", FOREIGN, "-o", "%i").split()
    if len(pending) != n:
        raise SystemExit(f"expected {n} foreign jobs, squeue shows {len(pending)}")


def cluster_jobs() -> int:
    """Jobs slurmctld holds, ended ones included (they stay MinJobAge): root sees them all."""
    return len(sh("squeue", "-h", "-t", "all", "-o", "%i").split())


def wait_for_a_quiet_cluster(limit_s: float = 600) -> None:
    """An earlier run's foreign jobs, cancelled, stay in slurmctld until purged (MinJobAge):
    the idle figures would count them."""
    deadline = time.monotonic() + limit_s
    while sh("squeue", "-h", "-t", "all", "-u", FOREIGN, "-o", "%i").split():
        if time.monotonic() > deadline:
            raise SystemExit(f"jobs of {FOREIGN} still listed after {limit_s:.0f} s")
        time.sleep(10)


# ------------------------------------------------------------------------------ the ticks


class Supervisor:
    """One supervisor's 3 jobs and ticks. Its Slurm tools run as ``user`` (setuid in the
    forked child before exec, no login: the tool costs exactly what it costs that user)."""

    def __init__(self, user: str, out_dir: Path) -> None:
        self.user = user
        self.out_dir = out_dir
        self.pw = pwd.getpwnam(user)
        self.tokens: set[str] = set()
        self.refs: set[str] = set()

    def run(self, argv: Sequence[str], timeout: float) -> Result:
        as_user: dict[str, Any] = {} if self.pw.pw_uid == os.geteuid() else {
            "user": self.pw.pw_uid, "group": self.pw.pw_gid, "extra_groups": []}
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                              check=False, cwd=self.out_dir, **as_user,
                              env={**os.environ, "HOME": str(self.out_dir), "USER": self.user})
        return Result(tuple(argv), proc.returncode, proc.stdout, proc.stderr)

    def backend(self, **kw: Any) -> SlurmBackend:
        return SlurmBackend(output_dir=self.out_dir, user=self.user, **kw)

    def submit(self) -> None:
        b = self.backend(runner=self.run)
        run_id = f"{self.user}-{os.getpid()}-{int(time.time())}"  # a rerun must not find these
        for i in range(3):
            job_id = f"bench-busy-{run_id}-{i}"
            token = token_for(job_id, 1)
            self.refs.add(b.submit(Submission(job_id=job_id, number=1, token=token, spec=JobSpec(
                name=job_id, command=("sleep", "600"), backend="slurm"))))
            self.tokens.add(token)

    def wait_running(self) -> None:
        b = self.backend(runner=self.run)
        deadline = time.monotonic() + 120
        while any(o.state.value != "running" for o in b.discover(self.tokens, self.refs).objects):
            if time.monotonic() > deadline:
                raise SystemExit(f"the 3 jobs of {self.user} did not all start within 120 s")
            time.sleep(1)

    def measure(self, queries: str, way: str, ticks: int) -> dict[str, Any]:
        counted = CountingRunner(self.run)
        clock = [datetime.now(UTC)]
        interval = {"steady": timedelta(days=1), "nodes": timedelta(0), "poll": None}[way]
        b = self.backend(node_loss_window=timedelta(seconds=60), runner=counted,
                         queries=queries, clock=lambda: clock[0], node_interval=interval)
        row: dict[str, Any] = {"user": self.user, "queries": queries, "way": way,
                               "cluster_jobs": cluster_jobs()}
        try:
            for _ in range(3):  # warm-up: token search, accounting answers cached, nodes read
                b.discover(self.tokens, self.refs)
        except SchedulerUnreachable as err:  # the old json tick does not read every version
            return {**row, "error": str(err)}
        b.calls.clear()
        counted.bytes = 0
        sh("sdiag", "-r")
        walls = []
        for _ in range(ticks):
            if way == "poll":
                clock[0] += POLL
            t0 = time.perf_counter()
            d = b.discover(self.tokens, self.refs)
            walls.append(time.perf_counter() - t0)
        rpcs = sdiag_rpcs()
        wall = statistics.fmean(walls) if way == "poll" else statistics.median(walls)
        return {**row, "wall_ms": round(wall * 1000, 1), "bytes": counted.bytes // ticks,
                "calls": {k: round(v / ticks, 2) for k, v in sorted(b.calls.items())},
                "rpcs": {k: round(v / ticks, 2) for k, v in sorted(rpcs.items())},
                "rpcs_total": round(sum(rpcs.values()) / ticks, 2),
                "states": sorted({o.state.value for o in d.objects})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--foreign", type=int, default=3000)
    ap.add_argument("--ticks", type=int, default=24)
    args = ap.parse_args()
    release = sh("sinfo", "-V").split()[-1]
    ensure_user(FOREIGN)
    ensure_user(OURS)
    out_dir = Path(tempfile.mkdtemp(prefix="dispatch-bench-busy-"))
    out_dir.chmod(0o777)
    wait_for_a_quiet_cluster()
    supervisors = [Supervisor(OURS, out_dir), Supervisor("root", out_dir)]
    rows: list[dict[str, Any]] = []
    submitted_s = 0.0
    try:
        for sup in supervisors:
            sup.submit()
        for sup in supervisors:
            sup.wait_running()
        for load in (0, args.foreign):
            if load:
                t0 = time.perf_counter()
                submit_foreign(load)
                submitted_s = round(time.perf_counter() - t0, 1)
            for sup in supervisors:
                for queries, way in WAYS:
                    rows.append({"foreign": load, **sup.measure(queries, way, args.ticks)})
    finally:
        sh("scancel", "-u", FOREIGN, check=False)
        for sup in supervisors:
            if sup.refs:
                sh("scancel", *sorted(sup.refs), check=False)
    report: dict[str, Any] = {"slurm": release, "ticks": args.ticks,
                              "foreign_submit_s": submitted_s, "rows": rows, "ratios": {}}
    for sup in supervisors:
        for queries, way in WAYS:
            zero, busy = (r for r in rows if (r["user"], r["queries"], r["way"])
                          == (sup.user, queries, way))
            if "error" in zero or "error" in busy:
                continue
            report["ratios"][f"{sup.user} {queries} {way}"] = {
                "wall": round(busy["wall_ms"] / zero["wall_ms"], 2),
                "bytes": round(busy["bytes"] / zero["bytes"], 2)}
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
