"""Issue 49: a scrape of /metrics once its totals are built counts nothing. The store's
counts by outcome (``dispatch_jobs_stored``) are kept from the changed jobs' rows, and a
prune (a job taken out is never a change) is caught by the store's count of removals, one
row (stores/removals.py); no stamp or count of the whole table is read. What each scrape
answers against a whole recomputation is tests/unit/http/test_metrics_totals.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from tests.metrics_oracle import story

from dispatch.core.model import State
from dispatch.http import versions
from dispatch.http.metrics import RecordCollector
from dispatch.service import Service
from dispatch.stores.query import JobQuery
from dispatch.stores.sqlite import SQLiteStore


def test_a_scrape_counts_no_job_and_reads_no_stamp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "r.sqlite3"
    calls: Counter[str] = Counter()

    def counted(name: str) -> Callable[..., Any]:
        real = getattr(SQLiteStore, name)

        def call(self: SQLiteStore, *args: Any, **kwargs: Any) -> Any:
            calls[name] += 1
            return real(self, *args, **kwargs)
        return call

    for name in ("stamp", "count_jobs", "changes", "list_jobs"):
        monkeypatch.setattr(SQLiteStore, name, counted(name))
    listed = versions.every_job

    def every_job(store: SQLiteStore) -> Any:
        calls["every_job"] += 1
        return listed(store)
    monkeypatch.setattr(versions, "every_job", every_job)
    writer = SQLiteStore(path)
    records = {f"j{i}": story(f"j{i}", 2, "local") for i in range(6)}
    for record in records.values():
        writer.create(record[0])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RecordCollector(lambda: Service(SQLiteStore(path))))
    generate_latest(registry)  # the first scrape reads the table whole
    for job_id in ("j1", "j4"):
        writer.append(job_id, records[job_id][1:4], 1)
    calls.clear()
    scraped = generate_latest(registry).decode()
    assert calls == {"changes": 1}
    counts = writer.count_jobs(JobQuery())
    assert f'dispatch_jobs_stored{{state="unfinished"}} {float(counts[""])}' in scraped
    # a prune between two scrapes is caught by the count of removals: the table is read
    # whole (one scan of the jobs table, ``every_job``: no list of JobRows)
    for job_id in ("j2", "j5"):
        writer.append(job_id, records[job_id][1:], 1)
    writer.prune(2**62, act=True)
    calls.clear()
    scraped = generate_latest(registry).decode()
    assert calls == {"every_job": 1}  # the mark and one scan of the jobs table
    counts = writer.count_jobs(JobQuery())
    assert sum(counts.values()) == 4  # j2 and j5 are gone, and counted so
    stored = [line for line in scraped.splitlines() if line.startswith("dispatch_jobs_stored{")]
    assert sorted(stored) == sorted(
        f'dispatch_jobs_stored{{state="{s.value}"}} {float(counts.get(s.value, 0))}'
        for s in State if s.terminal) + [
        f'dispatch_jobs_stored{{state="unfinished"}} {float(counts[""])}']
    writer.close()
