"""R5 for the HTTP API (issue 32 item 6): while the Slurm tools hang, /api/jobs answers
within the read's deadline, a Slurm job's row is its last committed state marked
`scheduler: unreachable` and a local job's row is as the local backend shows it; the hung
tools a request ran are killed by the time it answers.

The Slurm tools are the hanging scripts of tests/integration/supervision (put first on
PATH; the real Slurm testbed is never touched). The Slurm job is another cluster's: serve
serves the scopes of live jobs too, and asks this machine's Slurm which cluster it is
(``scontrol show config`` answers at once, ``here``), so it refuses to serve that job's
scope and every hung Slurm tool that runs is a read's."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from serve_harness import Served, spec
from tests.integration.supervision.helpers import (
    bound_slurm_job,
    hung_slurm_tools,
    hung_tools_alive,
    kill_hung_tools,
    slurm_calls,
)

READ_DEADLINE_S = 3
# Generous (a loaded machine starts a CLI slowly): a read answers just past the deadline;
# before this change it waited for squeue's own 30 s timeout, then sacct's (35 s seen).
READ_BOUND_S = 20.0


def _timed_get(s: Served, path: str) -> tuple[Any, float]:
    started = time.monotonic()
    r = s.client.get(path)
    return r, time.monotonic() - started


def test_api_jobs_answers_within_the_deadline_while_slurm_hangs(serve: Any,
                                                                 tmp_path: Path) -> None:
    bin_dir, calls = hung_slurm_tools(tmp_path, cluster="here")
    try:
        s: Served = serve("--scope", "local", env={
            "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
            "DISPATCH_READ_DEADLINE": str(READ_DEADLINE_S),
            "DISPATCH_SLURM_OUTPUT_DIR": str(tmp_path / "slurm-out"),
            "DISPATCH_KUBECONFIG": str(tmp_path / "no-kubeconfig")})
        on_slurm = bound_slurm_job(s.env["DISPATCH_STORE"], scope="slurm:elsewhere")
        local = s.submit(spec("quick", "import time; time.sleep(60)"))
        shown = s.wait_for(local, lambda st: st["state"] == "running")  # for 60 s: no window
        assert shown["scheduler"] == "ok" and slurm_calls(calls) == []

        r, took = _timed_get(s, "/api/jobs")
        assert r.status_code == 200, r.text
        assert took < READ_BOUND_S, f"/api/jobs waited {took:.1f}s for the hung squeue"
        rows = {d["job"]: d for d in r.json()}
        assert (rows[on_slurm]["scheduler"], rows[on_slurm]["state"]) == ("unreachable",
                                                                          "running")
        assert (rows[local]["scheduler"], rows[local]["state"]) == ("ok", "running")
        assert "squeue" in {n for n, _ in slurm_calls(calls)}, "the hung squeue was not asked"
        assert hung_tools_alive(calls) == [], "a hung Slurm tool outlived the request"

        # One job: its last committed state, marked, with the status of exit 4 (503).
        r, took = _timed_get(s, f"/api/jobs/{on_slurm}")
        assert r.status_code == 503, r.text
        assert took < READ_BOUND_S, f"/api/jobs/ID waited {took:.1f}s for the hung squeue"
        assert (r.json()["scheduler"], r.json()["state"]) == ("unreachable", "running")
        assert hung_tools_alive(calls) == [], "a hung Slurm tool outlived the request"
    finally:
        kill_hung_tools(calls)
