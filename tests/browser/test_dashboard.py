"""The dashboard in a real browser: Debian's chromium (never a downloaded one), driven by
Playwright, against a real `dispatch serve` on a loopback port with real local jobs.

It logs in with the server's per-start token (the form of the login page, or the URL the
server prints), loads the dashboard, sees a job appear and change state, opens its timeline,
presses cancel (confirming in the dialog) and checks the request is in the job's history;
the page runs under the server's Content-Security-Policy without a violation. Screenshots go to
tests/browser/artifacts/ (git-ignored) for a person to look at.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
        "--disable-component-update", "--no-first-run", "--disable-sync"]
ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
DOCS_IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
WAIT_MS = 60_000  # upper bounds for a slow shared machine, never timing assertions

FAIL_FIRST = ("import os, sys, time\n"
              "time.sleep(1)\n"
              "print('submission', os.environ['DISPATCH_SUBMISSION'], flush=True)\n"
              "sys.exit(3 if os.environ['DISPATCH_SUBMISSION'] == '1' else 0)\n")
SLEEP = "import time; time.sleep(300)"
# Issue 23's case: rank 1 raises once rank 0 has started (rank 0 runs until it is killed).
RANK1_RAISES = ("import os, pathlib, time\n"
                "mark = pathlib.Path.cwd() / (os.environ['DISPATCH_OBJECT'] + '.rank0-started')\n"
                "if os.environ['RANK'] == '0':\n"
                "    mark.write_text('up'); print('rank 0 training', flush=True)\n"
                "    time.sleep(120)\n"
                "while not mark.exists(): time.sleep(0.05)\n"
                "print('step 6 loss 0.1', flush=True)\n"
                "raise FloatingPointError('loss is NaN at step 7')\n")


def screenshot(page: Page, name: str) -> None:
    """With DISPATCH_SCREENSHOTS=1, the page as it is now saved to docs/images/NAME (the
    docs' pictures are made by these tests, run with that variable set)."""
    if os.environ.get("DISPATCH_SCREENSHOTS") == "1":
        DOCS_IMAGES.mkdir(exist_ok=True)
        page.screenshot(path=str(DOCS_IMAGES / name))


class Server:
    def __init__(self, tmp: Path) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.local = tmp / "local"
        env = dict(os.environ)
        env.update({"DISPATCH_STORE": str(tmp / "record.sqlite3"),
                    "DISPATCH_LOCAL_ROOT": str(self.local),
                    "XDG_STATE_HOME": str(tmp / "state"),
                    # a socket path has at most 107 bytes: a short directory for it
                    "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="dxr-", dir="/tmp")})
        self.log = (tmp / "serve.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dispatch.cli", "serve", "--port", str(self.port),
             "--poll", "0.3"], env=env, cwd=tmp, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 60
        while True:
            assert self.proc.poll() is None, (tmp / "serve.log").read_text()
            try:
                httpx2.get(self.url + "/login", timeout=5).raise_for_status()
                break
            except httpx2.TransportError:
                assert time.monotonic() < deadline, "dispatch serve never answered"
                time.sleep(0.2)
        self.token = (tmp / "state" / "dispatch" / f"serve-{self.port}.token").read_text().strip()
        self.client = httpx2.Client(base_url=self.url, timeout=60,
                                    headers={"Authorization": f"Bearer {self.token}"})

    def log_in(self, page: Page) -> None:
        """As a person does: the URL the server printed."""
        page.goto(self.url + "/login?token=" + self.token)

    def submit(self, name: str, body: str, **fields: Any) -> str:
        r = self.client.post("/api/jobs", json={"name": name, "backend": "local",
                                                "command": [sys.executable, "-c", body],
                                                **fields})
        assert r.status_code == 201, r.text
        return str(r.json()["job"])

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()
        subprocess.run(["pkill", "-f", str(self.local)], check=False)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    s = Server(tmp_path)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), (
        f"{CHROMIUM} is missing: scripts/test installs Debian's chromium and chromium-driver")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    # a Content-Security-Policy violation is a console error, not a page error
    page.on("console", lambda m: errors.append(m.text) if "Content Security Policy" in m.text
            else None)
    try:
        yield page
    finally:
        context.close()
    assert errors == [], f"the page raised: {errors}"


def row(page: Page, job: str) -> Any:
    return page.locator(f'#jobs tbody tr[data-job="{job}"]')


def test_a_job_appears_changes_state_shows_its_timeline_and_is_cancelled(
        server: Server, page: Page) -> None:
    page.goto(server.url + "/")  # no session: the login page
    expect(page).to_have_url(server.url + "/login")
    page.fill("#login-token", "not-the-token")
    page.click("#login-form button")
    expect(page.locator(".problem")).to_contain_text("not valid")
    page.fill("#login-token", server.token)
    page.click("#login-form button")
    expect(page).to_have_url(server.url + "/")
    expect(page.locator("#empty")).to_be_visible(timeout=WAIT_MS)

    job = server.submit("sleepy", SLEEP)
    expect(row(page, job)).to_be_visible(timeout=WAIT_MS)  # appears without a reload
    expect(row(page, job).locator(".state")).to_have_text("running", timeout=WAIT_MS)
    expect(row(page, job).locator("td").nth(1)).to_have_text("sleepy")

    row(page, job).click()
    detail = page.locator("#detail")
    expect(detail).to_be_visible(timeout=WAIT_MS)
    expect(page.locator("#detail-title")).to_contain_text(job)
    bars = page.locator('#timeline .tl-row[data-submission="1"] .tl-bar')
    expect(bars).to_have_count(1, timeout=WAIT_MS)
    expect(bars.first).to_have_class("tl-bar open")  # still running: drawn up to now
    expect(page.locator("#do-resubmit")).to_be_disabled()
    expect(page.locator("#do-cancel")).to_be_enabled()

    asked: list[str] = []

    def dismiss(d: Dialog) -> None:
        asked.append(d.message)
        d.dismiss()
    page.once("dialog", dismiss)  # asked to confirm, and said no: nothing is sent
    page.locator("#do-cancel").click()
    expect(page.locator("#action-result")).to_have_text("cancel not sent")
    assert len(asked) == 1 and job in asked[0] and asked[0].startswith("Cancel")
    history = server.client.get(f"/api/jobs/{job}/history").json()
    assert [h for h in history if h["type"] == "CancelRequested"] == []
    page.once("dialog", lambda d: d.accept())
    page.locator("#do-cancel").click()
    expect(page.locator("#action-result")).to_contain_text("cancel requested",
                                                           timeout=WAIT_MS)
    expect(page.locator("#detail-state")).to_have_text("cancelled", timeout=WAIT_MS)
    expect(page.locator("#do-cancel")).to_be_disabled(timeout=WAIT_MS)
    expect(page.locator('#history li[data-type="CancelRequested"]')).to_have_count(1)
    page.go_back()  # the list, where the job is cancelled too
    expect(row(page, job).locator(".state")).to_have_text("cancelled", timeout=WAIT_MS)

    history = server.client.get(f"/api/jobs/{job}/history").json()
    cancels = [h for h in history if h["type"] == "CancelRequested"]
    assert len(cancels) == 1 and cancels[0]["event"]["actor"]
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-cancelled.png"), full_page=True)


def test_timeline_of_a_recovered_job_and_the_state_filter(server: Server, page: Page) -> None:
    policy = {"rules": [{"on": ["non-zero-exit"], "action": "resubmit", "budget": 2}]}
    recovered = server.submit("recovered", FAIL_FIRST, policy=policy, nodes=2)
    failed = server.submit("failing", RANK1_RAISES, nodes=2)
    server.log_in(page)
    expect(row(page, recovered).locator(".state")).to_have_text("succeeded", timeout=WAIT_MS)
    expect(row(page, failed).locator(".state")).to_have_text("failed", timeout=WAIT_MS)
    expect(row(page, failed).locator("td.cause")).to_have_text("non-zero-exit (exit 1)")
    # a recovered job keeps saying what it recovered from
    expect(row(page, recovered).locator("td.cause")).to_have_text(
        "none (exit 0) after 1 recovery: non-zero-exit")
    page.goto(server.url + f"/#{recovered}")  # an old link opens the job's page
    expect(page).to_have_url(server.url + f"/jobs/{recovered}")

    first = page.locator('#timeline .tl-row[data-submission="1"] .tl-bar')
    second = page.locator('#timeline .tl-row[data-submission="2"] .tl-bar')
    expect(first).to_have_count(1, timeout=WAIT_MS)
    expect(second).to_have_count(1, timeout=WAIT_MS)
    expect(first).to_have_attribute("data-cause", "non-zero-exit", timeout=WAIT_MS)
    expect(second).to_have_attribute("data-cause", "none", timeout=WAIT_MS)
    title = first.get_attribute("title") or ""
    assert "non-zero-exit (exit 3)" in title  # the scheduler's (here: the runner's) words
    assert page.locator("#timeline .tl-mark.recovery").count() >= 1
    expect(page.locator("#do-give-up")).to_be_disabled()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-recovered.png"), full_page=True)

    page.goto(server.url + f"/jobs/{failed}")  # the application's error, in its words
    error = page.locator("#detail-error")
    expect(error).to_contain_text("the application's error: ", timeout=WAIT_MS)
    expect(error).to_contain_text("rank 1 on node1: FloatingPointError: loss is NaN at step 7")
    api = server.client.get(f"/api/jobs/{failed}").json()["application_error"]
    assert (api["rank"], api["node"], api["message"]) == (
        1, "node1", "FloatingPointError: loss is NaN at step 7")
    page.set_viewport_size({"width": 1280, "height": 800})
    expect(error).to_be_in_viewport()  # seen without scrolling (issue 23)
    screenshot(page, "dashboard-error.png")  # docs/why-it-failed.md
    page.goto(server.url + "/")
    page.select_option("#state-filter", "failed")
    expect(row(page, recovered)).to_have_count(0, timeout=WAIT_MS)
    expect(row(page, failed)).to_have_count(1)


def test_a_held_job_is_resubmitted_from_its_timeline(server: Server, page: Page) -> None:
    body = ("import os, signal, sys, time\n"
            "time.sleep(1)\n"
            "if os.environ['DISPATCH_SUBMISSION'] == '1': os.kill(os.getpid(), signal.SIGSEGV)\n"
            "sys.exit(0)\n")
    job = server.submit("held", body, policy={"rules": [{"on": ["unknown"], "action": "hold"}]})
    server.log_in(page)
    expect(page).to_have_url(server.url + "/")
    page.goto(server.url + f"/jobs/{job}")  # a link to the job opens its page
    expect(page.locator("#detail-state")).to_have_text("held", timeout=WAIT_MS)
    expect(page.locator("#detail-cause")).to_contain_text("SIGSEGV")
    expect(page.locator("#timeline .tl-hold").first).to_be_visible()
    expect(page.locator("#do-give-up")).to_be_enabled()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "dashboard-held.png"), full_page=True)
    asked: list[str] = []

    def dismiss(d: Dialog) -> None:
        asked.append(d.message)
        d.dismiss()
    page.once("dialog", dismiss)  # give-up is asked twice; no means nothing is sent
    page.locator("#do-give-up").click()
    expect(page.locator("#action-result")).to_have_text("give-up not sent")
    assert len(asked) == 1 and asked[0].startswith("Give up") and job in asked[0]
    page.locator("#do-resubmit").click()  # resubmit asks nothing
    expect(page.locator("#detail-state")).to_have_text("succeeded", timeout=WAIT_MS)
    expect(page.locator('#timeline .tl-row[data-submission="2"] .tl-bar')).to_have_attribute(
        "data-cause", "none", timeout=WAIT_MS)
    history = server.client.get(f"/api/jobs/{job}/history").json()
    released = [h["event"] for h in history if h["type"] == "HoldReleased"]
    assert len(released) == 1 and released[0].get("resubmit", True) is True  # default omitted
    assert released[0]["actor"]
