"""The dashboard's goodput (issue 25) in a real browser: the job page shades lost work on the
timeline and shows the split; the list page draws the fleet's badput by cause per day as SVG.
The records (a 64-node job preempted once after a checkpoint) are written to the store before
`dispatch serve` starts."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from test_dashboard import ARTIFACTS, WAIT_MS, Server, screenshot
from tests.goodput_stories import preempted_once

from dispatch.core import events as ev
from dispatch.stores.sqlite import SQLiteStore


@pytest.fixture
def stocked(tmp_path: Path) -> Iterator[Server]:
    at = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=2)
    with SQLiteStore(tmp_path / "record.sqlite3") as store:
        record = preempted_once(64, job_id="big", at=at, backend="slurm").record
        created = record[0]
        assert isinstance(created, ev.JobCreated)
        store.create(created)
        store.append("big", record[1:], 1)
    s = Server(tmp_path)
    try:
        yield s
    finally:
        s.close()


def test_the_job_page_shades_lost_work_and_shows_the_split(stocked: Server,
                                                           page: Page) -> None:
    stocked.log_in(page)
    page.goto(stocked.url + "/jobs/big")
    lost = page.locator('#timeline .tl-row[data-goodput="1"] .tl-lost')
    expect(lost).to_have_count(1, timeout=WAIT_MS)
    expect(lost).to_have_attribute("data-cause", "preempted")
    assert "lost work, charged to preempted: 35s on 64 node(s)" in (
        lost.get_attribute("title") or "")
    phases = page.locator('#timeline .tl-row[data-goodput="1"] .tl-phase')
    expect(phases).to_have_count(4)  # queued, running, recovering, running
    # issue 48: the legend lists only the causes this timeline shows, not all 14
    legend = page.locator("#legend span[data-cause]")
    expect(legend).to_have_count(2)
    assert sorted(legend.evaluate_all("xs => xs.map(x => x.dataset.cause)")) == [
        "none", "preempted"]
    expect(page.locator("#legend")).not_to_contain_text("out-of-memory")
    table = page.locator("#goodput")
    # units that fit the figures (issue 36): 20 s recovering on 64 nodes = 21.3 node-min;
    # 35 s lost = 37.3 node-min; 5 s queued = 5.33 node-min; 200 s waited = 3.56 node-h
    expect(table.locator('tr[data-key="recovering · preempted"] td')).to_have_text(
        "21.3 node-min")
    expect(table.locator('tr[data-key="lost work · preempted"] td')).to_have_text(
        "37.3 node-min")
    expect(table.locator('tr[data-key="queued"] td')).to_have_text("5.33 node-min")
    expect(table.locator('tr[data-key="time to result"] td')).to_have_text("3.56 node-h")
    # only running holds nodes here: 175 s on 64 nodes; 140 of its 175 s were useful
    expect(table.locator('tr[data-key="allocated node-time"] td')).to_have_text("3.11 node-h")
    expect(table.locator('tr[data-key="goodput of time to result"] td')).to_have_text("70%")
    expect(table.locator('tr[data-key="goodput of allocated"] td')).to_have_text("80%")
    # the durations are the same split's phases (one computation), in plain time
    durations = page.locator("#durations")
    for phase, text in (("queued", "5s"), ("running", "2m 55s"), ("recovering", "20s"),
                        ("held", "0s"), ("stopping", "0s"), ("settling", "0s"),
                        ("total", "3m 20s")):
        expect(durations.locator(f'tr[data-key="{phase}"] td')).to_have_text(text)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-goodput-job.png"), full_page=True)
    page.set_viewport_size({"width": 1280, "height": 800})
    page.locator("#goodput").scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / "dashboard-goodput-table.png"))
    screenshot(page, "dashboard-goodput.png")


def test_the_fleet_chart_draws_badput_by_cause_per_day(stocked: Server, page: Page) -> None:
    stocked.log_in(page)
    bars = page.locator('#badput-chart svg rect[data-cause="preempted"]')
    expect(bars.first).to_be_visible(timeout=WAIT_MS)
    assert bars.count() in (1, 2)  # the story may straddle midnight UTC
    # issue 48: the chart is scaled to the data, not 14 days of which 13 are empty
    labels = page.locator("#badput-chart svg text[data-day]")
    assert labels.count() in (1, 2), labels.all_text_contents()
    expect(page.locator("#badput-legend")).to_contain_text("preempted")
    expect(page.locator("#fleet-goodput-line")).to_have_text(
        "· goodput 70% of time to result (3.56 node-h), 80% of allocated node-time "
        "(3.11 node-h), 1 job(s)")
    page.screenshot(path=str(ARTIFACTS / "dashboard-goodput-fleet.png"), full_page=True)
