"""Conflicting person requests (issue 21, item 13), through the real CLI and Python API on a
job held by the local backend: the second of two conflicting requests is refused with exit 6
naming the pending one; the same request again is accepted and records nothing new; the
request that was accepted is the one the supervisor carries out."""

from __future__ import annotations

import json
import time

from tests.e2e.conftest import Dispatch, script


def held_job(dispatch: Dispatch, name: str) -> str:
    """A local job that exits 3 under a hold rule, held by `supervise --once` ticks (no
    supervisor left running, so requests stay pending until the test ticks again)."""
    spec = dispatch.spec(name, script("import sys; sys.exit(3)"),
                         policy={"rules": [{"on": ["non-zero-exit"], "action": "hold"}]})
    job: str = json.loads(dispatch("submit", str(spec), "--json", check=True).stdout)["job"]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        dispatch("supervise", "--once", check=True)
        if dispatch.status(job)["state"] == "held":
            return job
        time.sleep(0.3)
    raise AssertionError(f"job {job} never held: {dispatch.status(job)}")


def versions(dispatch: Dispatch, job: str) -> int:
    return len(dispatch.json("history", job))


def test_give_up_then_resubmit_refuses_the_resubmit(dispatch: Dispatch) -> None:
    job = held_job(dispatch, "gu")
    dispatch("give-up", job, check=True)
    before = versions(dispatch, job)
    done = dispatch("resubmit", job)
    assert done.returncode == 6, (done.stdout, done.stderr)
    assert "a give-up requested by" in done.stderr and "resubmit refused" in done.stderr
    assert "Traceback" not in done.stderr
    as_json = dispatch("resubmit", job, "--json")
    assert as_json.returncode == 6
    assert json.loads(as_json.stdout)["error"]["code"] == "state-conflict"
    api = dispatch.python(
        "import dispatch\nfrom dispatch.errors import StateConflict\n"
        f"try:\n    dispatch.get({job!r}).cancel()\nexcept StateConflict as e:\n"
        "    print('refused:', e)\n")
    assert "refused:" in api.stdout and "cancel refused" in api.stdout, (api.stdout, api.stderr)
    again = dispatch("give-up", job)  # the same request again: accepted, nothing new
    assert again.returncode == 0, again.stderr
    assert versions(dispatch, job) == before
    dispatch("supervise", "--once", check=True)
    final = dispatch.status(job)
    assert final["state"] == "failed", final  # the give-up, the request that was accepted
    assert any(e["message"].startswith("given up by") for e in final["escalations"])
    assert dispatch("resubmit", job).returncode == 6  # and a committed job refuses all


def test_resubmit_then_give_up_refuses_the_give_up_and_resubmit_is_idempotent(
        dispatch: Dispatch) -> None:
    job = held_job(dispatch, "rs")
    dispatch("resubmit", job, check=True)
    before = versions(dispatch, job)
    done = dispatch("give-up", job)
    assert done.returncode == 6 and "a resubmit requested" in done.stderr, done.stderr
    assert dispatch("resubmit", job).returncode == 0
    assert versions(dispatch, job) == before
    dispatch("supervise", "--once", check=True)
    assert dispatch.status(job)["submissions"] == 2
    # carried out: no longer pending, so a second resubmit is refused as for any job not held
    late = dispatch("resubmit", job)
    assert late.returncode == 6 and "not held" in late.stderr
    dispatch("supervise", "--once", check=True)  # let the second submission's process end


def test_a_refusal_is_http_409() -> None:
    """The HTTP API maps it through the one table of exit codes (6 -> 409)."""
    from dispatch.http.endpoints import http_status
    from dispatch.service.requests import JobStateError

    assert http_status(JobStateError("x")) == 409
