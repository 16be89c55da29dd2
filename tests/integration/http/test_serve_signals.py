"""`dispatch serve` stops on SIGTERM and SIGINT alike: every lease handed back at once, exit
0, no "Aborted!"; a standby `dispatch supervise` on the same record takes the scope over at
its next poll, long before the lease (60 s here) could have expired on its own. It serves
the local backend and the scopes of live jobs, without probing backends nobody uses; and
`dispatch supervisors` hides the scopes nobody has held for a day."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from serve_harness import WAIT_S, Served, cli, cli_env, spec

LEASE_S = "60"
TAKEOVER_S = 30.0  # generous, and still half the lease: only a release explains it


def _active(tmp: Path) -> dict[str, Any]:
    res = cli(tmp, "supervisors", "--json", "--all")
    assert res.returncode == 0, res.stderr
    rows = [r for r in json.loads(res.stdout) if r["scope"].startswith("local:")]
    return rows[0] if rows else {}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_signal_hands_the_lease_to_a_standby_and_exits_0(
        serve: Callable[..., Served], tmp_path: Path, sig: signal.Signals) -> None:
    s = serve("--lease", LEASE_S)
    job = s.submit(spec("sleepy", "import time; time.sleep(600)"))
    s.wait_for(job, lambda st: st["state"] == "running")
    holder = f"{socket.gethostname()}:{s.proc.pid}"
    assert _active(tmp_path).get("holder") == holder
    standby_log = (tmp_path / "standby.log").open("w")
    standby = subprocess.Popen(
        [sys.executable, "-m", "dispatch.cli", "supervise", "--poll", "0.2", "--lease", LEASE_S],
        env=cli_env(tmp_path), cwd=tmp_path, stdout=standby_log, stderr=subprocess.STDOUT)
    try:
        time.sleep(1.0)  # the standby is up and finds the scope taken (not a timing bound)
        assert _active(tmp_path).get("holder") == holder
        s.proc.send_signal(sig)
        assert s.proc.wait(WAIT_S) == 0, s.output()
        stopped = time.monotonic()
        assert "Aborted" not in s.output() and "Traceback" not in s.output(), s.output()
        mine = f"{socket.gethostname()}:{standby.pid}"
        while _active(tmp_path).get("holder") != mine:
            assert time.monotonic() - stopped < TAKEOVER_S, _active(tmp_path)
            time.sleep(0.2)
        assert _active(tmp_path)["state"] == "active"
    finally:
        standby.terminate()
        assert standby.wait(WAIT_S) == 0
        standby_log.close()


def _wait_output(s: Served, what: str) -> str:
    """The first line of serve's output that holds ``what`` (waited for)."""
    deadline = time.monotonic() + WAIT_S
    while not (lines := [x for x in s.output().splitlines() if what in x]):
        assert time.monotonic() < deadline, s.output()
        time.sleep(0.2)
    return lines[0]


