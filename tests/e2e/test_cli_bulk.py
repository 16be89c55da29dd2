"""Issue 36 item 6 through the real `dispatch` in real processes: `cancel` of several jobs
(ids and names, a name pattern, a state), and `prune`, a dry run unless --yes, which forgets
old finished jobs whole and keeps every other."""

from __future__ import annotations

from tests.e2e.conftest import Dispatch, script, wait_until
from tests.e2e.test_cli_terminal import run_job

SLEEPS = script("import time; time.sleep(300)")


def states(d: Dispatch) -> dict[str, str]:
    return {r["name"]: r["state"] for r in d.json("ls", "--all")}


def test_cancel_many_by_pattern_and_by_name(dispatch: Dispatch) -> None:
    for name in ("sweep-1", "sweep-2", "baseline"):
        dispatch("submit", str(dispatch.spec(name, SLEEPS)), check=True)
    done = run_job(dispatch, "finished", script("print('ok')"))
    scope = dispatch.json("status", "baseline")["scope"]
    picked = dispatch("cancel", "--name", "sweep-*")
    assert picked.returncode == 0, picked.stderr
    names = sorted(x.split()[1].rstrip(":") for x in picked.stdout.splitlines())
    assert names == ["sweep-1", "sweep-2"]
    assert "2 jobs: cancel requested" in picked.stderr
    assert f"no live supervisor serves scope {scope}" in picked.stderr
    # several references: the finished one is refused, the others are requested
    mixed = dispatch("cancel", "baseline", done, "nobody-by-this-name")
    assert mixed.returncode == 6, mixed.stderr  # the first failure's: a state conflict
    assert mixed.stdout.split()[:2] == [dispatch.json("status", "baseline")["job"],
                                        "baseline:"]
    assert f"error: {done}:" in mixed.stderr and "error: nobody-by-this-name:" in mixed.stderr
    both = dispatch("cancel", "baseline", "--state", "running")
    assert both.returncode == 2 and "not both" in both.stderr
    none = dispatch("cancel", "--name", "no-such-*")
    assert none.returncode == 0 and "nothing to cancel" in none.stderr
    dispatch.spawn("supervise", "--scope", scope, "--poll", "0.2")
    wait_until(lambda: states(dispatch) == {"sweep-1": "cancelled", "sweep-2": "cancelled",
                                            "baseline": "cancelled", "finished": "succeeded"},
               "the three cancels carried out")


def test_prune_is_a_dry_run_until_yes_and_forgets_whole_jobs(dispatch: Dispatch) -> None:
    old = [run_job(dispatch, f"old-{i}", script("print('ok')")) for i in range(2)]
    dispatch("submit", str(dispatch.spec("still-running", SLEEPS)), check=True)
    dry = dispatch("prune", "--before", "0s")
    assert dry.returncode == 0, dry.stderr
    assert sorted(x.split()[0] for x in dry.stdout.splitlines()) == sorted(old)
    assert "2 finished jobs would be removed (a dry run)" in dry.stderr
    assert set(states(dispatch)) == {"old-0", "old-1", "still-running"}  # nothing gone
    assert dispatch.json("prune", "--before", "0s", "--yes")["removed"] == old
    assert states(dispatch) == {"still-running": "running"}
    gone = dispatch("status", old[0])
    assert gone.returncode == 3, gone.stderr  # not found: the whole job is gone
    assert dispatch("history", old[1]).returncode == 3
    bad = dispatch("prune", "--before", "a while")
    assert bad.returncode == 2 and "--before 'a while'" in bad.stderr
    dispatch("cancel", "still-running", check=True)
