"""P1 through snapshots, this tree against another tree, alternated (a benchmark, not a test).

    git archive COMMIT | tar -x -C /tmp/before                  # the other tree, once
    python bench/bench_p1_ab.py --other /tmp/before --rounds 3  # SQLite and PostgreSQL
    python bench/bench_p1_ab.py --other /tmp/before --no-postgres --jobs 2000

Each measurement is one child process running ``bench/bench_scale.py --p1 URL JOBS`` of
one tree on a fresh store (SQLite file, or a new database of one durable throwaway
PostgreSQL): status of JOBS jobs through their snapshots, and decoding their records, both
best of 5 and interleaved in that child. The ratio of the two is the child's figure: it
does not depend on how fast the machine is in that minute, which on a shared machine moves
more than the code does. The two trees alternate (before, after; then after, before), and
the summary compares each tree's best and median ratios.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]


def one(tree: Path, url: str, jobs: int) -> dict[str, float]:
    res = subprocess.run([sys.executable, str(tree / "bench" / "bench_scale.py"), "--p1", url,
                          str(jobs)], capture_output=True, text=True, cwd=tree, check=False)
    if res.returncode != 0:
        raise SystemExit(f"{tree}: --p1 failed:\n{res.stderr[-3000:]}")
    out: dict[str, float] = json.loads(res.stdout.strip().splitlines()[-1])
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", type=Path, required=True, help="the tree to compare with")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=10_000)  # P1 is defined at 10,000
    ap.add_argument("--no-postgres", action="store_true")
    a = ap.parse_args()
    trees = {"before": a.other.resolve(), "after": ROOT}
    cluster = None
    stores = ["SQLite"]
    if not a.no_postgres:
        from tests.conftest_pg import ThrowawayPostgres  # durable: fsync on

        cluster = ThrowawayPostgres(fast=False).start()
        stores.append("PostgreSQL")
    ratios: dict[tuple[str, str], list[float]] = {}
    print("| round | store | tree | decode | through snapshots | ratio | at (UTC) |")
    print("|---|---|---|---|---|---|---|")
    try:
        for r in range(a.rounds):
            for store in stores:
                for name in (("before", "after") if r % 2 == 0 else ("after", "before")):
                    with tempfile.TemporaryDirectory(prefix="bench-p1-ab-") as tmp:
                        url = (f"sqlite://{tmp}/r.sqlite3" if cluster is None or
                               store == "SQLite" else cluster.new_database())
                        d = one(trees[name], url, a.jobs)
                    ratios.setdefault((store, name), []).append(d["ratio"])
                    print(f"| {r + 1} | {store} | {name} | {d['decode_s']:.3f} s "
                          f"| {d['snap_s']:.3f} s | {d['ratio']:.3f}x "
                          f"| {time.strftime('%H:%M:%S', time.gmtime())} |", flush=True)
    finally:
        if cluster is not None:
            cluster.stop()
    print("\n| store | before: best / median | after: best / median | after / before |")
    print("|---|---|---|---|")
    for store in stores:
        b, f = ratios[(store, "before")], ratios[(store, "after")]
        print(f"| {store} | {min(b):.3f}x / {statistics.median(b):.3f}x "
              f"| {min(f):.3f}x / {statistics.median(f):.3f}x "
              f"| {min(f) / min(b):.2f} (best), "
              f"{statistics.median(f) / statistics.median(b):.2f} (median) |")


if __name__ == "__main__":
    main()
