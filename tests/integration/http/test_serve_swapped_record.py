"""A record with two of its events swapped in place under its snapshot (issue 32 item 7),
read by a real `dispatch serve` over a real SQLite record: the job's page and both list
shapes refuse it as `history` does (exit 5 -> HTTP 500, naming the job), a list's ETag
moves with the edit (no 304 of the page that showed it succeeded), and the other job is
still listed."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

from serve_harness import Served, cli, spec


def swap(path: Path, job: str, i: int, j: int) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    try:
        bodies = dict(db.execute("SELECT seq, body FROM events WHERE job_id = ?"
                                 " AND seq IN (?, ?)", (job, i, j)).fetchall())
        for seq, other in ((i, j), (j, i)):
            db.execute("UPDATE events SET body = ? WHERE job_id = ? AND seq = ?",
                       (bodies[other], job, seq))
    finally:
        db.close()


def test_the_api_refuses_two_events_swapped_under_the_snapshot(
        serve: Callable[..., Served], tmp_path: Path) -> None:
    s = serve()
    a, b = s.submit(spec("alpha", "print('hi')")), s.submit(spec("bravo", "print('hi')"))
    for job in (a, b):
        assert s.wait_for(job, lambda st: st["settled"])["state"] == "succeeded"
    page = s.client.get("/api/jobs", params={"limit": "10"})
    assert page.status_code == 200 and {r["job"] for r in page.json()["jobs"]} == {a, b}
    db = Path(s.env["DISPATCH_STORE"])
    with sqlite3.connect(db) as raw:  # the readers wrote the snapshot at the outcome
        assert raw.execute("SELECT version FROM snapshots WHERE job_id = ?", (a,)).fetchone(
            ) == raw.execute("SELECT version FROM jobs WHERE job_id = ?", (a,)).fetchone()
    swap(db, a, 2, 3)
    history = cli(tmp_path, "history", a)
    assert history.returncode == 5, history.stderr
    said = history.stderr.strip().removeprefix("error: ")
    assert f"job {a}" in said

    got = s.client.get(f"/api/jobs/{a}")
    assert got.status_code == 500, got.text
    assert got.json()["error"]["code"] == "store-unusable" and said in got.text
    # the paged list: not a 304 of the page that showed it succeeded; an error row
    again = s.client.get("/api/jobs", params={"limit": "10"},
                         headers={"If-None-Match": page.headers["etag"]})
    assert again.status_code == 200, again.status_code
    rows = {r["job"]: r for r in again.json()["jobs"]}
    assert rows[a]["error"]["exit_code"] == 5 and said in rows[a]["error"]["message"]
    assert rows[b]["state"] == "succeeded"
    # the plain list (?all=1) the same
    rows = {r["job"]: r for r in s.client.get("/api/jobs", params={"all": "1"}).json()}
    assert set(rows) == {a, b} and rows[a]["error"]["exit_code"] == 5
    assert rows[b]["state"] == "succeeded"
