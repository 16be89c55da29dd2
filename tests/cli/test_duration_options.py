"""Every duration option is finite and within its documented bounds (issue 21 item 10):
--lease 1 s to 10 min, --poll and --interval 0.05 s to 10 min. Anything else is a usage
error (exit 2) that names the option, never a traceback, and nothing is recorded or held.

Through the real entry point: in-process (click's runner on ``dispatch.cli.main``) for the
whole matrix, and as real processes for the values that gave tracebacks before."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.cli.conftest import world_env

from dispatch.cli import main
from dispatch.stores.select import open_store
from dispatch.supervise.leases import local_scope
from dispatch.support.durations import LEASE_MAX_S

ROOT = Path(__file__).resolve().parents[2]
# The last two: Arabic-Indic 7 and fullwidth 5, which float() reads as 7 and 5.
BAD = ["inf", "-inf", "nan", "1e12", "1e400", "-1", "0", "garbage", "", "0x10", "\u0667",
       "\uff15"]
# (argv before the value, its bounds)
OPTIONS: list[tuple[list[str], float, float]] = [
    (["supervise", "--once", "--lease"], 1.0, 600.0),
    (["supervise", "--once", "--poll"], 0.05, 600.0),
    (["serve", "--lease"], 1.0, 600.0),
    (["serve", "--poll"], 0.05, 600.0),
    (["run", "SPEC", "--poll"], 0.05, 600.0),
    (["watch", "--interval"], 0.05, 600.0),
]
IDS = [" ".join(o[0]) for o in OPTIONS]


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    spec = tmp_path / "ok.yaml"
    spec.write_text('name: ok\ncommand: ["true"]\n')
    return {**world_env(tmp_path), "SPEC": str(spec)}


def _argv(env: dict[str, str], head: list[str], value: str) -> list[str]:
    return [env["SPEC"] if a == "SPEC" else a for a in head] + [value]


def _invoke(env: dict[str, str], argv: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(main, argv, env=env)
    return result.exit_code, result.output


def _nothing_recorded_or_held(env: dict[str, str]) -> None:
    path = Path(env["DISPATCH_STORE"])
    if path.exists():
        with open_store(str(path)) as store:
            assert store.list_jobs() == [] and store.leases().all() == []


@pytest.mark.parametrize("value", BAD)
@pytest.mark.parametrize(("head", "low", "high"), OPTIONS, ids=IDS)
def test_a_bad_duration_is_a_usage_error(env: dict[str, str], head: list[str], low: float,
                                         high: float, value: str) -> None:
    code, out = _invoke(env, _argv(env, head, value))
    assert code == 2, out
    option = head[-1]
    assert f"Invalid value for '{option}'" in out and "seconds" in out, out
    assert "Traceback" not in out
    _nothing_recorded_or_held(env)


@pytest.mark.parametrize(("head", "low", "high"), OPTIONS, ids=IDS)
def test_the_bounds_are_documented_and_enforced_at_the_edges(env: dict[str, str],
                                                             head: list[str], low: float,
                                                             high: float) -> None:
    option = head[-1]
    code, out = _invoke(env, [head[0], "--help"])
    assert code == 0 and f"{option} SECONDS ({low:g}-{high:g})" in out, out
    for value in (low * 0.99, high * 1.01):
        code, out = _invoke(env, _argv(env, head, f"{value!r}"))
        assert code == 2 and f"from {low:g} to {high:g}" in out, (value, out)


@pytest.mark.parametrize("value", [1.0, 600.0])
def test_a_lease_at_its_bounds_is_served(env: dict[str, str], value: float) -> None:
    code, out = _invoke(env, ["supervise", "--once", "--scope", "local",
                              "--lease", f"{value:g}"])
    assert code == 0, out
    assert json.loads(out.splitlines()[-1])["errors"] == []


@pytest.mark.parametrize("value", ["inf", "1e12", "1e9", "nan"])
def test_the_real_process_refuses_an_unbounded_lease(env: dict[str, str], value: str) -> None:
    """Before: --lease inf / 1e12 gave a traceback; 1e9 held the scope until 2058."""
    proc = subprocess.run([sys.executable, "-m", "dispatch.cli", "supervise", "--scope",
                           "local", "--lease", value], env={**os.environ, **env}, cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "--lease" in proc.stderr
    assert "from 1 to 600" in proc.stderr
    _nothing_recorded_or_held(env)


def test_a_killed_supervisor_holds_its_scope_at_most_the_longest_lease(
        env: dict[str, str], tmp_path: Path) -> None:
    """kill -9 with the longest lease allowed: its scope is free again within 10 min."""
    proc = subprocess.Popen([sys.executable, "-m", "dispatch.cli", "supervise", "--scope",
                             "local", "--lease", "600", "--poll", "0.1"],
                            env={**os.environ, **env}, cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    scope = local_scope(tmp_path / "local")
    holder = f"{socket.gethostname()}:{proc.pid}"
    try:
        deadline = time.monotonic() + 60
        lease = None
        while time.monotonic() < deadline:
            if Path(env["DISPATCH_STORE"]).exists():
                with open_store(env["DISPATCH_STORE"]) as store:
                    lease = store.leases().get(scope)
                if lease is not None and lease.holder == holder and lease.state == "active":
                    break
            time.sleep(0.1)
        else:
            raise AssertionError(f"never active: {lease}")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    with open_store(env["DISPATCH_STORE"]) as store:
        lease = store.leases().get(scope)
    assert lease is not None and lease.holder == holder
    assert lease.expires_at - lease.now <= timedelta(seconds=LEASE_MAX_S)


@pytest.mark.parametrize("period", [float("inf"), float("nan"), 1e9, LEASE_MAX_S + 1, 0.0,
                                    -1.0])
def test_the_lease_book_itself_refuses_an_unbounded_period(tmp_path: Path,
                                                          period: float) -> None:
    """The Python side too: no caller gets a lease that outlives its holder by more than
    the longest period."""
    with open_store(str(tmp_path / "r.sqlite3")) as store:
        book = store.leases()
        with pytest.raises(ValueError, match="finite number of seconds"):
            book.acquire("local:x", "A", period)
        lease = book.acquire("local:x", "A", 30.0)
        assert lease is not None
        with pytest.raises(ValueError, match="finite number of seconds"):
            book.renew(lease.fence, period)


# Ages (issue 45 item 3): ASCII digits only, at most a century; superscript digits gave a
# ValueError from int(), 14 digits an OverflowError, 4,300 digits int()'s digit limit, and
# Arabic-Indic 7 was read as 7.
BAD_AGES = ["\u00b2d", "\u00b3h", "99999999999999d", "9" * 4400 + "d", "\u0667d",
            "\uff17d", "36501d", "5215w", "1" + "0" * 20 + "s", "7 d x", "d", ""]
AGE_OPTIONS = [["ls", "--since"], ["prune", "--before"], ["goodput", "--since"]]


@pytest.mark.parametrize("value", BAD_AGES, ids=[v[:20] for v in BAD_AGES])
@pytest.mark.parametrize("head", AGE_OPTIONS, ids=[" ".join(h) for h in AGE_OPTIONS])
def test_a_bad_age_is_a_usage_error_naming_the_option(env: dict[str, str], head: list[str],
                                                      value: str) -> None:
    result = CliRunner().invoke(main, [*head, value, "--json"], env=env)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    message = json.loads(result.stdout)["error"]["message"]
    assert message.startswith(head[-1]), message
    assert len(message) < 300  # a value of thousands of digits is named, not printed whole
    _nothing_recorded_or_held(env)


@pytest.mark.parametrize("value", ["36500d", "5214w", "90m", " 2h ", "0s"])
@pytest.mark.parametrize("head", AGE_OPTIONS[:2], ids=[" ".join(h) for h in AGE_OPTIONS[:2]])
def test_an_age_up_to_a_century_is_read(env: dict[str, str], head: list[str],
                                        value: str) -> None:
    result = CliRunner().invoke(main, [*head, value], env=env)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["\u00b2d", "99999999999999d", "9" * 4400 + "d"],
                         ids=["superscript", "14 digits", "4400 digits"])
def test_the_real_process_refuses_a_bad_age(env: dict[str, str], value: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "dispatch.cli", "prune", "--before", value],
                          env={**os.environ, **env}, cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and "--before" in proc.stderr
