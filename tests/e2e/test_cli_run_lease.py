"""`dispatch run` is a supervisor like any other: it supervises under its scope's lease. Alone
it holds the lease while it runs and hands it back when it ends; next to an active
`dispatch supervise` it only watches that one act, so one scope never has two active
supervisors (and one scheduler poll per tick, not two)."""

from __future__ import annotations

import json
import os
import signal

from tests.e2e.conftest import Dispatch, script, wait_until


def local_leases(d: Dispatch) -> list[dict]:
    rows = json.loads(d("supervisors", "--json", check=True).stdout)
    return [r for r in rows if r["scope"].startswith("local")]


def test_run_next_to_an_active_supervisor_watches_it_act(dispatch: Dispatch) -> None:
    sup = dispatch.spawn("supervise", "--poll", "0.2")
    wait_until(lambda: any(r["state"] == "active" for r in local_leases(dispatch)),
               "the supervisor never became active")
    holder = next(r["holder"] for r in local_leases(dispatch) if r["state"] == "active")
    spec = dispatch.spec("watched", script("print('ok')"))
    done = dispatch("run", str(spec), "--poll", "0.2", timeout=180)
    assert done.returncode == 0, done.stderr
    assert f"{holder} is the active supervisor of" in done.stderr
    # the lease never moved: the supervisor, not run, committed the outcome
    assert {r["holder"] for r in local_leases(dispatch) if r["state"] == "active"} == {holder}
    sup.send_signal(signal.SIGTERM)
    _, err = sup.communicate(timeout=60)
    job = dispatch.status("watched")["job"]
    assert f"job {job} (watched) committed succeeded" in err


def test_run_alone_holds_the_scopes_lease_and_hands_it_back(dispatch: Dispatch) -> None:
    spec = dispatch.spec("alone", script(
        "import os, time\n"
        "open('started', 'w').close()\n"
        "while not os.path.exists('go'): time.sleep(0.1)\n"))
    proc = dispatch.spawn("run", str(spec), "--poll", "0.2")
    started = dispatch.tmp / "started"
    wait_until(started.exists, "the job never started")
    active = [r for r in local_leases(dispatch) if r["state"] == "active"]
    assert [r["holder"] for r in active] == [f"{os.uname().nodename}:{proc.pid}"]
    (dispatch.tmp / "go").touch()
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == 0, err
    assert not [r for r in local_leases(dispatch) if r["state"] == "active"]  # handed back


def test_python_wait_next_to_an_active_supervisor_does_not_supervise_too(
        dispatch: Dispatch) -> None:
    sup = dispatch.spawn("supervise", "--poll", "0.2")
    wait_until(lambda: any(r["state"] == "active" for r in local_leases(dispatch)),
               "the supervisor never became active")
    holder = next(r["holder"] for r in local_leases(dispatch) if r["state"] == "active")
    code = ("import dispatch, sys\n"
            "job = dispatch.submit({'name': 'waited', 'backend': 'local',"
            " 'command': [sys.executable, '-c', 'print(1)']})\n"
            "print(job.wait(timeout=60, poll=0.2).state.value)\n")
    done = dispatch.python(code)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "succeeded"
    assert {r["holder"] for r in local_leases(dispatch) if r["state"] == "active"} == {holder}
    sup.send_signal(signal.SIGTERM)
    _, err = sup.communicate(timeout=60)
    job = dispatch.status("waited")["job"]
    assert f"job {job} (waited) committed succeeded" in err