def test_serve_says_it_is_a_standby_and_when_it_becomes_active(
        serve: Callable[..., Served], tmp_path: Path) -> None:
    """Issue 48 item 10: a serve that finds its scope held says it stands by, and for whom;
    never "supervising" while it is a standby."""
    active = subprocess.Popen(
        [sys.executable, "-m", "dispatch.cli", "supervise", "--poll", "0.2", "--lease", "2"],
        env=cli_env(tmp_path), cwd=tmp_path, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    try:
        holder = f"{socket.gethostname()}:{active.pid}"
        deadline = time.monotonic() + WAIT_S
        while _active(tmp_path).get("holder") != holder:
            assert time.monotonic() < deadline, _active(tmp_path)
            time.sleep(0.2)
        s = serve("--lease", "2")
        scope = _active(tmp_path)["scope"]
        said = _wait_output(s, f"standby for: {scope}")
        assert said == (f"standby for: {scope} (active: {holder}; this takes over if it "
                        "stops)"), s.output()
        assert "supervising" not in s.output(), s.output()
        active.terminate()
        assert active.wait(WAIT_S) == 0
        _wait_output(s, f"active for: {scope} (epoch ")
    finally:
        if active.poll() is None:
            active.kill()
            active.wait(WAIT_S)


def test_serve_serves_local_and_live_scopes_without_probing_others(
        serve: Callable[..., Served], tmp_path: Path) -> None:
    # a Slurm whose every tool fails loudly: serve must not ask it when no job uses it
    tools = tmp_path / "bin"
    tools.mkdir()
    for tool in ("scontrol", "squeue", "sacct", "sinfo", "sbatch"):
        (tools / tool).write_text(f"#!/bin/sh\necho called >> {tmp_path}/slurm-called\nexit 1\n")
        (tools / tool).chmod(0o755)
    env = {"PATH": f"{tools}:{cli_env(tmp_path)['PATH']}"}
    s = serve(env=env)
    deadline = time.monotonic() + WAIT_S
    while "serving scopes:" not in s.output():
        assert time.monotonic() < deadline, s.output()
        time.sleep(0.2)
    line = next(x for x in s.output().splitlines() if x.startswith("serving scopes:"))
    assert "local:" in line and "slurm" not in line and "kubeflow" not in line, line
    assert not (tmp_path / "slurm-called").exists()


def test_supervisors_hides_scopes_nobody_held_for_a_day(tmp_path: Path) -> None:
    from dispatch.cli.supervisors import recently_held

    now = time.time()
    from datetime import UTC, datetime, timedelta
    t = datetime.fromtimestamp(now, UTC)
    rows = [
        {"scope": "slurm", "state": "released", "since": (t - timedelta(days=3)).isoformat(),
         "last_tick": (t - timedelta(days=2)).isoformat(), "live_jobs": 0},
        {"scope": "kubeflow", "state": "expired", "since": (t - timedelta(hours=2)).isoformat(),
         "last_tick": None, "live_jobs": 0},
        {"scope": "local:a", "state": "active", "since": (t - timedelta(days=9)).isoformat(),
         "last_tick": (t - timedelta(days=9)).isoformat(), "live_jobs": 0},
        {"scope": "local:b", "state": "unserved", "since": None, "last_tick": None,
         "live_jobs": 2},
    ]
    assert [r["scope"] for r in recently_held(rows, t)] == ["kubeflow", "local:a", "local:b"]
    # and the command: a scope released long ago is hidden unless --all
    res = cli(tmp_path, "supervise", "--once", "--scope", "local")
    assert res.returncode == 0, res.stderr
    shown = json.loads(cli(tmp_path, "supervisors", "--json").stdout)
    assert [r["scope"] for r in shown if r["scope"].startswith("local:")]  # held just now
    _age_leases(tmp_path, days=2)
    assert [r["scope"] for r in json.loads(cli(tmp_path, "supervisors", "--json").stdout)] == []
    every = json.loads(cli(tmp_path, "supervisors", "--json", "--all").stdout)
    assert [r["scope"] for r in every if r["scope"].startswith("local:")]


def _age_leases(tmp: Path, days: int) -> None:
    """Move every lease's times back (as if a day passed): the store's own columns."""
    import sqlite3

    with sqlite3.connect(tmp / "record.sqlite3") as db:
        shift = days * 86400
        db.execute("UPDATE leases SET acquired_at = acquired_at - ?, expires_at = expires_at - ?,"
                   " last_tick_at = last_tick_at - ?, released_at = released_at - ?",
                   (shift, shift, shift, shift))


def test_a_live_job_of_a_scope_not_served_yet_is_served_from_the_next_look(
        serve: Callable[..., Served], tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from dispatch.core.events import JobCreated
    from dispatch.core.policy import Declarations
    from dispatch.core.spec import JobSpec
    from dispatch.stores.sqlite import SQLiteStore

    tools = tmp_path / "bin"  # a Slurm that cannot say its cluster: the bare name is served
    tools.mkdir()
    for tool in ("scontrol", "squeue", "sacct", "sinfo", "sbatch"):
        (tools / tool).write_text("#!/bin/sh\nexit 1\n")
        (tools / tool).chmod(0o755)
    s = serve("--lease", "1", env={"PATH": f"{tools}:{cli_env(tmp_path)['PATH']}"})
    holder = f"{socket.gethostname()}:{s.proc.pid}"
    assert not [r for r in s.client.get("/api/supervisors").json() if r["scope"] == "slurm"]
    with SQLiteStore(tmp_path / "record.sqlite3") as store:  # as `dispatch submit` elsewhere
        store.create(JobCreated(seq=1, at=datetime.now(UTC), job_id="0123456789",
                                spec=JobSpec(name="far", command=("true",), backend="slurm"),
                                declarations=Declarations(backend="slurm"), scope="slurm"))
    deadline = time.monotonic() + WAIT_S
    while True:
        rows = [r for r in s.client.get("/api/supervisors").json() if r["scope"] == "slurm"]
        if rows and rows[0]["holder"] == holder and rows[0]["state"] == "active":
            break
        assert time.monotonic() < deadline, (rows, s.output())
        time.sleep(0.2)
