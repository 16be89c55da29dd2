"""Standbys are seen (issue 48 item 10): real ``dispatch supervise`` processes on one record
store (SQLite and a throwaway PostgreSQL). A process waiting for a scope's lease says
"standby for: SCOPE (active: HOLDER; ...)", never "supervising", and ``dispatch supervisors``
lists it under the scope's active holder; when the active one is killed the standby says
"active for: SCOPE (epoch N)" and the list changes; a killed standby drops out once its row
is stale, a stopped one at once."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.integration.supervision.helpers import ROOT, Proc, Procs, child_env, wait_for

from dispatch.supervise.leases import local_scope

ARGS = ("supervise", "--scope", "local", "--lease", "2", "--poll", "0.2")


def _supervisors(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "dispatch.cli", "supervisors", *args],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done


def _row(env: dict[str, str], scope: str) -> dict[str, Any]:
    rows = json.loads(_supervisors(env, "--json").stdout)
    return next(r for r in rows if r["scope"] == scope)


def _holder(p: Proc) -> str:
    return f"{socket.gethostname()}:{p.pid}"


def test_supervisors_lists_the_standbys_and_a_takeover_changes_the_list(
        store_url: str, tmp_path: Path, procs: Procs) -> None:
    root = tmp_path / "local"
    scope = local_scope(root)
    env = child_env(DISPATCH_STORE=store_url, DISPATCH_LOCAL_ROOT=str(root),
                    XDG_STATE_HOME=str(tmp_path / "state"))
    a = procs.cli(*ARGS, env=env)
    a.wait_line(lambda s: s == f"active for: {scope} (epoch 1)")
    b = procs.cli(*ARGS, env=env)
    # The row is written before the word is said: once said, it is committed.
    said = b.wait_line(lambda s: s.startswith(f"standby for: {scope}"))
    assert said == (f"standby for: {scope} (active: {_holder(a)}; this takes over if it "
                    "stops)")
    assert b.lines[0].startswith(f"serving scopes as {_holder(b)}: {scope}"), b.lines
    assert not [s for s in b.lines if "supervising" in s], b.lines
    row = _row(env, scope)
    assert (row["state"], row["holder"], row["epoch"]) == ("active", _holder(a), 1)
    assert [s["holder"] for s in row["standbys"]] == [_holder(b)]
    assert row["refusals"] == []  # the local backend refuses nothing
    table = _supervisors(env).stdout
    assert f"standby for {scope}: {_holder(b)} (since " in table, table

    # The active one is killed: its lease expires, the standby takes the scope over.
    a.signal(signal.SIGKILL)
    b.wait_line(lambda s: s == f"active for: {scope} (epoch 2)")
    row = _row(env, scope)
    assert (row["state"], row["holder"], row["epoch"]) == ("active", _holder(b), 2)
    assert row["standbys"] == []
    assert "standby for" not in _supervisors(env).stdout

    # A standby killed: gone once its row is stale (3 polls + one lease period).
    c = procs.cli(*ARGS, env=env)
    c.wait_line(lambda s: s.startswith(f"standby for: {scope} (active: {_holder(b)};"))
    assert [s["holder"] for s in _row(env, scope)["standbys"]] == [_holder(c)]
    c.signal(signal.SIGKILL)
    wait_for(lambda: _row(env, scope)["standbys"] == [], what="the killed standby's row "
             "to go stale")

    # A standby stopped: its row goes with it, at once.
    d = procs.cli(*ARGS, env=env)
    d.wait_line(lambda s: s.startswith(f"standby for: {scope}"))
    assert [s["holder"] for s in _row(env, scope)["standbys"]] == [_holder(d)]
    d.signal(signal.SIGTERM)
    assert d.p.wait(60) == 0
    assert _row(env, scope)["standbys"] == []
    b.signal(signal.SIGTERM)
    assert b.p.wait(60) == 0
    assert _row(env, scope)["state"] == "released"
