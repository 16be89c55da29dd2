"""Issue 48: the API's list (GET /api/jobs's pages: service/listing.py, in process over a
real SQLite record) finds a recovered success by the cause it recovered from, and its rows
say that it recovered and from what."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.fleet import fill

from dispatch.service import Service
from dispatch.service.listing import list_page, parse_list_request
from dispatch.stores.sqlite import SQLiteStore


@pytest.fixture
def service(tmp_path: Path) -> Iterator[Service]:
    with SQLiteStore(tmp_path / "record.sqlite3") as store:
        fill(store)
        yield Service(store)


def page(service: Service, **params: str) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = list_page(service, parse_list_request(
        {"limit": "50", **params}, ["local"]))["jobs"]
    return rows


def test_cause_finds_what_a_job_recovered_from(service: Service) -> None:
    rows = page(service, cause="preempted")
    assert [r["name"] for r in rows] == ["sweep-10", "sweep-3"]  # newest first
    for r in rows:
        assert r["state"] == "succeeded" and r["cause"]["kind"] == "none"
        assert r["recoveries"] == 1 and r["recovered_from"] == ["preempted"]
    plain = page(service, q="sweep-4")
    assert plain and "recoveries" not in plain[0] and "recovered_from" not in plain[0]


def test_name_takes_a_pattern_and_the_page_says_how_many_match(service: Service) -> None:
    body = list_page(service, parse_list_request({"limit": "2", "name": "sweep-1*"},
                                                 ["local"]))
    assert [r["name"] for r in body["jobs"]] == ["sweep-12", "sweep-11"]
    assert body["total"] == 4 and body["next"] is not None  # every page together
    body = list_page(service, parse_list_request({"limit": "50", "q": "sweep-1"}, ["local"]))
    assert body["total"] == 4  # a search is counted too
    # every list says how many jobs it holds (issue 48 item 9: "page 1 of 3 · 14 jobs")
    assert list_page(service, parse_list_request({"limit": "5"}, ["local"]))["total"] == 14
    # the plain list (GET /api/jobs?name=...&all=1) takes the same pattern
    assert [v.status.name for v in service.jobs(include_finished=True, name="sweep-?")
            if v.status is not None] == [f"sweep-{i}" for i in range(1, 10)]


def test_names_sort_naturally(service: Service) -> None:
    """sweep-10 after sweep-9, on a store column's order (keyset pages) and on one the
    record decides (a search)."""
    want = ["eval", "sweep", *(f"sweep-{i}" for i in range(1, 13))]
    pages: list[str] = []
    after: dict[str, str] = {}
    while True:
        body = list_page(service, parse_list_request(
            {"limit": "4", "order": "name", **after}, ["local"]))
        pages += [r["name"] for r in body["jobs"]]
        if body["next"] is None:
            break
        after = {"after": body["next"]}
    assert pages == want
    assert [r["name"] for r in page(service, order="-name", q="sweep-")] == want[:1:-1]
