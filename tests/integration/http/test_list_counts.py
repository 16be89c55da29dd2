"""Issue 48 item 9: the API's list (GET /api/jobs's pages: service/listing.py, in process over a
real SQLite record) says how many jobs match on all its pages together and how many of each
state its other filters keep (the dashboard's counts, each a link to its ``?state=``), and
gives each row the time its outcome was committed (the ended and duration columns), with
both as orders."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.fleet import NAMES, created_at, fill, job_id

from dispatch.service import Service
from dispatch.service.held import HeldIndex
from dispatch.service.listing import list_page, parse_list_request
from dispatch.stores.sqlite import SQLiteStore

NOW = created_at("sweep") + timedelta(hours=1)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteStore]:
    store = SQLiteStore(tmp_path / "record.sqlite3")
    with store:
        fill(store)  # 12 succeeded (2 after a preemption), 1 failed, sweep-12 unfinished
        yield store


@pytest.fixture
def service(store: SQLiteStore) -> Service:
    return Service(store, clock=lambda: NOW)


def body(service: Service, **params: str) -> dict[str, Any]:
    return list_page(service, parse_list_request({"limit": "5", **params}, ["local", "slurm"]))


def test_counts_per_state_and_the_matches_of_every_page(service: Service) -> None:
    b = body(service)
    assert b["counts"] == {"succeeded": 12, "failed": 1, "pending": 1}
    assert b["total"] == 14 and len(b["jobs"]) == 5  # three pages of five
    # a state filter: its matches; the counts leave the state aside (each is a link)
    b = body(service, state="failed")
    assert b["total"] == 1 and [r["name"] for r in b["jobs"]] == ["sweep-5"]
    assert b["counts"] == {"succeeded": 12, "failed": 1, "pending": 1}
    assert body(service, state="pending")["total"] == 1
    assert body(service, state="live")["total"] == 1
    assert body(service, state="held")["total"] == 0


def test_counts_follow_the_other_filters(service: Service) -> None:
    b = body(service, name="sweep-1*")
    assert b["counts"] == {"succeeded": 3, "pending": 1} and b["total"] == 4
    # a cause: the unfinished job's record has none of it
    b = body(service, cause="preempted")
    assert b["counts"] == {"succeeded": 2} and b["total"] == 2
    b = body(service, q="sweep-1", state="succeeded")  # a search: decided on each record
    assert b["counts"] == {"succeeded": 3, "pending": 1} and b["total"] == 3
    b = body(service, backend="slurm")
    assert b["counts"] == {} and b["total"] == 0


def test_a_servers_held_index_counts_the_unfinished(store: SQLiteStore) -> None:
    index = HeldIndex()
    service = Service(store, clock=lambda: NOW, held_index=index)
    # not built yet: the unfinished jobs are one count, never folded by the request
    assert body(service)["counts"] == {"succeeded": 12, "failed": 1, "live": 1}
    assert body(service, state="live")["total"] == 1
    b = body(service, state="pending")  # its rows, but not yet how many on every page
    assert b["total"] is None and [r["name"] for r in b["jobs"]] == ["sweep-12"]
    index.held(store, NOW)  # built (as its background thread does)
    assert body(service)["counts"] == {"succeeded": 12, "failed": 1, "pending": 1}
    assert body(service, state="pending")["total"] == 1


def test_jobs_finished_before_outcomes_were_kept_are_counted_from_their_records(
        store: SQLiteStore, service: Service, tmp_path: Path) -> None:
    import sqlite3

    conn = sqlite3.connect(tmp_path / "record.sqlite3", isolation_level=None)
    conn.execute("UPDATE jobs SET outcome = NULL WHERE job_id = ?", (job_id("sweep-5"),))
    conn.close()
    assert body(service)["counts"] == {"succeeded": 12, "failed": 1, "pending": 1}
    assert body(service, state="failed")["total"] == 1


def test_rows_say_when_they_ended_and_sort_by_it_and_by_duration(service: Service) -> None:
    rows = body(service, limit="50")["jobs"]
    ended = {r["name"]: r.get("ended_at") for r in rows}
    assert ended["sweep-12"] is None  # unfinished: left out of its row
    assert ended["eval"] == (created_at("eval") + timedelta(seconds=30)).isoformat()
    # ended, newest first: the unfinished job (not ended) last
    names = [r["name"] for r in body(service, limit="50", order="-ended")["jobs"]]
    assert names[0] == "sweep" and names[-1] == "sweep-12"
    # duration (creation to the outcome, or to now): the unfinished one is the longest
    # (an hour and more), every other took 30 s (ties: newest first)
    names = [r["name"] for r in body(service, limit="50", order="-duration")["jobs"]]
    assert names == ["sweep-12", *reversed([n for n in NAMES if n != "sweep-12"])]
    # keyset pages of a derived order: every job once
    seen: list[str] = []
    params = {"limit": "4", "order": "duration"}
    while True:
        b = list_page(service, parse_list_request(params, ["local"]))
        seen += [r["name"] for r in b["jobs"]]
        if b["next"] is None:
            break
        params["after"] = b["next"]
    assert sorted(seen) == sorted(NAMES) and seen[-1] == "sweep-12"
