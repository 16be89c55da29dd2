"""Dashboard refresh benchmark (a benchmark, not a test: nothing here asserts a time).

    python bench/bench_dashboard.py                          # 1,000 and 10,000 jobs
    python bench/bench_dashboard.py --jobs 5000

Builds a SQLite record of JOBS jobs (most finished, some held, the rest pending), runs the
serve application in this process (http/app.py, the same middleware and routes; a bearer
token) and measures what one open dashboard tab costs per refresh:

1. the first load of the list page (``limit=50``, newest first) and of one job's page
   (status, timeline, history): bytes on the wire (status line, headers, body) and the
   application's time per request;
2. a refresh when nothing changed: the same requests with ``If-None-Match`` -> 304;
3. a refresh after one job changed (one event appended): a full answer again;
4. for comparison, the old list (``?all=1``: every job's status and history);
5. issue 36: the list's bytes per job (the JSON of its rows, and on the wire gzipped), the
   first list refresh of a fresh server (which folds every live job into the held index),
   and a /metrics scrape (median of a few), for each ``--jobs`` given (1,000 and 10,000 by
   default).

The time is measured around each request through Starlette's in-process client, so it is
the application's work (routing, the store's queries, JSON) without a network: the median
of ``--reps`` requests. Printed as Markdown, copied into bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from starlette.testclient import TestClient  # noqa: E402

from dispatch.core import events as ev  # noqa: E402
from dispatch.core.model import Cause, CauseKind, State  # noqa: E402
from dispatch.core.policy import Declarations  # noqa: E402
from dispatch.core.spec import JobSpec  # noqa: E402
from dispatch.http.app import build_app, make_server  # noqa: E402
from dispatch.http.auth import Tokens  # noqa: E402
from dispatch.stores.sqlite import SQLiteStore  # noqa: E402

T0 = datetime(2026, 12, 1, tzinfo=UTC)


def fill(path: Path, jobs: int) -> list[str]:
    """JOBS jobs: 90% finished (some after a recovery), 2% held, the rest pending."""
    ids = []
    with SQLiteStore(path) as store:
        created = []
        for i in range(jobs):
            job_id = f"{i:08x}bench"
            ids.append(job_id)
            created.append(ev.JobCreated(
                seq=1, at=T0 + timedelta(seconds=i), job_id=job_id,
                spec=JobSpec(name=f"train-{i % 97}", command=("python", "train.py"),
                             backend="local"),
                declarations=Declarations(backend="local")))
        store.create_many(created)
        for i, job_id in enumerate(ids):
            at = T0 + timedelta(seconds=i, minutes=5)
            if i % 50 == 1:
                store.append(job_id, [ev.HoldPlaced(seq=2, at=at, cause=Cause(
                    kind=CauseKind.UNKNOWN))], 1)
            elif i % 10 != 0:
                state = State.SUCCEEDED if i % 3 else State.FAILED
                kind = CauseKind.NONE if i % 3 else CauseKind.NON_ZERO_EXIT
                store.append(job_id, [ev.OutcomeCommitted(seq=2, at=at, state=state,
                                                          cause=Cause(kind=kind))], 1)
    return ids


def wire_bytes(resp: object) -> int:
    r = resp  # an httpx response: status line, headers and body as sent
    head = len(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\n")  # type: ignore[attr-defined]
    head += sum(len(k) + len(v) + 4 for k, v in r.headers.items())  # type: ignore[attr-defined]
    return head + 2 + len(r.content)  # type: ignore[attr-defined]


def gzipped(resp: object) -> int:
    """Bytes on the wire of a gzipped answer (httpx hands the body on decompressed)."""
    r = resp
    assert r.headers.get("content-encoding") == "gzip"  # type: ignore[attr-defined]
    head = len(f"HTTP/1.1 {r.status_code} {r.reason_phrase}\r\n")  # type: ignore[attr-defined]
    head += sum(len(k) + len(v) + 4 for k, v in r.headers.items())  # type: ignore[attr-defined]
    return head + 2 + int(r.headers["content-length"])  # type: ignore[attr-defined]


def measure(call: Callable[[], object], reps: int) -> tuple[float, int, int]:
    """(median ms, bytes, status) of ``reps`` calls."""
    times, last = [], None
    for _ in range(reps):
        t = time.perf_counter()
        last = call()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times), wire_bytes(last), last.status_code  # type: ignore[attr-defined]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, action="append")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    for jobs in args.jobs or [1000, 10000]:
        one_size(jobs, args.reps)


def one_size(jobs: int, reps: int) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-dash-"))
    os.environ["DISPATCH_LOCAL_ROOT"] = str(tmp / "local")
    db = tmp / "record.sqlite3"
    ids = fill(db, jobs)
    server = make_server(f"sqlite://{db}", Tokens({}), loopback_bind=False)
    auth = {"Authorization": f"Bearer {server.access.start_token}"}
    job = ids[-2]  # a finished job near the top of the list
    page = "/api/jobs?limit=50"
    job_paths = [f"/api/jobs/{job}", f"/api/jobs/{job}/timeline", f"/api/jobs/{job}/history"]
    rows: list[tuple[str, float, int, int]] = []
    light: list[str] = []
    with TestClient(build_app(server), base_url="http://127.0.0.1") as client:
        def get(path: str, etag: str | None = None, gzip: bool = False) -> object:
            headers = dict(auth, **({"If-None-Match": etag} if etag else {}))
            headers["Accept-Encoding"] = "gzip" if gzip else "identity"
            return client.get(path, headers=headers)

        # issue 36: the first refresh of a fresh server (it folds every live job into the
        # held index), the rows' bytes per job, gzipped on the wire, a /metrics scrape
        first_ms, _, _ = measure(lambda: get(page), 1)
        plain = get(page)
        body = json.loads(plain.content)  # type: ignore[attr-defined]
        per_job = len(json.dumps(body["jobs"]).encode()) / max(1, len(body["jobs"]))
        zipped = get(page, gzip=True)
        first_scrape_ms, _, _ = measure(lambda: get("/metrics", gzip=True), 1)
        scrape_ms, _, _ = measure(lambda: get("/metrics", gzip=True), 3)
        scrape_bytes = gzipped(get("/metrics", gzip=True))
        light += [f"| first list refresh (fresh server) | {first_ms:.1f} ms |",
                  f"| list row, JSON | {per_job:.0f} bytes a job |",
                  f"| list page of {len(body['jobs'])}, on the wire | "
                  f"{wire_bytes(plain):,} bytes plain, {gzipped(zipped):,} gzipped |",
                  f"| /metrics scrape | first {first_scrape_ms:.1f} ms, then {scrape_ms:.1f} "
                  f"ms (median), {scrape_bytes:,} bytes gzipped |"]

        for path in [page, *job_paths]:
            rows.append((f"first load `{path.replace(job, 'JOB')}`",
                         *measure(lambda p=path: get(p), reps)))
        tags = {p: get(p).headers["etag"] for p in [page, *job_paths]}
        for path in [page, *job_paths]:
            rows.append((f"unchanged `{path.replace(job, 'JOB')}` (If-None-Match)",
                         *measure(lambda p=path: get(p, tags[p]), reps)))
        with SQLiteStore(db) as store:  # one job changes: the list's tag changes
            v = store.version(ids[0])
            store.append(ids[0], [ev.EscalationRaised(seq=v + 1, at=T0, message="bench")], v)
        rows.append((f"after one change `{page}` (old tag)",
                     *measure(lambda: get(page, tags[page]), 1)))
        rows.append(("old list `/api/jobs?all=1` (every job, no tag)",
                     *measure(lambda: get("/api/jobs?all=1"), max(3, reps // 10))))
    print(f"{jobs} jobs ({sum(1 for i in range(jobs) if i % 50 == 1)} held), "
          f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs\n")
    print("| issue 36 | measured |\n| --- | --- |")
    print("\n".join(light) + "\n")
    print("| request | status | bytes | median ms |\n| --- | --- | --- | --- |")
    for what, ms, size, status in rows:
        print(f"| {what} | {status} | {size:,} | {ms:.1f} |")
    unchanged = [r for r in rows if r[0].startswith("unchanged")]
    print(f"\nA refresh with nothing changed (list + the open job's three reads): "
          f"{sum(r[2] for r in unchanged):,} bytes, "
          f"{sum(r[1] for r in unchanged):.1f} ms of application time in all.")


if __name__ == "__main__":
    main()
