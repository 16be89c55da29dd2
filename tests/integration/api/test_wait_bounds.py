"""Job.wait refuses a timeout or poll it cannot honour with a typed error, at once
(issue 21 item 16: ``Job.wait(timeout=nan)`` waited for ever)."""

from __future__ import annotations

import math
import threading

import pytest
from api_harness import Env

import dispatch
from dispatch import BadInput

SLEEP = "import time; time.sleep(120)"


def _wait_in_thread(call: object) -> BaseException | None:
    """Run ``call`` on a thread; what it raised, failing the test if it is still waiting
    after 30 s (the bug: it never returned)."""
    raised: list[BaseException | None] = []

    def run() -> None:
        try:
            call()  # type: ignore[operator]
            raised.append(None)
        except BaseException as err:  # noqa: BLE001 - handed to the test
            raised.append(err)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(30)
    assert not t.is_alive(), "Job.wait is still waiting"
    return raised[0]


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -math.inf, -1.0, -0.001, "10",
                                     True, pytest.param(10**400, id="10**400")])
def test_a_timeout_that_is_not_a_finite_number_is_refused(env: Env, timeout: object) -> None:
    job = dispatch.submit(env.spec("waited", SLEEP), store=env.store)
    version = len(job.history())
    for supervise in (True, False):
        err = _wait_in_thread(lambda s=supervise: job.wait(timeout=timeout,  # type: ignore[arg-type]
                                                           poll=0.2, supervise=s))
        assert isinstance(err, BadInput), err
        assert "Job.wait timeout" in str(err) and "seconds" in str(err)
    assert len(job.history()) == version, "a refused wait acted on the job"
    job.cancel()


@pytest.mark.parametrize("poll", [math.nan, math.inf, 0.0, -1.0, 0.01, 601.0, "1"])
def test_a_poll_outside_its_bounds_is_refused(env: Env, poll: object) -> None:
    job = dispatch.submit(env.spec("polled", SLEEP), store=env.store)
    err = _wait_in_thread(lambda: job.wait(timeout=5.0, poll=poll))  # type: ignore[arg-type]
    assert isinstance(err, BadInput) and "Job.wait poll" in str(err), err
    job.cancel()


def test_a_zero_timeout_is_a_valid_limit(env: Env) -> None:
    job = dispatch.submit(env.spec("zero", SLEEP), store=env.store)
    err = _wait_in_thread(lambda: job.wait(timeout=0, poll=0.2))
    assert isinstance(err, TimeoutError), err
    job.cancel()
