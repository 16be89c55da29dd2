"""The dashboard's list and job page in Debian's chromium (as test_dashboard.py): search,
sort, pagination (the page in the address), the held jobs' banner, a job's own URL with the
back button, its logs pane following a running local job, and the confirm dialogs. With
DISPATCH_SCREENSHOTS=1 the list and a job's page are saved to docs/images/ (for
docs/serve.md) at 1280x800."""

from __future__ import annotations

from playwright.sync_api import Dialog, Page, expect
from test_dashboard import WAIT_MS, Server, row, screenshot

QUICK = "print('done')"
TICKER = ("import time\n"
          "for i in range(100000):\n"
          "    print('tick', i, flush=True)\n"
          "    time.sleep(0.2)\n")
HOLD_ON_SEGV = ("import os, signal, time\nprint('loading the data; about to crash with SIGSEGV', "
                "flush=True)\ntime.sleep(0.5)\n"
                "os.kill(os.getpid(), signal.SIGSEGV)\n")


def ids_shown(page: Page) -> list[str]:
    return [str(x) for x in page.locator("#job-rows tr").evaluate_all(
        "rows => rows.map(r => r.dataset.job)")]


def test_search_sort_pages_and_the_held_banner(server: Server, page: Page) -> None:
    jobs = [server.submit(f"alpha-{i}", QUICK) for i in range(5)]
    jobs += [server.submit(f"beta-{i}", QUICK) for i in range(3)]
    held = server.submit("stuck", HOLD_ON_SEGV,
                         policy={"rules": [{"on": ["unknown"], "action": "hold"}]})
    page.set_viewport_size({"width": 1280, "height": 800})
    server.log_in(page)
    expect(page.locator("#held-count")).to_have_text("1 held: waiting for you", timeout=WAIT_MS)
    expect(page.locator("#held-banner")).to_contain_text("1 job is held")
    # the held job is a row in its place (the newest), not pinned above every result
    expect(page.locator(f'#job-rows tr[data-job="{held}"] .state')).to_have_text("held")
    # newest first, page by page
    page.select_option("#page-size", "25")
    expect(page.locator("#job-rows tr")).to_have_count(9, timeout=WAIT_MS)
    assert ids_shown(page) == [held, *reversed(jobs)]
    for j in jobs:  # every finished job says why, in words beside the colour
        expect(row(page, j).locator("td.cause")).to_have_text("none (exit 0)", timeout=WAIT_MS)
    screenshot(page, "dashboard-list.png")

    page.fill("#q", "beta")  # search by name
    expect(page.locator("#job-rows tr")).to_have_count(3, timeout=WAIT_MS)
    assert "q=beta" in page.url  # the list's address says what it shows
    page.fill("#q", jobs[0][:6])  # by id prefix
    expect(page.locator("#job-rows tr")).to_have_count(1, timeout=WAIT_MS)
    expect(page.locator("#job-rows tr")).to_have_attribute("data-job", jobs[0])
    page.fill("#q", "")
    expect(page.locator("#job-rows tr")).to_have_count(9, timeout=WAIT_MS)

    page.click('#jobs th[data-sort="name"]')  # sort by name, then the other way
    expect(page.locator('#jobs th[data-sort="name"]')).to_have_attribute("aria-sort", "ascending")
    expect(page.locator("#job-rows tr").first).to_have_attribute("data-job", jobs[0],
                                                                 timeout=WAIT_MS)
    page.click('#jobs th[data-sort="name"]')  # "stuck" (held) after every beta-*
    expect(page.locator("#job-rows tr").first).to_have_attribute("data-job", held,
                                                                 timeout=WAIT_MS)

    page.click('#jobs th[data-sort="created"]')  # newest first again, three to a page
    page.goto(server.url + "/?order=-created")
    page.evaluate("document.getElementById('page-size').append(new Option('3', '3'))")
    page.select_option("#page-size", "3")
    # page 1: the held job (the newest) and the two before it
    expect(page.locator("#job-rows tr")).to_have_count(3, timeout=WAIT_MS)
    seen = ids_shown(page)
    page.click("#older")
    expect(page.locator("#page-info")).to_have_text("page 2 of 3")
    expect(page.locator("#job-rows tr").first).to_have_attribute("data-job", jobs[5],
                                                                 timeout=WAIT_MS)
    assert "page=2" in page.url  # page 2 is in the address: a reload stays on it
    page.reload()
    expect(page.locator("#page-info")).to_have_text("page 2 of 3", timeout=WAIT_MS)
    expect(page.locator("#job-rows tr").first).to_have_attribute("data-job", jobs[5],
                                                                 timeout=WAIT_MS)
    # the page size is in the address too (issue 48: "page 2 of 3" stays true on a reload)
    expect(page.locator("#page-size")).to_have_value("3")
    page.click("#newer")  # page 1 (the cursors before a linked page are not known)
    expect(page.locator("#page-info")).to_have_text("page 1 of 3")
    page.click("#older")
    expect(page.locator("#page-info")).to_have_text("page 2 of 3")
    expect(page.locator("#job-rows tr").first).to_have_attribute("data-job", jobs[5],
                                                                 timeout=WAIT_MS)
    seen += ids_shown(page)
    page.click("#older")
    expect(page.locator("#page-info")).to_have_text("page 3 of 3")
    expect(page.locator("#job-rows tr").first).to_have_attribute("data-job", jobs[2],
                                                                 timeout=WAIT_MS)
    seen += ids_shown(page)
    expect(page.locator("#older")).to_be_disabled()
    assert seen == [held, *reversed(jobs)]  # each job once, in order
    page.click("#newer")
    expect(page.locator("#page-info")).to_have_text("page 2 of 3")
    expect(page.locator("#job-rows tr").first).to_have_attribute("data-job", jobs[5],
                                                                 timeout=WAIT_MS)


