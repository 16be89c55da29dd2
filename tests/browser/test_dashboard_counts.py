"""Issue 48 item 9 in Debian's chromium at 1280x800 (as test_dashboard.py): what Ray's,
SkyPilot's and sacct's job lists show. Above the list, a compact summary: the jobs of each
state, each a link that filters the list to it (its ?state=, a plain link), the one shown
marked, and the fleet chart scaled to its data; the list says "page 1 of 2 · 6 jobs"; each
row its ended time and duration (sortable); a failure's cause stays on one line. Screenshots
go to tests/browser/artifacts/ for a person to look at."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect
from test_dashboard import ARTIFACTS, SLEEP, WAIT_MS, Server, row

QUICK = "print('done')"
NAN = ("print('step 6 loss 0.1', flush=True)\n"
       "raise FloatingPointError('loss is NaN at step 7 after warm-up ended')\n")
HOLD_ON_SEGV = ("import os, signal, time\ntime.sleep(0.3)\n"
                "os.kill(os.getpid(), signal.SIGSEGV)\n")
HOLD_POLICY = {"rules": [{"on": ["unknown"], "action": "hold"}]}
CLOCK = re.compile(r"^\d\d:\d\d:\d\d$")  # an end on its creation's day: the clock time


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def lines(page: Page, job: str, cell: str) -> int:
    """How many lines the text of the row's cell takes (its line boxes' distinct tops: the
    cell itself is as tall as the row's tallest cell)."""
    return int(row(page, job).locator(cell).evaluate(
        """td => {
             const range = document.createRange();
             range.selectNodeContents(td);
             const half = parseFloat(getComputedStyle(td).lineHeight) / 2;
             const tops = [...range.getClientRects()].map((r) => r.top).sort((a, b) => a - b);
             return tops.filter((t, i) => i === 0 || t - tops[i - 1] > half).length;
           }"""))


def test_counts_pages_durations_and_the_summary_above_the_list(server: Server,
                                                                page: Page) -> None:
    fine = [server.submit(f"sweep-{i}", QUICK) for i in range(3)]
    nan = server.submit("training-nan", NAN)
    held = server.submit("stuck", HOLD_ON_SEGV, policy=HOLD_POLICY)
    running = server.submit("longrun", SLEEP)
    page.set_viewport_size({"width": 1280, "height": 800})
    server.log_in(page)
    for job, state in [*((j, "succeeded") for j in fine), (nan, "failed"), (held, "held"),
                       (running, "running")]:
        expect(row(page, job).locator(".state")).to_have_text(state, timeout=WAIT_MS)

    # the jobs of each state, above the list; "all" is the one shown
    counts = page.locator("#state-counts a")
    expect(counts).to_have_text(["all 6", "held 1", "running 1", "succeeded 3", "failed 1"],
                                timeout=WAIT_MS)
    expect(page.locator('#state-counts a[data-state="all"]')).to_have_attribute(
        "aria-current", "true")
    # the summary (counts, goodput, the chart) sits above the list, which starts on screen
    summary = page.locator("#summary").bounding_box()
    table = page.locator("#jobs").bounding_box()
    assert summary is not None and table is not None
    assert summary["y"] + summary["height"] <= table["y"] < 400, (summary, table)
    chart = page.locator("#fleet-goodput").bounding_box()  # the chart, scaled to its data
    assert chart is not None and chart["height"] <= 160, chart

    # every row says when it ended and how long it took; a running job's time grows
    for job in (*fine, nan):
        expect(row(page, job).locator("td.ended")).to_have_text(CLOCK)
        expect(row(page, job).locator("td.duration")).not_to_have_text("-")
    expect(row(page, running).locator("td.ended")).to_have_text("-")
    before = row(page, running).locator("td.duration").inner_text()
    expect(row(page, running).locator("td.duration")).not_to_have_text(before, timeout=WAIT_MS)
    # issue 48: at 1280 px the cause "non-zero-exit (exit 1)" is one line, and so is the
    # error, which takes the room the other columns leave
    expect(row(page, nan).locator("td.cause")).to_have_text("non-zero-exit (exit 1)")
    shot(page, "dashboard-counts.png")
    assert lines(page, nan, "td.cause") == 1
    assert lines(page, nan, "td.app-error-cell") == 1
    # ten columns: the error's room never squeezes a name or a state onto more lines
    assert lines(page, nan, "td.name") == 1 and lines(page, held, "td.state-cell") == 1
    widths = page.locator("#jobs").evaluate(
        "t => [t.getBoundingClientRect().width, t.parentElement.clientWidth,"
        " t.querySelector('td.app-error-cell').getBoundingClientRect().width]")
    assert widths[0] <= widths[1] and widths[2] >= 150, widths  # nothing runs off the page
    shot(page, "dashboard-counts.png")

    # "page 1 of 2 · 6 jobs", three to a page
    page.evaluate("document.getElementById('page-size').append(new Option('3', '3'))")
    page.select_option("#page-size", "3")
    expect(page.locator("#page-info")).to_have_text("page 1 of 2", timeout=WAIT_MS)
    expect(page.locator("#list-total")).to_have_text("· 6 jobs")
    page.click("#older")
    expect(page.locator("#page-info")).to_have_text("page 2 of 2", timeout=WAIT_MS)
    expect(page.locator("#job-rows tr")).to_have_count(3)

    # a count is a link that filters the list to its state, marked while shown
    failed = page.locator('#state-counts a[data-state="failed"]')
    expect(failed).to_have_attribute("href", "/?state=failed&limit=3")
    failed.click()
    expect(page.locator("#job-rows tr")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#job-rows tr")).to_have_attribute("data-job", nan)
    assert "state=failed" in page.url
    expect(page.locator("#state-filter")).to_have_value("failed")
    expect(page.locator('#state-counts a[data-state="failed"]')).to_have_attribute(
        "aria-current", "true")
    expect(page.locator('#state-counts a[data-state="all"]')).not_to_have_attribute(
        "aria-current", "true")
    expect(page.locator("#state-counts a")).to_have_count(5)  # the others stay, as links
    expect(page.locator("#page-info")).to_have_text("page 1 of 1")
    expect(page.locator("#list-total")).to_have_text("· 1 job")
    shot(page, "dashboard-counts-failed.png")
    # the link alone (a new tab, no script in between) opens the same list
    page.goto(server.url + "/?state=held")
    expect(page.locator("#job-rows tr")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#job-rows tr")).to_have_attribute("data-job", held)
    expect(page.locator('#state-counts a[data-state="held"]')).to_have_attribute(
        "aria-current", "true")

    # the duration sorts: longest first puts an unfinished job (still counting) on top
    page.goto(server.url + "/")
    page.click('#jobs th[data-sort="duration"]')
    expect(page.locator('#jobs th[data-sort="duration"]')).to_have_attribute(
        "aria-sort", "descending")
    expect(page.locator("#job-rows tr").first.locator("td.ended")).to_have_text(
        "-", timeout=WAIT_MS)
    expect(page.locator("#job-rows tr").last.locator("td.ended")).to_have_text(CLOCK)
    page.click('#jobs th[data-sort="ended"]')  # the latest end first
    expect(page.locator('#jobs th[data-sort="ended"]')).to_have_attribute(
        "aria-sort", "descending")
    expect(page.locator("#job-rows tr").first.locator("td.ended")).to_have_text(
        CLOCK, timeout=WAIT_MS)

