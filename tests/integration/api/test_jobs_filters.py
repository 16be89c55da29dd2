"""Issue 48 item 4: ``dispatch.jobs`` takes ``ls``'s filters (state, name pattern, cause,
since, backend), on SQLite and PostgreSQL, answered by the store's index: no record is read
one job at a time (``RecordStore.read`` is never called), however many jobs match."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401  (fixtures)
from tests.fleet import FAILED, LIVE, NAMES, RECOVERED, T0, created_at, fill, job_id

import dispatch
from dispatch.errors import BadInput
from dispatch.stores.postgres import PostgresStore
from dispatch.stores.select import open_store
from dispatch.stores.sqlite import SQLiteStore


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path,
              monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    url = (f"sqlite://{tmp_path / 'record.sqlite3'}" if request.param == "sqlite"
           else str(request.getfixturevalue("postgres_url")))
    with open_store(url) as store:
        fill(store)

    def one_by_one(*_: Any, **__: Any) -> None:
        raise AssertionError("a record was read one job at a time")
    for cls in (SQLiteStore, PostgresStore):
        monkeypatch.setattr(cls, "read", one_by_one)
    yield url


def ids(**filters: Any) -> list[str]:
    return [j.id for j in dispatch.jobs(**filters)]


def test_the_filters_of_ls(store_url: str) -> None:
    s = store_url
    assert ids(store=s) == [job_id(n) for n in NAMES if n in LIVE]
    assert ids(all=True, store=s) == [job_id(n) for n in NAMES]
    assert ids(all=True, state="failed", store=s) == [job_id(n) for n in FAILED]
    assert ids(state="failed", store=s) == [job_id(n) for n in FAILED]  # implies all
    assert ids(state=dispatch.State.PENDING, store=s) == [job_id(n) for n in LIVE]
    assert ids(state="live", store=s) == [job_id(n) for n in LIVE]
    assert ids(cause="preempted", store=s) == [job_id(n) for n in NAMES if n in RECOVERED]
    assert ids(all=True, name="sweep-1*", store=s) == [job_id(f"sweep-{i}")
                                                       for i in (1, 10, 11, 12)]
    assert ids(all=True, name="sweep-1?", state="succeeded", store=s) == [
        job_id("sweep-10"), job_id("sweep-11")]
    assert ids(all=True, since=created_at("sweep-12"), store=s) == [
        job_id(n) for n in NAMES[NAMES.index("sweep-12"):]]
    assert ids(all=True, since=(T0 + timedelta(minutes=13)).isoformat(), store=s) == [
        job_id("sweep")]
    assert ids(all=True, backend="slurm", store=s) == []


def test_a_filter_that_is_not_one_is_bad_input(store_url: str) -> None:
    for filters, words in (({"state": "done"}, "state: 'done' is not a state"),
                           ({"cause": "gone"}, "cause: 'gone' is not a cause"),
                           ({"name": ""}, "name ''"),
                           ({"since": "yesterday"}, "since 'yesterday'")):
        with pytest.raises(BadInput, match=words):
            dispatch.jobs(all=True, store=store_url, **filters)
