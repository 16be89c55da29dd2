"""Scheduler load per supervision tick (docs/semantics.md#p2): dispatch, TorchX and submitit on
the same N sleeping jobs of the real Slurm testbed. A benchmark, not a test: it asserts nothing.

    scripts/slurm-testbed up
    python -m venv /tmp/bench-venv && /tmp/bench-venv/bin/pip install '.[bench]'
    PYTHONPATH=src /tmp/bench-venv/bin/python bench/bench_slurm_load.py   # --n 50 200 500

For each N: dispatch creates N jobs (``sleep 600``, 1 node, partition low, 64M; most stay
PENDING on 4 nodes x 2 CPUs, and are supervised all the same), its Supervisor submits them
(tick 0, not counted) and looks once (warm-up). Then, for each tool, the daemons' counters are
reset (``sdiag -r``, ``sacctmgr -i clear stats``) and it refreshes the status of the same N
jobs TICKS times, with the counters read around every refresh:

- idle: nothing (what the daemons count by themselves and by our reading of the counters);
- dispatch: ``Supervisor.tick()`` (discover + fold + decide + project for every job);
- TorchX: ``SlurmScheduler.describe(app_id)`` for each job (what ``torchx status`` does);
- submitit: one forced update of ``SlurmJob.watcher``, then each job's state from it.

slurmctld queries are the REQUEST_*INFO* messages (sdiag by message type); slurmdbd queries
are the DBD_GET_* messages (sacctmgr show stats; DBD_GET_JOBS_COND is one sacct).
Prints Markdown (copied into bench/RESULTS.md). Every job is named bench-... and cancelled.
``--profile`` also runs cProfile over dispatch ticks at the largest N.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import slurm_bench as sb  # noqa: E402


def measure(fn: Callable[[], object], ticks: int, pause: float) -> list[dict[str, object]]:
    sb.reset_counters()
    rows = []
    for _ in range(ticks):
        c0, d0 = sb.ctld_counts(), sb.dbd_counts()
        t0 = time.perf_counter()
        fn()
        wall = time.perf_counter() - t0
        c1, d1 = sb.ctld_counts(), sb.dbd_counts()
        c, d = c1 - c0, d1 - d0
        rows.append({"wall": wall, "ctld": c, "dbd": d})
        time.sleep(pause)
    return rows


def summarise(rows: list[dict[str, object]]) -> dict[str, float]:
    def mean(f: Callable[[dict[str, object]], float]) -> float:
        return statistics.fmean(f(r) for r in rows)

    return {
        "ctld_q": mean(lambda r: sb.ctld_queries(r["ctld"])),  # type: ignore[arg-type]
        "ctld_all": mean(lambda r: sb.ctld_all(r["ctld"])),  # type: ignore[arg-type]
        "ctld_usec": mean(lambda r: sum(v for k, v in r["ctld"].usec.items()  # type: ignore
                                        if sb.is_ctld_query(k))),
        "dbd_q": mean(lambda r: sb.dbd_queries(r["dbd"])),  # type: ignore[arg-type]
        "jobs_cond": mean(lambda r: r["dbd"].count.get("DBD_GET_JOBS_COND", 0)),  # type: ignore
        "dbd_conn": mean(lambda r: sb.dbd_connections(r["dbd"])),  # type: ignore[arg-type]
        "dbd_usec": mean(lambda r: sum(v for k, v in r["dbd"].usec.items()  # type: ignore
                                       if k.startswith("DBD_GET_") and k not in
                                       sb.DBD_MEASUREMENT)),
        "wall": mean(lambda r: r["wall"]),  # type: ignore[arg-type,return-value]
        "min_ctld_q": min(sb.ctld_queries(r["ctld"]) for r in rows),  # type: ignore[arg-type]
        "max_ctld_q": max(sb.ctld_queries(r["ctld"]) for r in rows),  # type: ignore[arg-type]
        "min_dbd_q": min(sb.dbd_queries(r["dbd"]) for r in rows),  # type: ignore[arg-type]
        "max_dbd_q": max(sb.dbd_queries(r["dbd"]) for r in rows),  # type: ignore[arg-type]
    }


def types(rows: list[dict[str, object]]) -> str:
    ctld: Counter[str] = Counter()
    dbd: Counter[str] = Counter()
    for r in rows:
        ctld += r["ctld"].count  # type: ignore[attr-defined]
        dbd += r["dbd"].count  # type: ignore[attr-defined]
    n = len(rows)
    parts = [f"{k} {v / n:g}" for k, v in ctld.most_common()]
    parts += [f"{k} {v / n:g}" for k, v in dbd.most_common()]
    return ", ".join(parts) or "-"


def run_n(n: int, ticks: int, pause: float, work: Path, profile: bool) -> tuple[list[str], str]:
    rig = sb.dispatch_rig(work / f"load-{n}")
    t0 = time.perf_counter()
    ids = [rig.add_job(f"bench-load-{n}-{i}", ["sleep", "600"], memory="64M",
                       time_limit="30m", slurm={"partition": "low"}) for i in range(n)]
    created = time.perf_counter() - t0
    t0 = time.perf_counter()
    submit = rig.supervisor.tick()  # tick 0: N sbatch
    submitted = time.perf_counter() - t0
    rig.supervisor.tick()  # warm-up: the first discover of the bound refs
    refs = [r for j in ids for r in rig.refs(j)]
    print(f"N={n}: created {len(ids)} jobs in {created:.1f} s, submitted {len(refs)} "
          f"({submit.decisions} decisions) in {submitted:.1f} s", file=sys.stderr)
    states = Counter(o.state.value for o in (rig.backend.last.objects if rig.backend.last
                                             else ()))
    tools: list[tuple[str, Callable[[], object]]] = [("idle (no tool)", lambda: None)]
    calls_before = Counter(rig.backend.inner.calls)
    tools.append(("dispatch", rig.supervisor.tick))
    peers: list[object] = []
    try:
        tx = sb.TorchXStatus()
        peers.append(tx)
    except Exception as err:  # noqa: BLE001
        print(f"TorchX unavailable: {err}", file=sys.stderr)
    try:
        st = sb.SubmititStatus(work / f"submitit-{n}")
        peers.append(st)
    except Exception as err:  # noqa: BLE001
        print(f"submitit unavailable: {err}", file=sys.stderr)
    results: dict[str, tuple[dict[str, float], str, str]] = {}
    for name, fn in tools:
        rows = measure(fn, ticks, pause)
        made = ""
        if name == "dispatch":
            diff = Counter(rig.backend.inner.calls)
            diff.subtract(calls_before)
            made = ", ".join(f"{k} {v / ticks:g}" for k, v in sorted(diff.items()) if v)
        results[name] = (summarise(rows), types(rows), made)
        print(f"  {name}: done", file=sys.stderr)
    for peer in peers:
        with sb.CallCounter() as cc:
            rows = measure(lambda p=peer: p.refresh(refs), ticks, pause)  # type: ignore
        made = ", ".join(f"{k} {v / ticks:g}" for k, v in sorted(cc.calls.items())
                         if k not in ("sdiag", "sacctmgr"))
        results[peer.name] = (summarise(rows), types(rows), made)  # type: ignore[attr-defined]
        print(f"  {peer.name}: done", file=sys.stderr)  # type: ignore[attr-defined]

    prof = ""
    if profile:
        pr = cProfile.Profile()
        pr.enable()
        for _ in range(3):
            rig.supervisor.tick()
        pr.disable()
        buf = io.StringIO()
        st_ = pstats.Stats(pr, stream=buf)
        st_.sort_stats("cumulative").print_stats(25)
        st_.sort_stats("tottime").print_stats(15)
        prof = buf.getvalue()

    cancelled = sb.cleanup()
    sb.wait_gone()
    print(f"  cancelled {cancelled} jobs", file=sys.stderr)

    d = results["dispatch"][0]
    base = d["ctld_q"] + d["dbd_q"]
    lines = []
    for name, (s, _, made) in results.items():
        total = s["ctld_q"] + s["dbd_q"]
        ratio = "-" if name.startswith("idle") else (
            f"{total / base:.2f}x" if base else "n/a")
        lines.append(
            f"| {n} | {name} | {s['ctld_q']:g} ({s['min_ctld_q']:g}-{s['max_ctld_q']:g}) "
            f"| {s['ctld_all']:g} | {s['dbd_q']:g} ({s['min_dbd_q']:g}-{s['max_dbd_q']:g}) "
            f"| {s['jobs_cond']:g} | {s['dbd_conn']:g} | {total:g} | {ratio} "
            f"| {s['ctld_usec'] / 1000:.1f} + {s['dbd_usec'] / 1000:.1f} "
            f"| {s['wall']:.2f} | {made or '-'} |")
    detail = [f"| {n} | {name} | {t} |" for name, (_, t, _) in results.items()]
    header = f"N={n}: Slurm states at warm-up: {dict(states)}"
    return lines, "\n".join([header, *detail]) + ("\n\n```\n" + prof + "```\n" if prof else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, nargs="+", default=[50, 200, 500])
    ap.add_argument("--ticks", type=int, default=5)
    ap.add_argument("--pause", type=float, default=1.0, help="seconds between refreshes")
    ap.add_argument("--profile", action="store_true",
                    help="cProfile 3 dispatch ticks at the largest N")
    args = ap.parse_args()
    sb.cleanup()
    work = Path(tempfile.mkdtemp(prefix="dispatch-bench-load-"))
    lines: list[str] = []
    details: list[str] = []
    try:
        for n in args.n:
            ln, det = run_n(n, args.ticks, args.pause, work, args.profile and n == max(args.n))
            lines += ln
            details.append(det)
    finally:
        sb.cleanup()
    print(f"### bench_slurm_load: {', '.join(map(str, args.n))} jobs, {args.ticks} refreshes "
          "each")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.node()} "
          f"{platform.machine()}, Python {platform.python_version()}; {sb.slurm_version()}; "
          + ", ".join(f"{k} {v}" for k, v in sb.peer_versions().items()))
    print(f"command: PYTHONPATH=src {sys.executable} bench/bench_slurm_load.py "
          + " ".join(sys.argv[1:]))
    print()
    print("Per refresh (mean over the refreshes; min-max in brackets). Queries: slurmctld "
          "REQUEST_*INFO* (not srun's *ALLOC*_INFO, not sdiag's own STATS_INFO), slurmdbd "
          "DBD_GET_* (not the stats reading's own DBD_GET_STATS); the idle row is what the "
          "daemons and our reading of the counters add with no tool running. Ratio: "
          "(slurmctld + slurmdbd queries) to "
          "dispatch's. Server time: total_time of those queries as the daemons counted it.")
    print()
    print("| N | tool | slurmctld queries | slurmctld RPCs, all types (incl. background) "
          "| slurmdbd queries "
          "| of which DBD_GET_JOBS_COND | slurmdbd connections | queries | ratio to dispatch "
          "| server ms (ctld + dbd) | wall s | tools run per refresh |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    print("\n".join(lines))
    print()
    print("RPCs by message type, mean per refresh (both daemons):")
    print()
    print("| N | tool | types |\n| --- | --- | --- |")
    for det in details:
        head, _, rest = det.partition("\n")
        print(rest.split("\n\n```")[0])
    for det in details:
        print()
        print(det.split("\n", 1)[0])
        if "```" in det:
            print("\n```" + det.split("```", 1)[1])


if __name__ == "__main__":
    main()
