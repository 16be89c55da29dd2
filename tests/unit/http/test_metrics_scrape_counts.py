"""Issue 49: a scrape of /metrics once its totals are built counts the store's jobs once.
Its counts by outcome (``dispatch_jobs_stored``) are also what catches a prune (a job taken
out is never a change), so no stamp of the whole table is read beside them; what each
scrape answers against a whole recomputation is tests/unit/http/test_metrics_totals.py."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from tests.metrics_oracle import story

from dispatch.http.metrics import RecordCollector
from dispatch.service import Service
from dispatch.stores.query import JobQuery
from dispatch.stores.sqlite import SQLiteStore


def test_a_scrape_counts_the_jobs_once_and_reads_no_stamp(
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
    assert calls == {"changes": 1, "count_jobs": 1}
    counts = writer.count_jobs(JobQuery())
    assert f'dispatch_jobs_stored{{state="unfinished"}} {float(counts[""])}' in scraped
    # a prune between two scrapes is still caught by that count: the table is read whole
    for job_id in ("j2", "j5"):
        writer.append(job_id, records[job_id][1:], 1)
    writer.prune(2**62, act=True)
    calls.clear()
    generate_latest(registry)
    assert calls == {"changes": 2, "count_jobs": 2, "list_jobs": 1}
    writer.close()
