"""Goodput end to end on the local backend: a two-node training that checkpoints every 3 steps
is preempted once (`dispatch local inject`); `dispatch goodput` charges the run since its
last checkpoint to `preempted`, in node-seconds (two nodes)."""

from __future__ import annotations

import json
import sys
import time
from datetime import datetime
from pathlib import Path

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


def _checkpoints(dispatch: Dispatch, objdir: Path | None = None) -> list[tuple[int, float]]:
    """(step, time) of every checkpoint line rank 0 wrote, or every rank of one object."""
    where, name = ((dispatch.tmp / "local", "node0.progress.jsonl") if objdir is None
                   else (objdir, "node*.progress.jsonl"))
    out = []
    for path in where.rglob(name):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            out.append((doc["step"], doc["time"]))
    return sorted(out)


def preempted_run(dispatch: Dispatch, injected: float) -> tuple[Path, float, float]:
    """Submission 1's object directory, and when its run was preempted and ended, as the
    local runner's status says: it acts on an injected request on its own (seconds after
    ``inject`` returns on a loaded machine), never before ``injected``."""
    for path in (dispatch.tmp / "local" / "objects").glob("*/status.json"):
        status = json.loads(path.read_text())
        if status["token"].endswith(".1"):
            (run,) = status["executions"]
            assert run["cause"]["kind"] == "preempted", status
            preempted, ended = (datetime.fromisoformat(run["cause"]["at"]).timestamp(),
                                datetime.fromisoformat(run["ended_at"]).timestamp())
            assert injected <= preempted <= ended, (injected, run)
            return path.parent, preempted, ended
    raise AssertionError("no object of submission 1")


def last_step_times(checkpoints: list[tuple[int, float]], ended: float) -> list[float]:
    """When each rank wrote the highest step checkpointed before the run ended. Each rank
    writes its line at its own time; the record keeps the line the supervisor read first
    (the later one only when both were there at one read), so either is the checkpoint's."""
    lines = [(s, t) for s, t in checkpoints if t <= ended]
    step = max(s for s, _ in lines)
    return [t for s, t in lines if s == step]


def test_a_preemption_loses_the_run_since_the_last_checkpoint(dispatch: Dispatch) -> None:
    dispatch.spawn("supervise", "--poll", str(POLL_S))  # stopped by the fixture
    spec = dispatch.spec("ck", TRAIN, nodes=2, policy=RESUBMIT_PREEMPT)
    job = json.loads(dispatch("submit", str(spec), "--json", check=True).stdout)["job"]
    # Wait for the checkpoint at step 6 to be in the record, then preempt before step 9's.
    wait_until(lambda: any(s == 6 for s, _ in _checkpoints(dispatch)),
               "the training never checkpointed step 6", timeout=90)
    wait_until(lambda: "checkpoint at step 6" in dispatch("history", "--all", job).stdout,
               "the checkpoint at step 6 never reached the record", timeout=60)
    before = time.time()
    dispatch("local", "inject", job, "preempt", check=True)
    dispatch.wait_for(job, lambda st: st["settled"], timeout=90)

    objdir, preempted, ended = preempted_run(dispatch, before)
    written = last_step_times(_checkpoints(dispatch, objdir), ended)
    doc = json.loads(dispatch("goodput", job, "--json", check=True).stdout)
    (group,) = doc["groups"]
    (lost,) = group["lost_work"]
    assert lost["cause"] == "preempted"
    # Lost work = the preemption's time minus the last checkpoint's, of one of the ranks
    # (the record keeps microseconds; a line's time is a float)
    assert any(abs(lost["seconds"] - max(0.0, preempted - t)) < 0.01 for t in written), \
        ([preempted - t for t in written], lost)
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
