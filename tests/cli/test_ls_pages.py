"""``ls`` in pages (issue 27): the newest --limit jobs, filtered in the store by state,
backend, name and creation time, with a cursor to the older ones; never every record."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from click.testing import CliRunner

from dispatch.cli import main
from dispatch.core.events import JobCreated, OutcomeCommitted
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.sqlite import SQLiteStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = {"DISPATCH_STORE": str(tmp_path / "record.sqlite3"),
         "DISPATCH_LOCAL_ROOT": str(tmp_path / "local"),
         "XDG_STATE_HOME": str(tmp_path / "state")}
    with SQLiteStore(e["DISPATCH_STORE"]) as s:
        s.create_many([JobCreated(seq=1, at=T0 + timedelta(hours=i), job_id=f"job{i:02d}",
                                  spec=JobSpec(name="even" if i % 2 == 0 else "odd",
                                               command=("true",), backend="local"),
                                  declarations=Declarations(backend="local"))
                       for i in range(9)])
        for i, state in ((1, State.SUCCEEDED), (2, State.FAILED), (5, State.SUCCEEDED)):
            s.append(f"job{i:02d}", [OutcomeCommitted(
                seq=2, at=T0, state=state, cause=Cause(kind=CauseKind.NONE))], 1)
    return e


def ls(env: dict[str, str], *args: str) -> tuple[int, list[str], str]:
    result = CliRunner().invoke(main, ["ls", "--json", *args], env=env)
    ids = [j["job"] for j in json.loads(result.stdout)] if result.exit_code == 0 else []
    return result.exit_code, ids, result.stderr


def test_pages_of_the_newest_jobs_with_a_cursor_to_the_older(env: dict[str, str]) -> None:
    code, first, err = ls(env, "--all", "--limit", "4")
    assert code == 0 and first == ["job05", "job06", "job07", "job08"]
    cursor = err.split("--before ")[1].strip()
    code, second, err = ls(env, "--all", "--limit", "4", "--before", cursor)
    assert second == ["job01", "job02", "job03", "job04"]
    code, third, err = ls(env, "--all", "--limit", "4", "--before", err.split("--before ")[1]
                          .strip())
    assert third == ["job00"] and "--before" not in err  # the last page says no more


def test_filters_run_in_the_store(env: dict[str, str]) -> None:
    assert ls(env)[1] == ["job00", "job03", "job04", "job06", "job07", "job08"]  # live
    assert ls(env, "--state", "succeeded")[1] == ["job01", "job05"]
    assert ls(env, "--state", "failed")[1] == ["job02"]
    assert ls(env, "--all", "--name", "even")[1] == ["job00", "job02", "job04", "job06",
                                                     "job08"]
    assert ls(env, "--all", "--since", "2026-01-01T06:00")[1] == ["job06", "job07", "job08"]
    assert ls(env, "--all", "--backend", "slurm")[1] == []
    assert ls(env, "--state", "pending", "--limit", "2")[1] == ["job07", "job08"]


def test_a_bad_cursor_or_time_is_bad_input(env: dict[str, str]) -> None:
    code, _, err = ls(env, "--all", "--before", "nonsense")
    assert code == 2 and "cursor" in err
    code, _, err = ls(env, "--all", "--since", "yesterday")
    assert code == 2 and "ISO 8601" in err


@pytest.mark.parametrize("cursor", ["\u00b2:job01", "\u0667:job01", "9" * 20 + ":job01",
                                    str(2**63) + ":job01", "9" * 4400 + ":job01"],
                         ids=["superscript", "arabic-indic", "20 digits", "2**63", "4400"])
def test_a_crafted_cursor_is_bad_input(env: dict[str, str], cursor: str) -> None:
    """Before (issue 45): int() refused these with a traceback, or the store refused an
    integer past 64 bits (OverflowError)."""
    result = CliRunner().invoke(main, ["ls", "--all", "--before", cursor], env=env)
    assert result.exit_code == 2, result.output
    assert isinstance(result.exception, SystemExit)
    assert "--before" in result.stderr and "cursor" in result.stderr
    assert len(result.stderr) < 300


def test_the_paging_hint_runs_as_printed(env: dict[str, str]) -> None:
    # issue 48: the hint was "dispatch ls ... --before C", which no shell runs
    import shlex

    result = CliRunner().invoke(main, ["ls", "--all", "--name", "e*n", "--limit", "2"],
                                env=env)
    assert result.exit_code == 0, result.stderr
    hint = next(x for x in result.stderr.splitlines() if x.startswith("older jobs: "))
    argv = shlex.split(hint.removeprefix("older jobs: "))
    assert argv[:2] == ["dispatch", "ls"] and "..." not in argv
    assert "--name" in argv and "e*n" in argv  # the filters of this page, quoted
    code, second, _ = ls(env, *argv[2:])
    assert code == 0 and second == ["job02", "job04"]
