"""A tick on a busy cluster: does its cost grow with other users' jobs? (issue 14, P2)

Run by hand, as root, against a testbed that nobody else is using for a benchmark:

    scripts/slurm-testbed exec [--version 24.11] python bench/bench_busy_cluster.py

It submits 3 jobs of ours (sleep, one node each) and, in the same run, measures discover()
of those 3 with 0 and then with 3,000 foreign pending jobs: held jobs (``--hold``, so they
never run) of another local user (``dispatchbench``, created if missing), removed at the end
(``scancel -u dispatchbench`` only). For each load it reports, per tick: wall time (median of
``--ticks``), bytes the Slurm tools printed, tool calls, and slurmctld RPCs by type from
``sdiag`` (reset before the ticks; on a shared testbed other clients' RPCs are counted too,
which is why the per-type table is printed). The old whole-cluster tick (``queries="json"``:
``squeue --json`` + ``sinfo --json``) is measured beside it for reference.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from pathlib import Path

from dispatch.backends.base import Submission
from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.backends.slurm.tools import Result, run_tool
from dispatch.core.model import SchedulerUnreachable, token_for
from dispatch.core.spec import JobSpec

FOREIGN = "dispatchbench"


class CountingRunner:
    """run_tool, counting the bytes each tool printed."""

    def __init__(self) -> None:
        self.bytes = 0

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        res = run_tool(argv, timeout)
        self.bytes += len(res.stdout.encode()) + len(res.stderr.encode())
        return res


def sh(*argv: str, check: bool = True) -> str:
    res = subprocess.run(list(argv), capture_output=True, text=True, check=False, timeout=600)
    if check and res.returncode != 0:
        raise SystemExit(f"{' '.join(argv)}: {res.stderr.strip()}")
    return res.stdout


def sdiag_rpcs() -> Counter[str]:
    """slurmctld RPCs by message type since the last ``sdiag -r`` (sdiag's own excluded)."""
    out = sh("sdiag")
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    counts: Counter[str] = Counter()
    for m in re.finditer(r"^\s+(\S+)\s+\(\s*\d+\) count:(\d+)", section, re.M):
        if m.group(1) != "REQUEST_STATS_INFO":
            counts[m.group(1)] = int(m.group(2))
    return counts


def ensure_foreign_user() -> None:
    try:
        pwd.getpwnam(FOREIGN)
    except KeyError:
        sh("useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", FOREIGN)


def submit_foreign(n: int) -> None:
    """n held jobs of the foreign user, submitted by one shell loop (one process per sbatch)."""
    sh("runuser", "-u", FOREIGN, "--", "bash", "-c",
       f'for i in $(seq {n}); do sbatch --hold -o /dev/null -J foreign --wrap "sleep 1" '
       '>/dev/null || exit 1; done')
    pending = sh("squeue", "-h", "-u", FOREIGN, "-o", "%i").split()
    if len(pending) != n:
        raise SystemExit(f"expected {n} foreign jobs, squeue shows {len(pending)}")


def measure(queries: str, tokens: set[str], refs: set[str], ticks: int,
            out_dir: Path) -> dict[str, object]:
    try:
        return _measure(queries, tokens, refs, ticks, out_dir)
    except SchedulerUnreachable as err:  # the old json tick does not read every version
        return {"queries": queries, "error": str(err)}


def _measure(queries: str, tokens: set[str], refs: set[str], ticks: int,
             out_dir: Path) -> dict[str, object]:
    runner = CountingRunner()
    b = SlurmBackend(node_loss_window=timedelta(seconds=60), output_dir=out_dir, runner=runner,
                     queries=queries)
    for _ in range(3):  # warm-up: token search, accounting answers cached
        b.discover(tokens, refs)
    b.calls.clear()
    runner.bytes = 0
    sh("sdiag", "-r")
    walls = []
    for _ in range(ticks):
        t0 = time.perf_counter()
        d = b.discover(tokens, refs)
        walls.append(time.perf_counter() - t0)
    rpcs = sdiag_rpcs()
    states = sorted({o.state.value for o in d.objects})
    return {"queries": queries, "wall_ms": round(statistics.median(walls) * 1000, 1),
            "bytes": runner.bytes // ticks, "calls": {k: v / ticks for k, v in b.calls.items()},
            "rpcs": {k: round(v / ticks, 2) for k, v in sorted(rpcs.items())},
            "rpcs_total": round(sum(rpcs.values()) / ticks, 2), "states": states}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--foreign", type=int, default=3000)
    ap.add_argument("--ticks", type=int, default=10)
    args = ap.parse_args()
    release = sh("sinfo", "-V").split()[-1]
    ensure_foreign_user()
    out_dir = Path(tempfile.mkdtemp(prefix="dispatch-bench-busy-"))
    out_dir.chmod(0o777)
    b = SlurmBackend(output_dir=out_dir)
    tokens, refs = set(), set()
    run_id = f"{os.getpid()}-{int(time.time())}"  # a rerun must not find this run's tokens
    for i in range(3):
        job_id = f"bench-busy-{run_id}-{i}"
        token = token_for(job_id, 1)
        ref = b.submit(Submission(job_id=job_id, number=1, token=token, spec=JobSpec(
            name=job_id, command=("sleep", "600"), backend="slurm")))
        tokens.add(token)
        refs.add(ref)
    rows = []
    try:
        deadline = time.monotonic() + 120
        while any(o.state.value != "running" for o in b.discover(tokens, refs).objects):
            if time.monotonic() > deadline:
                raise SystemExit("our 3 jobs did not all start within 120 s")
            time.sleep(1)
        for queries in ("compact", "json"):
            rows.append({"foreign": 0, **measure(queries, tokens, refs, args.ticks, out_dir)})
        t0 = time.perf_counter()
        submit_foreign(args.foreign)
        submitted_s = round(time.perf_counter() - t0, 1)
        for queries in ("compact", "json"):
            rows.append({"foreign": args.foreign,
                         **measure(queries, tokens, refs, args.ticks, out_dir)})
    finally:
        sh("scancel", "-u", FOREIGN, check=False)
        sh("scancel", *sorted(refs), check=False)
    report = {"slurm": release, "ticks": args.ticks, "foreign_submit_s": submitted_s,
              "rows": rows}
    for queries in ("compact", "json"):
        zero, busy = (r for r in rows if r["queries"] == queries)
        if "error" in zero or "error" in busy:
            continue
        report[f"{queries}_wall_ratio"] = round(busy["wall_ms"] / zero["wall_ms"], 2)  # type: ignore[operator]
        report[f"{queries}_bytes_ratio"] = round(busy["bytes"] / zero["bytes"], 2)  # type: ignore[operator]
    json.dump(report, sys.stdout, indent=2)
    print()


if __name__ == "__main__":
    main()
