"""What a slow, half-sent, malformed or vanishing request can do to a real `dispatch serve`:
hold nothing, cost one log line at most, and never a traceback. And the headers that keep
the dashboard out of frames and other origins' reach."""

from __future__ import annotations

import os
import re
import resource
import socket
import time
from collections.abc import Callable
from html.parser import HTMLParser
from importlib import resources

import httpx2
from serve_harness import WAIT_S, Served, spec

HALF_OPEN = 1100
SECURITY = {
    "content-security-policy": "default-src 'self'; frame-ancestors 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}


def wait_for_output(s: Served, text: str) -> str:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        out = s.output()
        if text in out:
            return out
        time.sleep(0.2)
    raise AssertionError(f"the server never logged {text!r}:\n{s.output()[-3000:]}")


def half_open(port: int, n: int) -> list[socket.socket]:
    """``n`` connections, each with half a request sent and no token: half of them stop in
    the headers, half in a POST body."""
    held = []
    for i in range(n):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        if i % 2:
            sock.sendall(f"GET /api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: "
                         .encode())
        else:
            sock.sendall(f"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: "
                         "application/json\r\nContent-Length: 10000\r\n\r\n{\"na".encode())
        held.append(sock)
    return held


def test_a_valid_client_is_answered_while_1100_half_sent_requests_are_held(
        serve: Callable[..., Served]) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = HALF_OPEN + 256
    assert hard == resource.RLIM_INFINITY or hard >= want, f"RLIMIT_NOFILE hard {hard}"
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    # the server starts with the usual soft limit of 1024 descriptors: 1,100 connections
    # must not run it out of them
    s = serve(nofile=1024)
    lines_before = s.output().count("\n")
    held = half_open(s.port, HALF_OPEN)
    try:
        # 1 s is the bound; best of 3 fresh connections, as the machine is shared
        times = []
        for _ in range(3):
            with httpx2.Client(base_url=s.url, timeout=30, headers={
                    "Authorization": f"Bearer {s.start_token}"}) as fresh:
                t0 = time.monotonic()
                r = fresh.get("/api/jobs")
                times.append(time.monotonic() - t0)
                assert r.status_code == 200, r.text
                assert fresh.get("/metrics").status_code == 200
        assert min(times) < 1.0, times
        # the oldest half-sent requests were closed to make room; the rest are closed when
        # their request is not complete within the server's 20 s
        out = wait_for_output(s, "a request not complete within 20s")
        last = held[-1]
        last.settimeout(WAIT_S)
        try:
            assert last.recv(100) == b""
        except ConnectionResetError:
            pass
    finally:
        for sock in held:
            sock.close()
    out = s.output()
    assert "Traceback" not in out
    assert out.count("\n") - lines_before < 20, out[-3000:]
    assert "the oldest still waiting for its request" in out


def test_a_client_leaving_mid_body_or_sending_garbage_costs_one_line(
        serve: Callable[..., Served]) -> None:
    s = serve()
    for _ in range(5):
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(f"POST /api/jobs HTTP/1.1\r\nHost: 127.0.0.1:{s.port}\r\n"
                         f"Authorization: Bearer {s.start_token}\r\nContent-Type: "
                         "application/json\r\nContent-Length: 100000\r\n\r\n{\"name\": "
                         .encode())
            time.sleep(0.2)  # the body is being read when the client goes
    for _ in range(50):  # not HTTP at all: uvicorn answers 400
        with socket.create_connection(("127.0.0.1", s.port), timeout=30) as sock:
            sock.sendall(b"NOT HTTP AT ALL\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 400")
    out = wait_for_output(s, "a client left before its request body was complete")
    wait_for_output(s, "refused: an invalid HTTP request")
    time.sleep(1)
    out = s.output()
    assert out.count("left before its request body") == 1, out
    assert out.lower().count("invalid http request") == 1, out
    assert "Traceback" not in out
    assert s.client.get("/api/jobs", params={"all": "1"}).json() == []


def test_duplicate_keys_and_deep_nesting_are_400(serve: Callable[..., Served]) -> None:
    s = serve()
    headers = {"Content-Type": "application/json"}
    twice = s.client.post("/api/jobs", headers=headers, content=(
        b'{"name": "a", "command": ["true"], "name": "b"}'))
    assert twice.status_code == 400, twice.text
    assert twice.json()["error"]["code"] == "bad-input"
    assert "'name' appears twice" in twice.json()["error"]["message"]
    inner = s.client.post("/api/jobs", headers=headers, content=(
        b'{"name": "a", "command": ["true"], "env": {"A": "1", "A": "2"}}'))
    assert inner.status_code == 400 and "'A' appears twice" in inner.text
    for depth in (100, 100_000):  # under and past Python's recursion limit
        deep = s.client.post("/api/jobs", headers=headers,
                             content=b'{"name": ' + b"[" * depth + b"]" * depth + b"}")
        assert deep.status_code == 400, (depth, deep.text)
        assert "nests deeper than" in deep.json()["error"]["message"]
    assert s.client.get("/api/jobs", params={"all": "1"}).json() == []
    assert "Traceback" not in s.output()
    assert s.post("/api/jobs", spec("fine", "pass")).status_code == 201


class _Inline(HTMLParser):
    """Whatever `default-src 'self'` would block: inline scripts, styles, handlers."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        names = dict(attrs)
        if tag == "script" and "src" not in names:
            self.found.append("inline <script>")
        if tag == "style":
            self.found.append("<style>")
        self.found += [f"{tag} {k}=" for k in names if k == "style" or k.startswith("on")]


def test_every_answer_carries_the_security_headers(serve: Callable[..., Served]) -> None:
    s = serve()
    anon = httpx2.Client(base_url=s.url, timeout=60)
    answers = [s.client.get("/"), s.client.get("/static/dashboard.js"),
               s.client.get("/api/jobs"), s.client.get("/api/jobs/nope"),
               s.client.get("/metrics"), s.post("/api/jobs", {"name": "x"}),
               anon.get("/login"), anon.get("/"), anon.get("/api/jobs"),
               s.unix.get("/api/jobs")]
    for r in answers:
        for name, value in SECURITY.items():
            assert r.headers.get(name) == value, (r.request.url, name, r.headers)
    anon.close()
    for page in ("index.html", "login.html"):
        html = resources.files("dispatch.http").joinpath(f"static/{page}").read_text()
        parser = _Inline()
        parser.feed(html)
        assert parser.found == [], (page, parser.found)
    js = resources.files("dispatch.http").joinpath("static/dashboard.js").read_text()
    assert not re.search(r"innerHTML|eval\(|new Function", js)


def test_out_of_open_files_is_one_line_per_interval_with_a_count(
        serve: Callable[..., Served]) -> None:
    """Issue 32 item 8: at its open-files limit the server cannot accept, and asyncio said so
    with a traceback at every retry (thousands a minute); now one line per interval, with a
    count, and the server answers again once descriptors are free."""
    s = serve("--no-supervise")
    limits = resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE)
    held: list[socket.socket] = []
    try:
        # Not one descriptor more than it holds now: once the holes below the limit are
        # filled, the next accept fails (the connections wait in the backlog). There may be a
        # few holes: a file the server held at the count (its store, while the fleet's tally
        # is built at start; seen under load) is closed since. Each connection accepted into
        # one waits its 20 s and is closed, so more connections are held than there can be
        # holes; one hung at an accept that failed is what this test needs.
        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE,
                         (len(os.listdir(f"/proc/{s.proc.pid}/fd")), limits[1]))
        held = [socket.create_connection(("127.0.0.1", s.port), timeout=30) for _ in range(48)]
        # the second line comes one interval after the first, counting the retries between
        deadline = time.monotonic() + WAIT_S
        while True:
            out = s.output()
            if "such since the last line" in out or out.count("Traceback") >= 2:
                break
            assert time.monotonic() < deadline, out[-3000:]
            time.sleep(0.2)
        assert "Traceback" not in out, out[-3000:]
        lines = [x for x in out.splitlines() if "cannot accept a connection" in x]
        assert len(lines) == 2, out[-3000:]
        assert "Too many open files" in lines[0] and "ulimit -n" in lines[0], lines
        assert int(re.search(r"\((\d+) such since", lines[1]).group(1)) > 1, lines  # type: ignore[union-attr]
    finally:
        resource.prlimit(s.proc.pid, resource.RLIMIT_NOFILE, limits)
        for sock in held:
            sock.close()
    assert s.client.get("/api/jobs").status_code == 200
    # the retries asyncio scheduled meanwhile find the listener closed at the stop: silent
    s.proc.terminate()
    assert s.proc.wait(WAIT_S) == 0
    out = s.output()
    assert "Traceback" not in out and "ERROR" not in out, out[-3000:]
    assert len([x for x in out.splitlines() if "cannot accept a connection" in x]) <= 3
