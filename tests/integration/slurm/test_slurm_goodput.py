"""Issue 25 on the real Slurm testbed: a real preemption (a job on the high-priority
partition) shows as `preempted` badput in node-time in `dispatch goodput`, and the job's
runs as running time on the nodes Slurm gave it."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
from slurm_helpers import slurm
from tests.e2e.conftest import Dispatch

pytestmark = pytest.mark.slurm

# Submission 1 checkpoints step 3 (a JSON line in the node's DISPATCH_PROGRESS_FILE, no
# dispatch import) and runs on until preempted; submission 2 runs 2 s and succeeds.
LONG_THEN_OK = ["bash", "-c",
                'if [ "$DISPATCH_SUBMISSION" = 1 ]; then '
                'printf \'{"step": 3, "checkpoint": true, "time": %s}\\n\' "$(date +%s.%N)" '
                '>> "$DISPATCH_PROGRESS_FILE"; sleep 300; fi; sleep 2']


def test_a_real_preemption_is_preempted_badput_in_node_hours(cli: Dispatch) -> None:
    policy = {"rules": [{"on": ["preempted"], "action": "resubmit", "budget": 2}]}
    path = cli.spec("gp", LONG_THEN_OK, backend="slurm", nodes=2, policy=policy,
                    slurm={"exclusive": True, "nodelist": "n1,n2"})
    proc = cli.spawn("run", str(path), "--json", "--poll", "0.5")
    # Running, and its start is in the record (what goodput splits on).
    cli.wait_for("gp", lambda s: s["state"] == "running")
    from tests.e2e.conftest import wait_until
    wait_until(lambda: "execution 0 running on 2 node(s)" in cli("history", "gp").stdout,
               "the start never reached the record", timeout=60)
    wait_until(lambda: "checkpoint at step 3" in cli("history", "--all", "gp").stdout,
               "the checkpoint never reached the record", timeout=60)
    # Some work after the checkpoint, lost to the preemption. Slurm's end time is in whole
    # seconds (truncated), so the lost work reads up to 1 s short of the real interval:
    # 3 s of sleep guarantee more than 2 s of lost work.
    time.sleep(3)
    high = slurm("sbatch", "--parsable", "-o", "/dev/null", "-p", "high", "--exclusive", "-w",
                 "n1", "--wrap", "sleep 2").strip()
    out, err = proc.communicate(timeout=240)
    subprocess.run(["scancel", high], capture_output=True, check=False)
    st = json.loads(out)
    assert proc.returncode == 0 and st["state"] == "succeeded" and st["submissions"] == 2, err

    done = cli("goodput", "gp", "--json", check=True)
    (group,) = json.loads(done.stdout)["groups"]
    parts = {(p["phase"], p["cause"]): p for p in group["parts"]}
    recovering = parts[("recovering", "preempted")]
    assert recovering["seconds"] > 0
    assert recovering["node_seconds"] == pytest.approx(2 * recovering["seconds"])  # G2
    running = parts[("running", "none")]
    assert running["seconds"] > 0
    assert running["node_seconds"] == pytest.approx(2 * running["seconds"])
    badput = {b["cause"]: b["node_seconds"] for b in group["badput"]}
    assert badput["preempted"] >= recovering["node_seconds"]
    assert abs(sum(p["seconds"] for p in group["parts"]) - group["wall_seconds"]) < 1e-5
    # G3 on Slurm: the run since the checkpoint is lost work charged to the preemption.
    (lost,) = group["lost_work"]
    assert lost["cause"] == "preempted" and lost["seconds"] >= 2
    assert lost["seconds"] <= running["seconds"]
    assert lost["node_seconds"] == pytest.approx(2 * lost["seconds"])
    assert badput["preempted"] == pytest.approx(recovering["node_seconds"]
                                                + lost["node_seconds"])
    table = cli("goodput", "gp", check=True).stdout
    assert "preempted" in table and "node-time" in table