def test_a_jobs_own_page_deep_link_back_button_and_logs_following(
        server: Server, page: Page) -> None:
    first = server.submit("first", QUICK)
    job = server.submit("ticker", TICKER, nodes=2)
    page.set_viewport_size({"width": 1280, "height": 800})
    server.log_in(page)
    expect(row(page, job)).to_be_visible(timeout=WAIT_MS)
    row(page, job).locator("td.name").click()
    expect(page).to_have_url(server.url + f"/jobs/{job}")
    expect(page.locator("#detail-title")).to_contain_text(job, timeout=WAIT_MS)
    expect(page.locator("#list-view")).to_be_hidden()
    # the logs pane follows the running job: new lines arrive without a reload
    expect(page.locator("#logs")).to_contain_text("tick 3", timeout=WAIT_MS)
    expect(page.locator("#logs")).to_contain_text("tick 12", timeout=WAIT_MS)
    expect(page.locator("#log-status")).to_have_text("following…")
    # two nodes: each line says its node, and the pane shows one node when asked
    nodes = page.locator("#log-node option")
    expect(nodes).to_have_count(3, timeout=WAIT_MS)  # all, and each node
    node = str(nodes.nth(2).get_attribute("value"))
    page.select_option("#log-node", node)
    text = page.locator("#logs").text_content() or ""
    assert text and all(line.startswith(f"[{node}] ") for line in text.splitlines()), text
    page.select_option("#log-node", "")
    expect(page.locator('#durations tr[data-key="total"] td')).not_to_have_text("",
                                                                                timeout=WAIT_MS)
    expect(page.locator('#times tr[data-key="created"] td')).to_contain_text("UTC")

    page.go_back()  # the back button returns to the list
    expect(page).to_have_url(server.url + "/")
    expect(page.locator("#list-view")).to_be_visible()
    expect(row(page, first)).to_be_visible(timeout=WAIT_MS)
    page.go_forward()
    expect(page.locator("#detail-title")).to_contain_text(job, timeout=WAIT_MS)

    page.goto(server.url + f"/jobs/{first}")  # a deep link opens the job's page directly
    expect(page.locator("#detail-state")).to_have_text("succeeded", timeout=WAIT_MS)
    expect(page.locator("#detail-error")).to_be_hidden()  # a success is no error
    expect(page.locator("#logs")).to_contain_text("done", timeout=WAIT_MS)
    expect(page.locator("#do-cancel")).to_be_disabled()

    page.goto(server.url + f"/jobs/{job}")  # cancel asks first; the request names its actor
    expect(page.locator("#do-cancel")).to_be_enabled(timeout=WAIT_MS)
    asked: list[str] = []

    def dismiss(d: Dialog) -> None:
        asked.append(d.message)
        d.dismiss()
    page.once("dialog", dismiss)
    page.locator("#do-cancel").click()
    expect(page.locator("#action-result")).to_have_text("cancel not sent")
    assert len(asked) == 1 and asked[0].startswith("Cancel") and job in asked[0]
    page.once("dialog", lambda d: d.accept())
    page.locator("#do-cancel").click()
    expect(page.locator("#detail-state")).to_have_text("cancelled", timeout=WAIT_MS)
    expect(page.locator('#history li[data-type="CancelRequested"] .actor')).to_contain_text(
        "actor: ", timeout=WAIT_MS)
    expect(page.locator("#log-status")).to_have_text("ended", timeout=WAIT_MS)


def test_a_held_job_says_what_to_do_and_give_up_asks_first(server: Server, page: Page) -> None:
    job = server.submit("stuck", HOLD_ON_SEGV, policy={"rules": [
        {"on": ["unknown"], "action": "hold"},
        {"on": ["preempted", "node-lost"], "action": "resubmit", "budget": 3}]})
    page.set_viewport_size({"width": 1280, "height": 800})
    server.log_in(page)
    page.goto(server.url + f"/jobs/{job}")
    expect(page.locator("#detail-state")).to_have_text("held", timeout=WAIT_MS)
    expect(page.locator("#hold-box")).to_be_visible()
    expect(page.locator("#held-count")).to_have_text("1 held: waiting for you")
    expect(page.locator("#hold-commands")).to_have_text(
        f"dispatch resubmit {job}\ndispatch give-up {job}")
    expect(page.locator('#budgets tr[data-key="preempted, node-lost (resubmit)"] td')
           ).to_have_text("0 of 3 used")
    expect(page.locator("#logs")).to_contain_text("SIGSEGV", timeout=WAIT_MS)
    screenshot(page, "dashboard-job.png")
    asked: list[str] = []

    def dismiss(d: Dialog) -> None:
        asked.append(d.message)
        d.dismiss()
    page.once("dialog", dismiss)
    page.locator("#do-give-up").click()
    expect(page.locator("#action-result")).to_have_text("give-up not sent")
    assert len(asked) == 1 and asked[0].startswith("Give up") and job in asked[0]
    page.once("dialog", lambda d: d.accept())
    page.locator("#do-give-up").click()
    expect(page.locator("#detail-state")).to_have_text("failed", timeout=WAIT_MS)
    expect(page.locator("#hold-box")).to_be_hidden()
    expect(page.locator("#held-count")).to_be_hidden(timeout=WAIT_MS)
