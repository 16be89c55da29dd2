"""Issue 48: finding jobs in a fleet from the command line: by a cause a job recovered from
(a success after a preemption is found by ``--cause preempted`` and reads as recovered)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tests.cli.conftest import invoke, world_env
from tests.fleet import fill, job_id

from dispatch.stores.sqlite import SQLiteStore


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    e = world_env(tmp_path)
    with SQLiteStore(e["DISPATCH_STORE"]) as s:
        fill(s)
    return e


def names(env: dict[str, str], *args: str) -> list[str]:
    code, out, err = invoke(env, "ls", "--json", *args)
    assert code == 0, err
    return [j["name"] for j in json.loads(out)]


def test_a_recovered_success_is_found_by_what_it_recovered_from(env: dict[str, str]) -> None:
    assert names(env, "--all", "--cause", "preempted") == ["sweep-3", "sweep-10"]
    assert names(env, "--cause", "preempted") == ["sweep-3", "sweep-10"]  # implies --all
    assert names(env, "--state", "succeeded", "--cause", "preempted") == ["sweep-3",
                                                                          "sweep-10"]
    assert names(env, "--all", "--cause", "non-zero-exit") == ["sweep-5"]
    assert names(env, "--all", "--cause", "node-lost") == []


def test_a_recovered_job_reads_as_recovered(env: dict[str, str]) -> None:
    code, out, _ = invoke(env, "ls", "--all", "--plain", "--cause", "preempted")
    assert code == 0
    rows = [line.split("\t") for line in out.splitlines()[1:]]
    assert [(r[1], r[2], r[3]) for r in rows] == [
        (name, "succeeded", "none (exit 0), after 1 recovery: preempted")
        for name in ("sweep-3", "sweep-10")]
    code, out, _ = invoke(env, "status", job_id("sweep-3"))
    assert code == 0
    assert out.splitlines()[0] == ("jsweep3 sweep-3: succeeded after 1 recovery: preempted"
                                   "  cause: none (exit 0)")
    code, out, _ = invoke(env, "status", job_id("sweep-3"), "--json")
    assert json.loads(out)["recovered_from"] == ["preempted"]
    code, out, _ = invoke(env, "status", job_id("sweep-4"), "--json")
    assert json.loads(out)["recovered_from"] == []


def test_ls_name_takes_a_pattern_and_says_how_many_match(env: dict[str, str]) -> None:
    assert names(env, "--all", "--name", "sweep-1*") == ["sweep-1", "sweep-10", "sweep-11",
                                                         "sweep-12"]
    assert names(env, "--all", "--name", "sweep-?") == [f"sweep-{i}" for i in range(1, 10)]
    assert names(env, "--all", "--name", "sweep") == ["sweep"]  # no wildcard: the name
    assert names(env, "--name", "sweep-1*") == ["sweep-12"]  # the unfinished one
    code, _, err = invoke(env, "ls", "--all", "--name", "sweep-1*")
    assert code == 0 and "4 jobs match --name 'sweep-1*'" in err
    code, _, err = invoke(env, "ls", "--name", "sweep-1*")
    assert "4 jobs match --name 'sweep-1*' (1 shown)" in err
    # a plain name that matches nothing is told the pattern that would
    code, out, err = invoke(env, "ls", "--all", "--name", "swee")
    assert code == 0 and out.splitlines()[1:] == []
    assert "no job is named swee; 13 names contain it: --name '*swee*'" in err
    code, _, err = invoke(env, "ls", "--all", "--name", "nothing-*")
    assert "no job matches --name 'nothing-*'" in err
    code, _, err = invoke(env, "ls", "--name", "")
    assert code == 2 and "--name ''" in err


def test_watch_goodput_and_cancel_take_the_same_pattern(env: dict[str, str]) -> None:
    code, out, err = invoke(env, "watch", "--count", "1", "--plain", "--all", "--name",
                            "sweep-1?")
    assert code == 0 and "3 jobs match --name 'sweep-1?'" in err
    assert [line.split("\t")[1] for line in out.splitlines()[1:]] == [
        "sweep-10", "sweep-11", "sweep-12"]
    code, out, err = invoke(env, "goodput", "sweep-1?", "--by", "job", "--json")
    assert code == 0 and "3 jobs match 'sweep-1?'" in err
    assert sorted(g["name"] for g in json.loads(out)["groups"]) == ["sweep-10", "sweep-11",
                                                                   "sweep-12"]
    code, _, err = invoke(env, "goodput", "nothing-*")
    assert code == 3 and "no job matches 'nothing-*'" in err
    code, _, err = invoke(env, "cancel", "--name", "sweep-1*")
    assert code == 0 and "4 jobs match --name 'sweep-1*'; 1 unfinished" in err
