"""`dispatch serve` supervises under leases, like `dispatch supervise`: two servers on one
record are one active supervisor and one hot standby per scope, /api/supervisors says who
is which, and a planned stop of the active one hands its scope over."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from typing import Any

from serve_harness import WAIT_S, Served, cli, spec

SLEEP = "import time; time.sleep(600)"


def _rows(s: Served) -> list[dict[str, Any]]:
    r = s.client.get("/api/supervisors")
    assert r.status_code == 200, r.text
    rows: list[dict[str, Any]] = r.json()
    return rows


def _local_row(s: Served) -> dict[str, Any]:
    rows = [r for r in _rows(s) if r["scope"].startswith("local:")]
    assert len(rows) == 1, rows
    return rows[0]


def _wait_row(s: Served, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    deadline = time.monotonic() + WAIT_S
    row: dict[str, Any] = {}
    while time.monotonic() < deadline:
        row = _local_row(s)
        if pred(row):
            return row
        time.sleep(0.2)
    raise AssertionError(f"the local scope never got there; last: {row}")


def test_two_servers_one_active_and_a_planned_stop_hands_the_scope_over(
        serve: Callable[..., Served]) -> None:
    a = serve("--lease", "2")
    first = _wait_row(a, lambda r: r["state"] == "active")
    assert first["holder"] == f"{socket.gethostname()}:{a.proc.pid}"
    b = serve("--lease", "2")
    job = b.submit(spec("sleepy", SLEEP))
    running = b.wait_for(job, lambda st: st["state"] == "running")
    assert running["scope"] == first["scope"]
    # B is a standby: the scope is still A's, and B's view of it is the same row.
    row = _local_row(b)
    assert row["holder"] == first["holder"] and row["epoch"] == first["epoch"]
    assert row["live_jobs"] == 1
    # ... and listed as the scope's standby (issue 48 item 10), on either server's API.
    b_holder = f"{socket.gethostname()}:{b.proc.pid}"
    listed = _wait_row(a, lambda r: [x["holder"] for x in r["standbys"]] == [b_holder])
    assert listed["holder"] == first["holder"] and listed["refusals"] == []
    assert running["notes"] == []  # the job's status notes: nothing refused to its supervisor

    a.close()  # SIGTERM: a planned stop releases the lease
    taken = _wait_row(b, lambda r: r["state"] == "active"
                      and r["holder"] == f"{socket.gethostname()}:{b.proc.pid}")
    assert taken["epoch"] > first["epoch"]
    assert taken["standbys"] == []
    # The new holder carries the job on: a cancel asked now is carried out by it.
    r = b.post(f"/api/jobs/{job}/cancel")
    assert r.status_code == 200, r.text
    done = b.wait_for(job, lambda st: st["settled"])
    assert done["state"] == "cancelled"


def test_serve_refuses_a_scope_it_cannot_serve_before_listening(tmp_path: Any) -> None:
    res = cli(tmp_path, "serve", "--port", "0", "--scope", "nosuch:x")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "nosuch:x" in res.stderr and "names no backend" in res.stderr
    res = cli(tmp_path, "serve", "--port", "0", "--scope", "local:elsewhere:00000000")
    assert res.returncode == 2, res.stdout + res.stderr
    assert "this machine's local backend is scope local:" in res.stderr
