"""Goodput end to end on the local backend: a two-node training that checkpoints every 3 steps
is preempted once (`dispatch local inject`); `dispatch goodput` charges the run since its
last checkpoint to `preempted`, in node-seconds (two nodes)."""

from __future__ import annotations

import json
import sys
import time

from tests.e2e.conftest import Dispatch, wait_until
from tests.e2e.test_cli_local import RESUBMIT_PREEMPT

POLL_S = 0.5
# Rank 0 reports through dispatch's helper, rank 1 appends the JSON line itself (no import):
# a step every 0.4s, a checkpoint every 3 steps. Submission 2 runs 3 steps and succeeds.
# The interpreter is this one: the helper needs dispatch installed (and nothing else).
TRAIN = [sys.executable, "-c",
    "import json, os, time\n"
    "rank = int(os.environ['RANK'])\n"
    "first = os.environ['DISPATCH_SUBMISSION'] == '1'\n"
    "for step in range(1, 1000 if first else 4):\n"
    "    time.sleep(0.4)\n"
    "    if step % 3:\n"
    "        continue\n"
    "    if rank == 0:\n"
    "        from dispatch.progress import report\n"
    "        report(step, checkpoint=True)\n"
    "    else:\n"
    "        with open(os.environ['DISPATCH_PROGRESS_FILE'], 'a') as f:\n"
    "            f.write(json.dumps({'step': step, 'checkpoint': True,\n"
    "                                'time': time.time()}) + '\\n')\n"]


def _checkpoints(dispatch: Dispatch) -> list[tuple[int, float]]:
    """(step, time) of every checkpoint line rank 0 wrote in submission 1."""
    found = list((dispatch.tmp / "local").rglob("node0.progress.jsonl"))
    out = []
    for path in found:
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            out.append((doc["step"], doc["time"]))
    return sorted(out)


def test_a_preemption_loses_the_run_since_the_last_checkpoint(dispatch: Dispatch) -> None:
    dispatch.spawn("supervise", "--poll", str(POLL_S))  # stopped by the fixture
    spec = dispatch.spec("ck", TRAIN, nodes=2, policy=RESUBMIT_PREEMPT)
    job = json.loads(dispatch("submit", str(spec), "--json", check=True).stdout)["job"]
    # Wait for the checkpoint at step 6 to be in the record, then preempt before step 9's.
    wait_until(lambda: any(s == 6 for s, _ in _checkpoints(dispatch)),
               "the training never checkpointed step 6", timeout=90)
    wait_until(lambda: "checkpoint at step 6" in dispatch("history", job).stdout,
               "the checkpoint at step 6 never reached the record", timeout=60)
    before = time.time()
    dispatch("local", "inject", job, "preempt", check=True)
    after = time.time()
    dispatch.wait_for(job, lambda st: st["settled"], timeout=90)

    last = max(t for _, t in _checkpoints(dispatch) if t <= after)
    doc = json.loads(dispatch("goodput", job, "--json", check=True).stdout)
    (group,) = doc["groups"]
    (lost,) = group["lost_work"]
    assert lost["cause"] == "preempted"
    # Lost work = the preemption's time minus the last checkpoint's, within one poll
    # interval of the window in which the preemption was injected.
    assert before - last - POLL_S <= lost["seconds"] <= after - last + POLL_S, (
        before - last, after - last, lost)
    assert lost["node_seconds"] == 2 * lost["seconds"]  # two nodes (G2)
    parts = {(p["phase"], p["cause"]): p for p in group["parts"]}
    recovering = parts[("recovering", "preempted")]
    assert recovering["node_seconds"] == 2 * recovering["seconds"] > 0
    badput = {b["cause"]: b["node_seconds"] for b in group["badput"]}
    assert abs(badput["preempted"] - (recovering["node_seconds"] + lost["node_seconds"])) \
        < 1e-6
    assert abs(sum(p["seconds"] for p in group["parts"]) - group["wall_seconds"]) < 1e-5
    assert 0 < group["goodput"] < 1
    status = dispatch("status", job)
    assert "goodput" in status.stdout and "badput preempted" in status.stdout
