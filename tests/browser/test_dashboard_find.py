"""Issue 48 in Debian's chromium (as test_dashboard.py): a fleet written into the served
record; the search says how many jobs match, names sort naturally (sweep-9 before sweep-10),
and a job that succeeded after a preemption says so on its row and its page's header.
The page is saved to tests/browser/artifacts/dashboard-find.png for a person to look at."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect
from test_dashboard import ARTIFACTS, WAIT_MS, Server
from tests.fleet import fill, job_id

from dispatch.stores.sqlite import SQLiteStore


def names_shown(page: Page) -> list[str]:
    return [str(x) for x in page.locator("#job-rows td.name").all_inner_texts()]


def test_search_count_natural_names_and_recovered_jobs(server: Server, page: Page,
                                                       tmp_path: Path) -> None:
    with SQLiteStore(tmp_path / "record.sqlite3") as store:  # the served record
        fill(store)
    server.log_in(page)
    page.select_option("#page-size", "25")
    page.fill("#q", "sweep-1")
    expect(page.locator("#match-count")).to_have_text("4 matches", timeout=WAIT_MS)
    expect(page.locator("#job-rows tr")).to_have_count(4, timeout=WAIT_MS)
    page.fill("#q", "")
    expect(page.locator("#match-count")).to_be_hidden(timeout=WAIT_MS)

    page.click('#jobs th[data-sort="name"]')
    expect(page.locator('#jobs th[data-sort="name"]')).to_have_attribute("aria-sort",
                                                                       "ascending")
    want = ["eval", "sweep", *(f"sweep-{i}" for i in range(1, 13))]
    expect(page.locator("#job-rows td.name")).to_have_text(want, timeout=WAIT_MS)
    recovered = page.locator(f'#job-rows tr[data-job="{job_id("sweep-10")}"] td.cause')
    expect(recovered).to_contain_text("after 1 recovery: preempted")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-find.png"))

    page.select_option("#cause-filter", "preempted")
    expect(page.locator("#job-rows td.name")).to_have_text(["sweep-3", "sweep-10"],
                                                           timeout=WAIT_MS)
    page.click(f'#job-rows tr[data-job="{job_id("sweep-3")}"] a')
    expect(page.locator("#detail-state")).to_have_text("succeeded", timeout=WAIT_MS)
    expect(page.locator("#detail-recovery")).to_have_text("after 1 recovery: preempted")
    page.screenshot(path=str(ARTIFACTS / "dashboard-find-job.png"))
