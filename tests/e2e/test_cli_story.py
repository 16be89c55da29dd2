"""Issue 48 item 8: a running job's status says when it started, for how long, and its last
checkpoint, beside its goodput; the story folds an execution's checkpoints into one line
(`history --all` lists each). The real CLI on a 80- and 120-column pseudo-terminal."""

from __future__ import annotations

import re
import sys
from datetime import datetime

import pytest
from tests.e2e.conftest import Dispatch, wait_until
from tests.e2e.terminal import on_terminal

STYLE = re.compile(r"\x1b\[[0-9;]*m")
# A checkpoint every step, a step every 0.2 s, until cancelled.
TRAIN = [sys.executable, "-c",
         "import time\n"
         "from dispatch.progress import report\n"
         "for step in range(1, 10**6):\n"
         "    time.sleep(0.2)\n"
         "    report(step, checkpoint=True)\n"]


def shown(d: Dispatch, columns: int, *args: str) -> list[str]:
    code, out, err = on_terminal(d.argv(*args), d.env, str(d.tmp), columns)
    assert code == 0, (out, err)
    return [STYLE.sub("", x).rstrip() for x in out.splitlines()]


def checkpoints(d: Dispatch, job: str) -> list[int]:
    return [e["event"]["step"] for e in d.json("history", job)
            if e["type"] == "CheckpointRecorded"]


@pytest.mark.parametrize("columns", [80, 120])
def test_a_running_job_says_since_when_and_its_last_checkpoint(dispatch: Dispatch,
                                                               columns: int) -> None:
    dispatch.spawn("supervise", "--poll", "0.3")  # stopped by the fixture
    spec = dispatch.spec("longrun-00", TRAIN)
    job = dispatch.json("submit", str(spec))["job"]
    wait_until(lambda: len(checkpoints(dispatch, job)) >= 3,
               "three checkpoints never reached the record", timeout=120)

    doc = dispatch.json("status", job)
    run = doc["running"]
    assert doc["state"] == "running" and doc["level"] == "full"
    assert (run["submission"], run["execution"]) == (1, 0)
    # Times, never ages: the same record gives the same document whenever it is read.
    started = datetime.fromisoformat(run["started"])
    written = datetime.fromisoformat(run["checkpoint"]["written"])
    assert run["checkpoint"]["step"] >= 3 and written >= started, run
    assert set(run) == {"submission", "execution", "started", "checkpoint"}

    lines = shown(dispatch, columns, "status", job)
    text = "\n".join(lines)
    since = next(x for x in lines if x.startswith("  running since "))
    assert "(elapsed " in since and len(since) <= columns, lines
    last = next(x for x in lines if x.startswith("  last checkpoint: step "))
    assert "s ago (submission 1 execution 0)" in last and len(last) <= columns, lines
    assert "goodput" in text
    assert "level" not in text  # the usual level goes unsaid

    dispatch("cancel", job, check=True)
    dispatch.wait_for(job, lambda st: st["settled"], timeout=90)
    assert dispatch.json("status", job)["running"] is None
    steps = checkpoints(dispatch, job)  # the record no longer changes

    folded = shown(dispatch, columns, "history", job)
    (line,) = [x for x in folded if "checkpoint" in x]
    assert (f"checkpoints at steps {min(steps)}\u2013{max(steps)} ({len(steps)}, every ~"
            in line), folded
    every = shown(dispatch, columns, "history", "--all", job)
    assert [x for x in every if "checkpoint at step" in x] == [
        x for x in every if "checkpoint" in x]
    assert len([x for x in every if "checkpoint at step" in x]) == len(steps)
    assert len(every) == len(folded) + len(steps) - 1
    assert [x for x in every if "checkpoint" not in x] == \
        [x for x in folded if "checkpoint" not in x]
