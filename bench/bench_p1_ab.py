"""P1 through snapshots, this tree against another tree, alternated (a benchmark, not a test).

    git archive COMMIT | tar -x -C /tmp/before                  # the other tree, once
    python bench/bench_p1_ab.py --other /tmp/before --rounds 3  # SQLite and PostgreSQL
    python bench/bench_p1_ab.py --other /tmp/before --no-postgres --jobs 2000
    python bench/bench_p1_ab.py --same-process --rounds 7   # issue 32 item 7's read path

Each measurement is one child process running ``bench/bench_scale.py --p1 URL JOBS`` of
one tree on a fresh store (SQLite file, or a new database of one durable throwaway
PostgreSQL): status of JOBS jobs through their snapshots, and decoding their records, both
best of 5 and interleaved in that child. The ratio of the two is the child's figure: it
does not depend on how fast the machine is in that minute, which on a shared machine moves
more than the code does. The two trees alternate (before, after; then after, before), and
the summary compares each tree's best and median ratios.

``--same-process``: issue 32 item 7's change to the snapshot read (one more column, the
job's edit count, and the check of it), against the read as it was before (e9c5b69: the
statement without the column, rows without the field), in one process on one store, the
two reads and the decoding of the records interleaved, best of ROUNDS each. This is the
figure least moved by the machine: both variants meet the same minutes.
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


def same_process(url: str, jobs: int, rounds: int) -> dict[str, float]:
    """Status through snapshots with this tree's read and with the read before issue 32
    item 7, and decoding the records, interleaved in this process (bench_scale.p1's store)."""
    from bench.bench_scale import T0, best
    from bench.bench_store import created, story

    from dispatch.core.codec import decode_event, encode_event
    from dispatch.core.status import project
    from dispatch.stores import postgres, snapshot, sqlite
    from dispatch.stores import snapshot_sql as snap
    from dispatch.stores.select import open_store
    from dispatch.stores.snapshot_sql import Stored, as_bytes

    def rows_before(rows: list[tuple[object, ...]]) -> list[Stored]:  # 7 columns, as it was
        return [Stored(j, v, f, as_bytes(b), d, None if e is None else as_bytes(e), jv)
                for j, v, f, b, d, e, jv in rows]  # type: ignore[misc]

    new = (snap.SQLITE_READ, snap.PG_READ, snap.stored_rows)
    old = (snap.SQLITE_READ.replace(", j.edited", ""), snap.PG_READ.replace(", j.edited", ""),
           rows_before)
    assert old[0] != new[0] and old[1] != new[1]

    def use(variant: tuple[str, str, object]) -> None:
        snap.SQLITE_READ, snap.PG_READ = variant[0], variant[1]
        sqlite.stored_rows = postgres.stored_rows = variant[2]  # type: ignore[attr-defined]

    with open_store(url) as store:
        ids = [f"p1-{i:06d}" for i in range(jobs)]
        store.create_many([created(j, i) for i, j in enumerate(ids)])
        for i, j in enumerate(ids):
            store.append(j, story(j, i), 1)
        snapshot.fold_with_snapshots(store, ids, T0)  # writes them
        records = store.read_many(ids)
        raw = [(j, e.seq, encode_event(e)) for j in ids for e in records[j]]

        def decode_only() -> object:
            return [decode_event(body, job_id=j, seq=seq) for j, seq, body in raw]

        def through(variant: tuple[str, str, object]) -> object:
            use(variant)
            folded, errors = snapshot.fold_with_snapshots(store, ids, T0)
            assert not errors and len(folded) == jobs
            return [project(job, None, T0) for job in folded]

        runs: dict[str, list[float]] = {"d": [], "old": [], "new": []}
        for r in range(rounds):
            runs["d"].append(best(decode_only, 1))
            order = ("old", "new") if r % 2 == 0 else ("new", "old")
            for name in order:
                variant = old if name == "old" else new
                runs[name].append(best(lambda v=variant: through(v), 1))  # type: ignore[misc]
        use(new)
    d, o, n = (min(runs[k]) for k in ("d", "old", "new"))
    return {"decode_s": d, "before_s": o, "after_s": n, "before_ratio": o / d,
            "after_ratio": n / d, "after_over_before": n / o,
            "median_after_over_before": statistics.median(runs["new"]) /
            statistics.median(runs["old"]), "runs": runs}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--other", type=Path, help="the tree to compare with")
    ap.add_argument("--same-process", action="store_true")
    ap.add_argument("--child", nargs=3)  # url jobs rounds: one same-process measurement
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--jobs", type=int, default=10_000)  # P1 is defined at 10,000
    ap.add_argument("--no-postgres", action="store_true")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(same_process(a.child[0], int(a.child[1]), int(a.child[2]))))
        return
    if a.same_process:
        return same_process_main(a.jobs, a.rounds, a.no_postgres)
    if a.other is None:
        ap.error("--other TREE, or --same-process")
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


def same_process_main(jobs: int, rounds: int, no_postgres: bool) -> None:
    cluster = None
    if not no_postgres:
        from tests.conftest_pg import ThrowawayPostgres  # durable: fsync on

        cluster = ThrowawayPostgres(fast=False).start()
    print("| store | decode | before | after | before / decode | after / decode "
          "| after / before (best) | (median) |")
    print("|---|---|---|---|---|---|---|---|")
    try:
        for store in ["SQLite"] + ([] if cluster is None else ["PostgreSQL"]):
            with tempfile.TemporaryDirectory(prefix="bench-p1-same-") as tmp:
                url = f"sqlite://{tmp}/r.sqlite3" if cluster is None or store == "SQLite" \
                    else cluster.new_database()
                res = subprocess.run([sys.executable, __file__, "--child", url, str(jobs),
                                      str(rounds)], capture_output=True, text=True,
                                     check=False)
            if res.returncode != 0:
                raise SystemExit(res.stderr[-3000:])
            d = json.loads(res.stdout.strip().splitlines()[-1])
            print(f"| {store} | {d['decode_s']:.3f} s | {d['before_s']:.3f} s "
                  f"| {d['after_s']:.3f} s | {d['before_ratio']:.3f}x "
                  f"| {d['after_ratio']:.3f}x | **{d['after_over_before']:.3f}** "
                  f"| {d['median_after_over_before']:.3f} |", flush=True)
            for k, name in (("d", "decode"), ("old", "before"), ("new", "after")):
                print(f"<!-- {store} {name}: "
                      f"{' '.join(f'{t:.3f}' for t in d['runs'][k])} -->", flush=True)
    finally:
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
