"""Issue 36 in Debian's chromium at 1280x800: a list a person can scan for failures. Held
jobs are a banner with their count and a one-click filter (never rows pinned above every
result); the application's error is a column; the search finds causes and error text; a
search that matches nothing says "No jobs.". Screenshots go to tests/browser/artifacts/ (and
with DISPATCH_SCREENSHOTS=1 to docs/images/)."""

from __future__ import annotations

from playwright.sync_api import Page, expect
from test_dashboard import ARTIFACTS, WAIT_MS, Server, row

QUICK = "print('done')"
NAN = ("print('step 6 loss 0.1', flush=True)\n"
       "raise FloatingPointError('loss is NaN at step 7 after warm-up ended')\n")
HOLD_ON_SEGV = ("import os, signal, time\ntime.sleep(0.3)\n"
                "os.kill(os.getpid(), signal.SIGSEGV)\n")
HOLD_POLICY = {"rules": [{"on": ["unknown"], "action": "hold"}]}


def shot(page: Page, name: str) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / name))


def test_held_banner_error_column_search_and_no_jobs(server: Server, page: Page) -> None:
    nan = server.submit("training-nan", NAN)
    fine = [server.submit(f"sweep-{i}", QUICK) for i in range(3)]
    held = [server.submit(f"stuck-{i}", HOLD_ON_SEGV, policy=HOLD_POLICY) for i in range(3)]
    page.set_viewport_size({"width": 1280, "height": 800})
    server.log_in(page)
    banner = page.locator("#held-banner")
    expect(banner).to_contain_text("3 jobs are held", timeout=WAIT_MS)
    expect(banner).to_be_in_viewport()
    for j in held:
        expect(row(page, j).locator(".state")).to_have_text("held", timeout=WAIT_MS)
    expect(row(page, nan).locator(".state")).to_have_text("failed", timeout=WAIT_MS)
    # the application's error, shortened, where a person scans
    expect(row(page, nan).locator("td.app-error-cell")).to_have_text(
        "FloatingPointError: loss is NaN at step 7 after warm-up ended")
    # issue 48: the error was cut at ~45 characters although the row had room (a fixed
    # 22rem), and the cause "non-zero-exit (exit 1)" wrapped onto two lines
    page.set_viewport_size({"width": 1440, "height": 800})
    cut = row(page, nan).locator("td.app-error-cell").evaluate(
        "td => td.scrollWidth > td.clientWidth")
    assert cut is False
    lines = row(page, nan).locator("td.cause").evaluate(
        "td => Math.round(td.getBoundingClientRect().height"
        " / parseFloat(getComputedStyle(td).lineHeight || '16'))")
    one = row(page, nan).locator("td.id").evaluate(
        "td => Math.round(td.getBoundingClientRect().height"
        " / parseFloat(getComputedStyle(td).lineHeight || '16'))")
    assert lines == one, (lines, one)
    shot(page, "dashboard-scan-list-1440.png")
    page.set_viewport_size({"width": 1280, "height": 800})
    for j in fine:
        expect(row(page, j).locator("td.app-error-cell")).to_have_text("")
    shot(page, "dashboard-scan-list.png")

    page.fill("#q", "FloatingPointError")  # the error's words, not a name
    expect(page.locator("#job-rows tr")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#job-rows tr")).to_have_attribute("data-job", nan)
    expect(row(page, nan)).to_be_in_viewport()  # the result is on screen, not below held rows
    for j in held:
        expect(row(page, j)).to_have_count(0)
    assert "q=FloatingPointError" in page.url
    shot(page, "dashboard-search-error.png")

    page.fill("#q", "non-zero-exit")  # a cause
    expect(page.locator("#job-rows tr")).to_have_count(1, timeout=WAIT_MS)
    page.fill("#q", "no job says this")
    expect(page.locator("#job-rows tr")).to_have_count(0, timeout=WAIT_MS)
    expect(page.locator("#empty")).to_be_visible()
    expect(page.locator("#empty")).to_have_text("No jobs.")
    shot(page, "dashboard-search-none.png")

    page.fill("#q", "")
    page.select_option("#state-filter", "failed")  # a filter shows its results, no held rows
    expect(page.locator("#job-rows tr")).to_have_count(1, timeout=WAIT_MS)
    expect(row(page, nan)).to_be_in_viewport()

    page.select_option("#state-filter", "")
    page.click("#held-filter")  # one click: only the held jobs
    expect(page.locator("#job-rows tr")).to_have_count(3, timeout=WAIT_MS)
    assert sorted(str(x) for x in page.locator("#job-rows tr").evaluate_all(
        "rows => rows.map(r => r.dataset.job)")) == sorted(held)
    expect(page.locator("#state-filter")).to_have_value("held")
    expect(banner).to_be_hidden()  # the filter is on: the banner has said its piece
    assert "state=held" in page.url
    shot(page, "dashboard-held-filter.png")


def test_a_job_page_opened_by_name_shows_its_id_and_each_axis_label_once(
        server: Server, page: Page) -> None:
    """Issue 36 (9): a job page opened by the job's name is titled with its id (never
    "name · name"); a short job's timeline axis shows each time once."""
    job = server.submit("training-nan", NAN)
    server.log_in(page)
    page.goto(server.url + "/jobs/training-nan")
    expect(page.locator("#detail-state")).to_have_text("failed", timeout=WAIT_MS)
    expect(page.locator("#detail-title")).to_have_text(f"training-nan · {job}")
    assert page.title() == f"{job} (training-nan) · dispatch"
    labels = [str(t) for t in page.locator("#timeline .tl-axis span").all_inner_texts()]
    assert labels and len(labels) == len(set(labels)), labels
    # one node: nothing says other nodes were killed
    expect(page.locator("#detail-cause")).not_to_contain_text("other nodes")
    shot(page, "dashboard-job-by-name.png")
