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
