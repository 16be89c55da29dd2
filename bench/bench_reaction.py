"""Reaction (docs/semantics.md#p3): from the end Slurm records to the replacement's submission, as a
ratio of the poll interval (target: within 1.2 poll intervals). A benchmark, not a test.

    scripts/slurm-testbed up
    PYTHONPATH=src /tmp/bench-venv/bin/python bench/bench_reaction.py   # --poll 2 --reps 3

Each repetition runs two dispatch jobs with a resubmit rule for preempted and node-lost, and
supervises them the way ``dispatch serve`` does (tick, then wait POLL seconds):
- preempted: ``sleep 600`` --exclusive on n1 (partition low); once running, a --exclusive job
  on ``high`` takes n1;
- node-lost: ``sleep 600`` on n2; once running, ``scontrol update nodename=n2 state=down``.
The end is the first job's sacct End (whole seconds, Slurm's clock); the replacement's
submission is the record's SubmissionIntended time for submission 2 (dispatch's decision, the
intent written before sbatch) and the new job's sacct Submit (sbatch accepted). sacct prints
whole seconds (truncated), so End can read up to 1 s early: the bench also prints the time from
its own trigger (sub-second, this clock; for preemption it includes Slurm scheduling the high
job) to the intent. The trigger comes at a random moment of a poll interval, as a failure
would. All are printed as seconds and as a ratio of POLL. Every job is named bench-react-...
and cancelled.
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import slurm_bench as sb  # noqa: E402

from dispatch.core.record import fold  # noqa: E402

POLICY = {"rules": [{"on": ["preempted", "node-lost"], "action": "resubmit", "budget": 3}]}


def running(ref: str) -> bool:
    return sb.sh("squeue", "-h", "-j", ref, "-o", "%T", check=False).strip() == "RUNNING"


def one_rep(rep: int, poll: float, work: Path, timeout: float) -> list[dict[str, Any]]:
    rig = sb.dispatch_rig(work / f"rep-{rep}")
    jobs = {
        "preempted": rig.add_job(f"bench-react-pre-{rep}", ["sleep", "600"], memory="100M",
                                 policy=POLICY, slurm={"nodelist": "n1", "exclusive": True}),
        "node-lost": rig.add_job(f"bench-react-node-{rep}", ["sleep", "600"], memory="100M",
                                 policy=POLICY, slurm={"nodelist": "n2"}),
    }
    triggered: dict[str, datetime] = {}
    done: dict[str, dict[str, Any]] = {}
    started = time.monotonic()
    try:
        while time.monotonic() - started < timeout and len(done) < len(jobs):
            rig.supervisor.tick()
            wait = poll
            for kind, job_id in jobs.items():
                if kind in done:
                    continue
                job = fold(rig.store.read(job_id), datetime.now(UTC))
                subs = job.submissions
                if kind not in triggered:
                    if subs and subs[0].ref and running(subs[0].ref):
                        # At a random moment of the poll interval, as a failure would come:
                        # right after a tick would measure the worst case every time.
                        phase = random.uniform(0, wait)
                        time.sleep(phase)
                        wait -= phase
                        if kind == "preempted":
                            sb.sh("sbatch", "--parsable", f"--job-name=bench-react-high-{rep}",
                                  "--partition=high", "--exclusive", "--nodelist=n1",
                                  "--mem=100M", "--time=1", "--output=/dev/null", "--wrap",
                                  "sleep 3")
                        else:
                            sb.sh("scontrol", "update", "nodename=n2", "state=down",
                                  "reason=bench")
                        triggered[kind] = datetime.now(UTC)
                    continue
                if len(subs) >= 2 and subs[1].ref:
                    first = sb.sacct_rows(subs[0].ref)
                    ends = [sb.parse_slurm_time(r["End"]) for r in first
                            if r["State"].split()[0] in ("PREEMPTED", "NODE_FAIL")]
                    second = sb.sacct_rows(subs[1].ref)
                    sub2 = sb.parse_slurm_time(second[0]["Submit"]) if second else None
                    end = ends[0] if ends and ends[0] else None
                    if end is None or sub2 is None:
                        continue  # accounting lags a moment
                    done[kind] = {
                        "kind": kind, "rep": rep, "end": end, "trigger": triggered[kind],
                        "intended": subs[1].intended_at, "submit": sub2,
                        "first": subs[0].ref, "second": subs[1].ref,
                        "end_state": [r["State"] for r in first],
                    }
                    if kind == "node-lost":
                        sb.sh("scontrol", "update", "nodename=n2", "state=resume", check=False)
            time.sleep(max(0.0, wait))
    finally:
        sb.sh("scontrol", "update", "nodename=n2", "state=resume", check=False)
        sb.cleanup("bench-react-")
        sb.wait_gone("bench-react-", timeout=60)
    return list(done.values())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--poll", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0, help="per repetition")
    args = ap.parse_args()
    sb.cleanup("bench-react-")
    work = Path(tempfile.mkdtemp(prefix="dispatch-bench-react-"))
    rows: list[dict[str, Any]] = []
    for rep in range(args.reps):
        got = one_rep(rep, args.poll, work, args.timeout)
        print(f"rep {rep}: {len(got)} measured", file=sys.stderr)
        rows += got
        time.sleep(3)  # let n1, n2 come back
    print("### bench_reaction: Slurm's recorded end to the replacement's submission (P3)")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.node()} "
          f"{platform.machine()}, Python {platform.python_version()}; {sb.slurm_version()}")
    print(f"command: PYTHONPATH=src {sys.executable} bench/bench_reaction.py "
          + " ".join(sys.argv[1:]))
    print()
    print(f"Poll interval {args.poll:g} s (tick, then wait the interval). sacct End and Submit "
          "are whole seconds, so each figure is +-1 s (+-{:.2f} poll intervals).".format(
              1 / args.poll))
    print()
    print("| cause | rep | old job (sacct states) | new job | sacct End -> intended (s) "
          "| in polls | sacct End -> sbatch Submit (s) | in polls "
          "| our trigger -> intended (s) | in polls |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        a = (r["intended"] - r["end"]).total_seconds()
        b = (r["submit"] - r["end"]).total_seconds()
        c = (r["intended"] - r["trigger"]).total_seconds()
        r["a"], r["b"], r["c"] = a, b, c
        print(f"| {r['kind']} | {r['rep']} | {r['first']} ({', '.join(r['end_state'])}) "
              f"| {r['second']} | {a:.1f} | {a / args.poll:.2f} | {b:.0f} | "
              f"{b / args.poll:.2f} | {c:.2f} | {c / args.poll:.2f} |")
    for kind in ("preempted", "node-lost"):
        sel = [r for r in rows if r["kind"] == kind]
        if sel:
            m = {k: statistics.fmean(r[k] for r in sel) for k in "abc"}
            print(f"| {kind} | mean of {len(sel)} | | | {m['a']:.1f} | {m['a'] / args.poll:.2f} "
                  f"| {m['b']:.1f} | {m['b'] / args.poll:.2f} | {m['c']:.2f} "
                  f"| {m['c'] / args.poll:.2f} |")
            mx = {k: max(r[k] for r in sel) for k in "abc"}
            print(f"| {kind} | max of {len(sel)} | | | {mx['a']:.1f} | {mx['a'] / args.poll:.2f} "
                  f"| {mx['b']:.0f} | {mx['b'] / args.poll:.2f} | {mx['c']:.2f} "
                  f"| {mx['c'] / args.poll:.2f} |")
    missing = args.reps * 2 - len(rows)
    if missing:
        print(f"\n{missing} measurement(s) did not complete within {args.timeout:g} s.")


if __name__ == "__main__":
    main()
