"""/metrics goodput counters of a real `dispatch serve` over records in its SQLite store:
exact node-seconds, and the same totals after a restart (read from the record, never kept)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from serve_harness import Served
from test_metrics import samples
from tests.goodput_stories import preempted_once

from dispatch.core import events as ev
from dispatch.stores.sqlite import SQLiteStore


def _store(tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "record.sqlite3") as store:
        for job_id, nodes, backend in (("small", 1, "local"), ("big", 64, "slurm")):
            record = preempted_once(nodes, job_id=job_id, backend=backend).record
            created = record[0]
            assert isinstance(created, ev.JobCreated)
            store.create(created)
            store.append(job_id, record[1:], 1)


def _goodput(s: Served) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {k: v for k, v in samples(s).items()
            if k[0] in ("dispatch_job_seconds_total", "dispatch_lost_work_seconds_total")}


def test_goodput_counters_are_exact_and_survive_a_restart(
        serve: Callable[..., Served], tmp_path: Path) -> None:
    _store(tmp_path)
    s = serve()
    m = _goodput(s)
    key = "dispatch_job_seconds_total"
    assert m[(key, (("backend", "slurm"), ("cause", "preempted"),
                    ("phase", "recovering")))] == 20 * 64
    assert m[(key, (("backend", "slurm"), ("cause", "none"), ("phase", "running")))] == 175 * 64
    assert m[(key, (("backend", "local"), ("cause", "none"), ("phase", "queued")))] == 5
    assert m[("dispatch_lost_work_seconds_total",
              (("backend", "slurm"), ("cause", "preempted")))] == 35 * 64
    assert m[("dispatch_lost_work_seconds_total",
              (("backend", "local"), ("cause", "preempted")))] == 35
    assert _goodput(s) == m  # a second scrape counts nothing twice
    s.close()
    again = serve()
    assert _goodput(again) == m  # a restart reads the same totals from the record


def test_the_fleet_span_takes_ascii_digits_only(serve: Callable[..., Served]) -> None:
    s = serve()
    assert s.client.get("/api/goodput", params={"days": "7"}).status_code == 200
    # Arabic-Indic 7 and fullwidth 7: str.isdigit and int() take them as 7.
    for days in ("\u0667", "\uff17"):
        r = s.client.get("/api/goodput", params={"days": days})
        assert r.status_code == 400 and "days" in r.json()["error"]["message"], r.text
