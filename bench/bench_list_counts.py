"""What the list's counts cost the first page (issue 48 item 9; a benchmark, not a test).

    python bench/bench_list_counts.py                 # 1,000 and 10,000 jobs
    python bench/bench_list_counts.py --jobs 100000

bench_dashboard's record (90% finished, 2% held, the rest pending), the serve application in
this process, a warm server (its held index built), and ``GET /api/jobs?limit=50`` (the first
page, newest first) and ``?limit=50&state=failed`` timed with the counts (service/counts.py:
the store's count by outcome, the live jobs' states from the held index) and without them
(``state_counts`` replaced by one that counts nothing: the page as it was before), the two
interleaved in the same process. Printed: the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT), str(ROOT / "bench")]

from bench_dashboard import fill  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

import dispatch.service.listing as listing  # noqa: E402
from dispatch.http.app import build_app, make_server  # noqa: E402
from dispatch.http.auth import Tokens  # noqa: E402


def one_size(jobs: int, reps: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-counts-"))
    os.environ["DISPATCH_LOCAL_ROOT"] = str(tmp / "local")
    db = tmp / "record.sqlite3"
    fill(db, jobs)
    server = make_server(f"sqlite://{db}", Tokens({}), loopback_bind=False)
    auth = {"Authorization": f"Bearer {server.access.start_token}",
            "Accept-Encoding": "identity"}
    counted = getattr(listing, "state_counts")  # noqa: B009
    with TestClient(build_app(server), base_url="http://127.0.0.1") as client:
        while client.get("/api/jobs?limit=1", headers=auth).json()["held_count"] is None:
            time.sleep(0.05)  # the held index is built in the background
        for path in ("/api/jobs?limit=50", "/api/jobs?limit=50&state=failed"):
            times: dict[bool, list[float]] = {True: [], False: []}
            for i in range(2 * reps):
                with_counts = i % 2 == 0
                setattr(listing, "state_counts",  # noqa: B010 - the page as it was before
                        counted if with_counts else lambda *a, **k: {})
                t = time.perf_counter()
                body = client.get(path, headers=auth).json()
                times[with_counts].append((time.perf_counter() - t) * 1000)
                assert ("total" in body) and (bool(body["counts"]) == with_counts)
            setattr(listing, "state_counts", counted)  # noqa: B010
            new, old = statistics.median(times[True]), statistics.median(times[False])
            print(f"| {jobs:,} | `{path}` | {old:.1f} | {new:.1f} | {new / old:.2f} |")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, action="append")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
    print("| jobs | request | without counts, median ms | with counts, median ms | ratio |")
    print("| --- | --- | --- | --- | --- |")
    for jobs in args.jobs or [1000, 10000]:
        one_size(jobs, args.reps)


if __name__ == "__main__":
    main()
