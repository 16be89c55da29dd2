"""Goodput from a log pattern on the local backend (G3): a two-node training that cannot import
dispatch and only prints "saved checkpoint at step N" every 3 steps is preempted once
(`dispatch local inject`); the run since its last matching line is lost work, charged to
`preempted`, in node-seconds. The preemption's time is the runner's (its status.json): it acts
on the injected request on its own, seconds after `inject` returns on a loaded machine."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from tests.e2e.conftest import Dispatch, wait_until
from tests.e2e.test_cli_local import RESUBMIT_PREEMPT
from tests.e2e.test_goodput_local import last_step_times, preempted_run

POLL_S = 0.5
# -I -S: no PYTHONPATH, no site-packages, so no dispatch; the training proves it cannot
# import it (exit 3) and only prints. Submission 2 runs 3 steps and succeeds.
TRAIN = [sys.executable, "-I", "-S", "-c",
    "import os, sys, time\n"
    "try:\n"
    "    import dispatch\n"
    "    sys.exit(3)\n"
    "except ImportError:\n"
    "    pass\n"
    "first = os.environ['DISPATCH_SUBMISSION'] == '1'\n"
    "for step in range(1, 1000 if first else 4):\n"
    "    time.sleep(0.4)\n"
    "    print(f'loss at step {step}: 0.5', flush=True)\n"
    "    if step % 3 == 0:\n"
    "        print(f'[rank{os.environ[\"RANK\"]}] saved checkpoint at step {step}', "
    "flush=True)\n"]
PROGRESS = {"checkpoint_pattern": r"saved checkpoint at step (?P<step>\d+)"}


def _checkpoints(dispatch: Dispatch, objdir: Path | None = None) -> list[tuple[int, float]]:
    """(step, time) of every matching line the runner saw on node 0, or on every node of one
    object (each rank prints its own line for a step)."""
    out = []
    where, name = ((dispatch.tmp / "local", "node0.logcheckpoints.jsonl") if objdir is None
                   else (objdir, "node*.logcheckpoints.jsonl"))
    for path in where.rglob(name):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            out.append((doc["step"], doc["time"]))
    return sorted(out)



def test_a_preemption_loses_the_run_since_the_last_matching_line(dispatch: Dispatch) -> None:
    dispatch.spawn("supervise", "--poll", str(POLL_S))  # stopped by the fixture
    spec = dispatch.spec("logck", TRAIN, nodes=2, policy=RESUBMIT_PREEMPT, progress=PROGRESS)
    job = json.loads(dispatch("submit", str(spec), "--json", check=True).stdout)["job"]
    wait_until(lambda: any(s == 6 for s, _ in _checkpoints(dispatch)),
               "no line said the checkpoint at step 6", timeout=90)
    wait_until(lambda: "checkpoint at step 6" in dispatch("history", job, "--all").stdout,
               "the checkpoint at step 6 never reached the record", timeout=60)
    before = time.time()
    dispatch("local", "inject", job, "preempt", check=True)
    final = dispatch.wait_for(job, lambda st: st["settled"], timeout=90)
    assert final["state"] == "succeeded", final  # the training never could import dispatch

    objdir, preempted, ended = preempted_run(dispatch, before)
    # the last matching line the run wrote before it ended (a line between the preemption's
    # notice and the kill is a checkpoint too, and then nothing is lost)
    written = last_step_times(_checkpoints(dispatch, objdir), ended)
    doc = json.loads(dispatch("goodput", job, "--json", check=True).stdout)
    (group,) = doc["groups"]
    (lost,) = group["lost_work"]
    assert lost["cause"] == "preempted"
    # Lost work = the preemption's time minus the last matching line's, of one of the ranks
    # (the record keeps microseconds; the line's time is a float)
    assert any(abs(lost["seconds"] - max(0.0, preempted - t)) < 0.01 for t in written), \
        ([preempted - t for t in written], lost)
    assert lost["node_seconds"] == 2 * lost["seconds"]  # two nodes (G2)
    badput = {b["cause"]: b["node_seconds"] for b in group["badput"]}
    assert badput["preempted"] >= lost["node_seconds"] > 0
