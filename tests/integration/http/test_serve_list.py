"""GET /api/jobs as pages (filters, search over names, ids, causes and application errors,
order, keyset cursor, the held jobs' count), light rows gzipped when asked, ETag/304 on the
list and a job's reads, and a 400 naming each bad parameter; against a real `dispatch serve`
over a real SQLite record and local jobs."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from serve_harness import Served, spec

QUICK = "print('hi')"
HOLD = ("import os, signal, time\ntime.sleep(0.3)\nos.kill(os.getpid(), signal.SIGSEGV)\n")
HOLD_POLICY = {"rules": [{"on": ["unknown"], "action": "hold"}]}


def _page(s: Served, **params: Any) -> dict[str, Any]:
    r = s.client.get("/api/jobs", params=params)
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


def _all_pages(s: Served, **params: Any) -> list[str]:
    ids: list[str] = []
    after = None
    while True:
        page = _page(s, **params, **({"after": after} if after else {}))
        ids += [j["job"] for j in page["jobs"]]
        after = page["next"]
        if after is None:
            return ids


def test_pages_filters_search_and_order(serve: Callable[..., Served]) -> None:
    s = serve()
    jobs = [s.submit(spec(f"alpha-{i}", QUICK)) for i in range(4)]
    jobs += [s.submit(spec(f"beta-{i}", QUICK)) for i in range(3)]
    held = s.submit(spec("stuck", HOLD, policy=HOLD_POLICY))
    for j in jobs:
        s.wait_for(j, lambda st: st["settled"])
    s.wait_for(held, lambda st: st["state"] == "held")
    everything = [*jobs, held]

    assert isinstance(s.client.get("/api/jobs?all=1").json(), list)  # the old shape stays
    first = _page(s, limit=3)
    assert [j["job"] for j in first["jobs"]] == everything[::-1][:3]  # newest first
    # held jobs are counted (the dashboard's banner), never pinned into every page
    assert first["held_count"] == 1 and "held" not in first
    assert _all_pages(s, limit=3) == everything[::-1]  # each job once
    assert _all_pages(s, limit=2, order="created") == everything
    assert _all_pages(s, limit=2, order="name") == everything  # alpha-*, beta-*, stuck
    assert _all_pages(s, limit=2, order="-name") == everything[::-1]
    assert _all_pages(s, limit=2, q="BETA") == jobs[4:][::-1]  # any case
    assert _all_pages(s, limit=5, q=held[:6]) == [held]  # an id prefix
    assert _all_pages(s, limit=2, state="held") == [held]
    assert _all_pages(s, limit=2, state="succeeded") == jobs[::-1]
    assert _all_pages(s, limit=3, state="succeeded", order="state") == jobs
    assert _all_pages(s, limit=2, cause="unknown") == [held]
    # a filter only the record knows, in a store column's order
    assert _all_pages(s, limit=2, state="succeeded", order="-name") == [
        *jobs[4:][::-1], *jobs[:4][::-1]]
    assert _all_pages(s, limit=3, cause="none", order="job") == sorted(jobs)
    # descending on the whole key: "succeeded" before "held", each newest first
    assert _all_pages(s, limit=2, order="-state") == [*jobs[::-1], held]
    assert _all_pages(s, limit=2, backend="slurm") == []
    assert _all_pages(s, limit=50, order="submissions") == everything


NAN = "print('step 6', flush=True)\nraise FloatingPointError('loss is NaN at step 7')"


def test_search_finds_causes_and_application_errors_and_rows_stay_light(
        serve: Callable[..., Served]) -> None:
    s = serve()
    nan = s.submit(spec("trainer", NAN))
    ok = s.submit(spec("fine", QUICK))
    exit3 = s.submit(spec("exits", "import sys; sys.exit(3)"))
    for j in (nan, ok, exit3):
        s.wait_for(j, lambda st: st["settled"])
    assert _all_pages(s, limit=2, q="FloatingPointError") == [nan]  # the error's words
    assert _all_pages(s, limit=2, q="loss is nan") == [nan]  # any case
    assert _all_pages(s, limit=5, q="non-zero-exit") == [exit3, nan]  # the cause's kind
    assert _all_pages(s, limit=5, q="non-zero-exit", state="failed",
                      order="name") == [exit3, nan]
    assert _all_pages(s, limit=5, q="no job says this") == []
    assert _all_pages(s, limit=5, q="fin") == [ok]  # names still match
    assert _all_pages(s, limit=5, since="2099-01-01") == []  # created since (as ls --since)
    assert _all_pages(s, limit=5, since="2000-01-01", q="exits") == [exit3]
    row = next(j for j in _page(s, limit=5)["jobs"] if j["job"] == nan)
    assert row["app_error"] == "FloatingPointError: loss is NaN at step 7"
    assert row["cause"]["kind"] == "non-zero-exit" and row["state"] == "failed"
    assert "history" not in row and "application_error" not in row  # the list's own row
    r = s.client.get("/api/jobs", params={"limit": 50, "q": "e"},
                     headers={"Accept-Encoding": "gzip"})
    body = r.json()
    per_job = len(json.dumps(body["jobs"]).encode()) / len(body["jobs"])
    assert per_job <= 600, per_job
    r = s.client.get("/api/jobs", params={"limit": 50}, headers={"Accept-Encoding": "identity"})
    assert "content-encoding" not in r.headers and r.headers["vary"] == "Accept-Encoding"


def test_unchanged_data_is_a_304_and_a_change_is_not(serve: Callable[..., Served]) -> None:
    s = serve()
    job = s.submit(spec("sleepy", "import time; time.sleep(600)"))
    s.wait_for(job, lambda st: st["state"] == "running")
    paths = ["/api/jobs?limit=10", f"/api/jobs/{job}", f"/api/jobs/{job}/timeline",
             f"/api/jobs/{job}/history"]
    tags = {}
    for p in paths:
        r = s.client.get(p)
        assert r.status_code == 200 and r.headers["etag"], (p, r.text)
        tags[p] = r.headers["etag"]
    for p in paths:
        r = s.client.get(p, headers={"If-None-Match": tags[p]})
        if r.status_code == 200:  # the freshness window turned over: the new tag holds
            tags[p] = r.headers["etag"]
            r = s.client.get(p, headers={"If-None-Match": tags[p]})
        assert r.status_code == 304 and r.content == b"", (p, r.status_code)
    assert s.post(f"/api/jobs/{job}/cancel").status_code == 200
    for p in paths:  # a new event: every tag changes
        r = s.client.get(p, headers={"If-None-Match": tags[p]})
        assert r.status_code == 200 and r.headers["etag"] != tags[p], p


BAD = [("limit=0", "limit"), ("limit=abc", "limit"), ("limit=501", "limit"),
       ("limit=5&order=size", "order"), ("limit=5&state=runing", "state"),
       ("limit=5&cause=preemted", "cause"), ("limit=5&backend=pbs", "backend"),
       ("limit=5&after=%%%", "after"), ("limit=5&q=" + "x" * 201, "q")]


def test_a_bad_parameter_is_a_400_naming_it(serve: Callable[..., Served]) -> None:
    s = serve("--no-supervise")
    for query, named in BAD:
        r = s.client.get("/api/jobs?" + query)
        assert r.status_code == 400, (query, r.text)
        err = r.json()["error"]
        assert err["exit_code"] == 2 and f"query parameter '{named}'" in err["message"], err


def test_a_cursor_of_another_order_is_refused(serve: Callable[..., Served]) -> None:
    s = serve("--no-supervise")
    for i in range(3):
        s.submit(spec(f"j{i}", QUICK))
    nxt = _page(s, limit=1)["next"]
    assert nxt
    r = s.client.get("/api/jobs", params={"limit": 1, "order": "name", "after": nxt})
    assert r.status_code == 400 and "'after'" in r.json()["error"]["message"]
