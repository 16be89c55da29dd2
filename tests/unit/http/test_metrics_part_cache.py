"""Issue 49: a cold collector takes the /metrics parts the store keeps (stores/part_cache.py)
and reads only the other records. Through any history of writes, prunes, restarts, records
edited in place and cached parts spoilt (torn, another job's, another format, an older
part under a current row, all dropped), every scrape renders exactly what a whole
recomputation over every record renders (tests/metrics_oracle.py; the same on PostgreSQL:
tests/integration/stores/test_store_metrics_part_cache.py)."""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.metrics_oracle import LIFE_STEPS, Life, cache_sql, run_life, story

from dispatch.http import kept_parts, part_codec
from dispatch.http.fleet_tally import Part
from dispatch.service import Service
from dispatch.stores.base import StoreError
from dispatch.stores.sqlite import SQLiteStore


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=LIFE_STEPS, data=st.data())
def test_a_cold_collector_with_any_cache_equals_a_whole_recomputation(
    steps: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        Service(SQLiteStore(Path(tmp) / "r.sqlite3")) as service,
    ):
        run_life(Life(service), steps, data)


def read_counted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job ids whose whole records the store is asked for, from now on."""
    asked: list[str] = []
    real = SQLiteStore.read_many

    def read_many(self: SQLiteStore, job_ids: Sequence[str]) -> Any:
        asked.extend(job_ids)
        return real(self, job_ids)
    monkeypatch.setattr(SQLiteStore, "read_many", read_many)
    return asked


def test_a_restarted_collector_reads_only_the_records_whose_part_is_not_cached(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Service(SQLiteStore(tmp_path / "r.sqlite3")) as service:
        life = Life(service)
        for i in range(8):
            life.new(story(f"j{i}", 1 + i % 3, "local"))
            life.advance(f"j{i}", 1 + i)
        life.check("the first scrape")  # computes every part, and keeps it
        life.advance("j3", 2)  # moved past its cached part
        life.damage("torn", 5)  # j5's part no longer decodes
        asked = read_counted(monkeypatch)
        life.restart()
        life.collector.totals(service)  # its first scrape
        life.collector.parts_writer.flush()
        assert sorted(asked) == ["j3", "j5"]
        life.check("a restarted collector's first scrape")
        # and it wrote those two again: the next restart reads no record
        asked.clear()
        life.restart()
        life.collector.totals(service)
        life.collector.parts_writer.flush()
        assert asked == []
        life.check("another restart")


def test_an_edited_record_is_never_taken_from_the_cache(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with Service(SQLiteStore(tmp_path / "r.sqlite3")) as service:
        life = Life(service)
        for i in range(3):
            life.new(story(f"j{i}", 2, "local"))
            life.advance(f"j{i}", 4)
        life.check("the first scrape")
        sql = "SELECT job_id, version, body FROM metric_parts ORDER BY job_id"
        before = cache_sql(service.store, sql, "")
        life.edit("j1")  # its version is the same: only the edit mark tells
        asked = read_counted(monkeypatch)
        life.restart()
        life.collector.totals(service)
        assert asked == ["j1"]
        life.check("a restarted collector's first scrape")
        assert life.unusable == 1
        assert cache_sql(service.store, sql, "") == before  # its row unused, never rewritten


def test_a_part_round_trips_and_a_body_for_another_job_or_version_is_none() -> None:
    part = Part(state="running", outcomes=(("failed", "oom"),), recoveries=("preempted",),
                escalations=("none",), app_error="oom", budget=(("s", "preempted", 2),),
                backend="local", live=True, submitted=True)
    body = part_codec.encode("j", 7, part)
    assert body is not None and part_codec.decode("j", 7, body) == part
    assert part_codec.decode("k", 7, body) is None
    assert part_codec.decode("j", 8, body) is None
    assert part_codec.decode("j", 7, body[:-1]) is None
    assert part_codec.encode("j", 7, Part(state=None)) is None


def test_a_part_that_cannot_be_written_is_logged_and_the_scrape_answers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def refused(*args: Any) -> None:
        raise StoreError("the disk is full")
    monkeypatch.setattr(kept_parts, "write_parts", refused)
    with Service(SQLiteStore(tmp_path / "r.sqlite3")) as service:
        life = Life(service)
        for i in range(3):
            life.new(story(f"j{i}", 2, "local"))
        life.check("a scrape whose parts are not kept")
        assert "3 /metrics parts were not cached: the disk is full" in caplog.text
        assert cache_sql(service.store, "SELECT job_id FROM metric_parts", "") == []
        life.restart()
        life.check("a restart: every record read again")
