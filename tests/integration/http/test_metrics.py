"""GET /metrics of a real `dispatch serve`, parsed with prometheus-client's own parser."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families
from serve_harness import Served, spec

FAIL_FIRST = ("import os, sys\n"
              "sys.exit(3 if os.environ['DISPATCH_SUBMISSION'] == '1' else 0)\n")


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
READY = ("dispatch_record_totals_ready", ())


def samples(s: Served) -> Samples:
    """A scrape once the record's totals are built (serve builds them in the background at
    start: a scrape before that holds only the store's counts, issue 49)."""
    while (m := scrape(s))[READY] != 1:
        time.sleep(0.1)
    return m


def scrape(s: Served) -> Samples:
    r = s.client.get("/metrics", headers={"Accept-Encoding": "gzip"})
    assert r.status_code == 200
    assert r.headers["content-encoding"] == "gzip"  # a scrape is compressed when asked
    assert r.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            out[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return out


def test_metrics_count_jobs_recoveries_outcomes_budget_and_calls(
        serve: Callable[..., Served]) -> None:
    s = serve()
    policy = {"rules": [{"on": ["non-zero-exit"], "action": "resubmit", "budget": 2}]}
    recovered = s.submit(spec("recovered", FAIL_FIRST, policy=policy))
    failed = s.submit(spec("failed", "import sys; sys.exit(4)"))
    sleepy = s.submit(spec("sleepy", "import time; time.sleep(120)", policy=policy))
    s.wait_for(recovered, lambda st: st["settled"])
    s.wait_for(failed, lambda st: st["settled"])
    s.wait_for(sleepy, lambda st: st["state"] == "running")
    m = samples(s)
    assert m[("dispatch_jobs", (("state", "succeeded"),))] == 1
    assert m[("dispatch_jobs", (("state", "failed"),))] == 1
    assert m[("dispatch_jobs", (("state", "running"),))] == 1
    assert m[("dispatch_jobs", (("state", "pending"),))] == 0
    assert m[("dispatch_outcomes_total", (("cause", "none"), ("state", "succeeded")))] == 1
    assert m[("dispatch_outcomes_total", (("cause", "non-zero-exit"), ("state", "failed")))] == 1
    assert m[("dispatch_recoveries_total", (("cause", "non-zero-exit"),))] == 1
    assert m[("dispatch_escalations_total", (("cause", "non-zero-exit"),))] >= 1
    # issue 23: the failed job's end carries its application error; counted by kind only
    assert m[("dispatch_application_errors_total", (("cause", "non-zero-exit"),))] == 1
    assert all(k[1] == (("cause", "non-zero-exit"),) for k in m
               if k[0] == "dispatch_application_errors_total")
    # summed by scope and rule (the unfinished jobs'): never a series per job (issue 36)
    budget = {dict(k[1])["scope"]: v for k, v in m.items()  # a rule by its name
              if k[0] == "dispatch_budget_used"
              and dict(k[1])["rule"] == "non-zero-exit (resubmit)"}
    assert len(budget) == 1 and next(iter(budget)).startswith("local")  # the local scope
    assert list(budget.values()) == [0]
    assert not any("job" in dict(k[1]) or "name" in dict(k[1]) for k in m)
    assert m[("dispatch_scheduler_unreachable", (("backend", "local"),))] == 0
    assert m[("dispatch_scheduler_calls_total", (("backend", "local"), ("call", "submit")))] == 4
    assert m[("dispatch_scheduler_calls_total",
              (("backend", "local"), ("call", "discover")))] >= 3
    assert m[("dispatch_ticks_total", ())] >= 3
    assert m[("dispatch_tick_duration_seconds_count", ())] >= 3
    assert m[("dispatch_tick_scheduler_unreachable_total", ())] == 0
    s.post(f"/api/jobs/{sleepy}/cancel")
    s.wait_for(sleepy, lambda st: st["settled"])
    m = samples(s)
    assert m[("dispatch_jobs", (("state", "cancelled"),))] == 1
    assert m[("dispatch_scheduler_calls_total", (("backend", "local"), ("call", "cancel")))] >= 1


def test_the_first_scrape_after_start_is_correct(serve: Callable[..., Served]) -> None:
    """Issue 49: a serve started over a store that holds jobs answers its first scrape
    without waiting for the record's totals: either they are built, or the scrape holds the
    store's counts by state, says the totals are not ready, and holds no family of theirs
    (absent, never a 0 that is not true)."""
    s = serve()
    done = s.submit(spec("done", "pass"))
    s.submit(spec("sleepy", "import time; time.sleep(120)"))
    s.wait_for(done, lambda st: st["settled"])
    again = serve()  # a second server over the same store, scraped at once
    first = scrape(again)
    assert first[("dispatch_jobs_stored", (("state", "succeeded"),))] == 1
    assert first[("dispatch_jobs_stored", (("state", "unfinished"),))] == 1
    assert first[("dispatch_jobs_stored", (("state", "failed"),))] == 0
    if first[READY] == 0:  # the totals are being built: none of their families is here
        record = ("dispatch_jobs", "dispatch_outcomes", "dispatch_job_seconds",
                  "dispatch_budget_used", "dispatch_scheduler_unreachable")
        assert not [k for k in first if k[0].startswith(record) and
                    not k[0].startswith("dispatch_jobs_stored")], first
    else:
        assert first[("dispatch_jobs", (("state", "succeeded"),))] == 1
    built = samples(again)
    assert built[("dispatch_jobs", (("state", "succeeded"),))] == 1
    assert built[("dispatch_jobs_stored", (("state", "succeeded"),))] == 1


def test_unreachable_scheduler_is_a_gauge_and_a_tick_count(serve: Callable[..., Served],
                                                           tmp_path: Path) -> None:
    empty = tmp_path / "no-tools"
    empty.mkdir()
    s = serve(env={"PATH": str(empty)})
    r = s.post("/api/jobs", {"name": "far", "backend": "slurm", "command": ["true"]})
    assert r.status_code == 201
    m = samples(s)
    assert m[("dispatch_scheduler_unreachable", (("backend", "slurm"),))] == 1
    assert m[("dispatch_scheduler_tool_calls_total",
              (("backend", "slurm"), ("tool", "squeue")))] >= 1
    deadline = time.monotonic() + 60
    while m[("dispatch_tick_scheduler_unreachable_total", ())] < 1:
        assert time.monotonic() < deadline, "no tick ever met the unreachable scheduler"
        time.sleep(0.2)
        m = samples(s)
