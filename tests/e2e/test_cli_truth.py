"""Through the real CLI on the local backend: only a committed outcome is a terminal state
(the plan's verdict before the commit is a forecast, in its own field and column), and an
unreachable scheduler is an error with the last committed state, never a guessed one."""

from __future__ import annotations

import json

from tests.e2e.conftest import Dispatch, script


def test_an_end_before_its_commit_is_a_forecast_in_status_json_and_ls(
        dispatch: Dispatch) -> None:
    spec = dispatch.spec("quick", script("print('ok')"))
    dispatch("submit", str(spec), check=True)  # no supervisor runs: nothing commits the end
    st = dispatch.wait_for("quick", lambda s: s["forecast"] is not None)
    assert st["state"] == "running"
    assert st["forecast"]["state"] == "succeeded"

    text = dispatch("status", "quick", check=True).stdout
    first = text.splitlines()[0]
    assert "running" in first and "succeeded" not in first
    assert "forecast (not yet committed): succeeded" in text

    table = dispatch("ls", check=True).stdout
    header, row = table.splitlines()[:2]
    assert "FORECAST" in header and "not yet the state" in table
    state_col = row[header.index("STATE"):header.index("CAUSE")]
    assert state_col.strip() == "running"
    assert "succeeded?" in row[header.index("FORECAST"):]

    dispatch("supervise", "--once", check=True)
    done = dispatch.status("quick")
    assert done["state"] == "succeeded" and done["forecast"] is None
    table = dispatch("ls", "--all", check=True).stdout
    assert "FORECAST" not in table
    assert "succeeded!" not in table  # a committed outcome needs no scheduler: never marked


def test_an_unreachable_local_root_shows_the_last_state_and_exits_4(
        dispatch: Dispatch) -> None:
    spec = dispatch.spec("sleepy", script("import time; time.sleep(120)"))
    dispatch("submit", str(spec), check=True)
    dispatch.wait_for("sleepy", lambda s: s["state"] == "running")
    root = dispatch.tmp / "local"
    away = dispatch.tmp / "local-unmounted"
    root.rename(away)
    try:
        done = dispatch("status", "sleepy")
        assert done.returncode == 4, done.stderr
        assert "scheduler: unreachable" in done.stdout
        assert "sleepy: running" in done.stdout

        as_json = dispatch("status", "sleepy", "--json")
        assert as_json.returncode == 4
        doc = json.loads(as_json.stdout)  # one document, the status saying why
        assert doc["state"] == "running" and doc["scheduler"] == "unreachable"

        dispatch("supervise", "--once")  # records nothing from the silence
        hist = dispatch("history", "sleepy", "--json")
        kinds = [e["event"]["type"] for e in json.loads(hist.stdout)]
        assert "execution-ended" not in kinds and "outcome-committed" not in kinds
    finally:
        away.rename(root)
    dispatch("cancel", "sleepy", check=True)
    dispatch.spawn("supervise", "--poll", "0.2")  # stopped by the fixture
    assert dispatch.wait_for("sleepy", lambda s: s["state"] == "cancelled")
