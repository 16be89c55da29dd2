"""Issue 23: `/api/jobs/{id}` shows the application's own error (the first failing rank and its
words) under ``application_error``, apart from the cause; a refused request keeps ``error``."""

from __future__ import annotations

from collections.abc import Callable

from serve_harness import Served, spec


def test_api_job_shows_the_application_error(serve: Callable[..., Served]) -> None:
    s = serve()
    job = s.submit(spec("nan", "import sys\nprint('step 6', flush=True)\n"
                               "raise FloatingPointError('loss is NaN at step 7')"))
    st = s.wait_for(job, lambda st: st["settled"])
    assert st["state"] == "failed" and st["cause"]["kind"] == "non-zero-exit"
    err = st["application_error"]
    assert (err["rank"], err["node"], err["message"], err["source"]) == (
        0, "node0", "FloatingPointError: loss is NaN at step 7", "output-tail")
    assert "error" not in st  # the refusal shape's key stays the refusal's
