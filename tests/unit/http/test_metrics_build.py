"""Issue 49: how serve builds the /metrics totals at start. The build that reads every
record runs with the cyclic collector paused (support/gc_pause.py), and after the held
index's build, never beside it (two builds at once share one interpreter lock). The totals
themselves are the whole recomputation's either way (test_metrics_totals.py)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.metrics_oracle import story

from dispatch.http import app as app_module
from dispatch.http import metrics
from dispatch.http.auth import Tokens
from dispatch.http.metrics import RecordCollector
from dispatch.service import Service
from dispatch.service.held import HeldIndex
from dispatch.stores.sqlite import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    p = tmp_path / "r.sqlite3"
    with SQLiteStore(p) as store:
        for i in range(3):
            record = story(f"j{i}", 2, "local")
            store.create(record[0])
            store.append(f"j{i}", record[1:], 1)
    return p


@pytest.fixture
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    (gc.enable if was else gc.disable)()


def test_reading_every_record_runs_with_the_cyclic_collector_paused(
        path: Path, monkeypatch: pytest.MonkeyPatch, collector_on: None) -> None:
    seen: list[tuple[int, bool]] = []
    fold = metrics.fold_with_records

    def watched(store: Any, ids: Any, now: datetime) -> Any:
        seen.append((len(ids), gc.isenabled()))
        return fold(store, ids, now)

    monkeypatch.setattr(metrics, "fold_with_records", watched)
    collector = RecordCollector(lambda: Service(SQLiteStore(path)))
    collector.warm().join()
    assert gc.isenabled()
    with SQLiteStore(path) as store:
        record = story("j9", 1, "local")
        store.create(record[0])
    list(collector.collect())  # one job written to since: read with the collector running
    assert seen == [(3, False), (1, True)]


def test_the_totals_are_built_after_the_build_given_as_after(path: Path) -> None:
    go = threading.Event()
    first = threading.Thread(target=go.wait, daemon=True)
    first.start()
    collector = RecordCollector(lambda: Service(SQLiteStore(path)))
    build = collector.warm(after=first)
    # The build cannot have run: it joins ``first``, which waits for ``go``. Meanwhile a
    # scrape answers the store's counts, not the totals.
    names = {f.name for f in collector.collect()}
    assert "dispatch_jobs" not in names and "dispatch_jobs_stored" in names
    go.set()
    build.join()
    names = {f.name for f in collector.collect()}
    assert "dispatch_jobs" in names


def test_serve_builds_its_totals_after_its_held_index(
        path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    afters: list[threading.Thread | None] = []
    helds: list[threading.Thread] = []
    warm_totals, warm_held = RecordCollector.warm, HeldIndex.warm

    def totals(self: RecordCollector, after: threading.Thread | None = None
               ) -> threading.Thread:
        afters.append(after)
        return warm_totals(self, after)

    def held(self: HeldIndex, *args: Any) -> threading.Thread:
        helds.append(warm_held(self, *args))
        return helds[-1]

    monkeypatch.setattr(RecordCollector, "warm", totals)
    monkeypatch.setattr(HeldIndex, "warm", held)
    server = app_module.make_server(f"sqlite://{path}", Tokens({}), loopback_bind=False)
    assert len(helds) == 1 and afters == [helds[0]]
    helds[0].join()
    with server.service() as service:
        assert server.held_index.live_if_ready(service.store, T0 + timedelta(days=1)) is not None
