"""Issue 45 item 16: the crash windows of a segment publication, on the Slurm lane where
publications happen (segment health names Slurm allocation units).

A two-node job with segment health runs; one of its nodes is drained, so the next look
shows the unit unhealthy and the supervisor publishes it: SegmentPublished is appended
(the intent), then the decision files are written (the act). A real ``dispatch supervise``
with the failpoint armed dies there (its exit status says so); a clean one takes the scope
over and brings the files in step with the record: the unit's file names the drained node,
the job's state file names the unit, and the publication is in the record once.

Its points are SLURM_POINTS of tests/integration/supervision/crash.py: with the crash
matrix's actions they arm every failpoint (tests/chaos/test_failpoints_armed.py).
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from slurm_helpers import job_nodes, wait_nodes_idle
from tests.e2e.conftest import Dispatch
from tests.integration.supervision.crash import SLURM_POINTS

from dispatch.core.events import SegmentPublished
from dispatch.core.segment_decisions import allocation_unit
from dispatch.segment_health.artifact import state_filename, unit_filename
from dispatch.stores.select import open_store
from dispatch.support import failpoints

pytestmark = pytest.mark.slurm



def wait_until(what: str, check: Callable[[], Any], timeout: float) -> Any:
    """Poll ``check`` until it returns something true; a bound for a hung run, never an
    assertion about speed."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.5)
    raise AssertionError(f"gave up waiting for {what} after {timeout:g}s; last: {last!r}")


@pytest.mark.parametrize("point", SLURM_POINTS)
def test_a_supervisor_dying_in_a_segment_publication(cli: Dispatch, tmp_path: Path,
                                                     point: str) -> None:
    failpoints.parse(point)  # an unknown name: the error naming the known ones
    segdir = tmp_path / "segment-health"
    segdir.mkdir()
    segdir.chmod(0o777)
    path = cli.spec("segcrash", ["sleep", "600"], backend="slurm", nodes=2,
                    segment_health={"dir": str(segdir), "launcher": "none"})
    cli("submit", str(path), check=True)  # sends the first submission itself
    store_url = f"sqlite://{cli.env['DISPATCH_STORE']}"
    ref = ""
    drained = ""
    try:
        st = cli.wait_for("segcrash", lambda s: s["state"] == "running" and bool(s["objects"]),
                          timeout=180)
        ref = st["objects"][0]
        nodes = wait_until("the job's nodes", lambda: job_nodes(ref), timeout=60)
        assert len(nodes) == 2, nodes
        drained = nodes[1]
        subprocess.run(["scontrol", "update", f"nodename={drained}", "state=drain",
                        f"reason=segcrash-{point}"], check=True, timeout=30)

        dying = subprocess.Popen(cli.argv("supervise", "--lease", "2", "--poll", "0.5"),
                                 env={**cli.env, failpoints.ENV: point}, cwd=cli.tmp,
                                 text=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = dying.communicate(timeout=180)
        except subprocess.TimeoutExpired:
            dying.kill()
            dying.communicate()
            raise AssertionError(f"the supervisor never reached {point}") from None
        assert dying.returncode == failpoints.EXIT_CODE, f"exit {dying.returncode}:\n{err}"
        assert f"failpoint {point}:" in err, err

        clean = cli.spawn("supervise", "--lease", "2", "--poll", "0.5")
        unit_job, task = allocation_unit(ref)
        state_file = segdir / state_filename(unit_job)
        wait_until(f"{state_file.name} to name the unit", lambda: state_file.exists()
                   and json.loads(state_file.read_text()) == [task], timeout=120)
        decision = json.loads((segdir / unit_filename(unit_job, task)).read_text())
        assert drained in json.dumps(decision), decision
        with open_store(store_url) as store:
            [row] = store.list_jobs(name="segcrash")
            published = [e for e in store.read(row.job_id) if isinstance(e, SegmentPublished)]
        assert [(e.unit_job_id, e.task_id) for e in published] == [(unit_job, task)], published
        assert drained in published[0].nodes

        cli("cancel", "segcrash", check=True)
        cli.wait_for("segcrash", lambda s: s["state"] == "cancelled", timeout=120)
        clean.terminate()
        clean.wait(30)
    finally:
        if ref:
            subprocess.run(["scancel", ref], capture_output=True, timeout=30, check=False)
        if drained:
            subprocess.run(["scontrol", "update", f"nodename={drained}", "state=resume"],
                           capture_output=True, timeout=30, check=False)
            wait_nodes_idle((drained,))
