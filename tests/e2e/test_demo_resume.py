"""Issue 48 item 10: the demo's ranks all resume from the same step after its preemption
(each checkpointed it before rank 0 asked for the preemption), each saying why, and its
checkpoints reach the record (`dispatch status` shows the last one while it runs)."""

from __future__ import annotations

import os
import re
import shutil
import sys

from tests.e2e.conftest import REPO, Dispatch


def test_the_demo_ranks_resume_from_the_same_step_and_say_why(dispatch: Dispatch) -> None:
    shutil.copytree(REPO / "examples" / "demo", dispatch.tmp / "examples" / "demo")
    dispatch.env.update({
        "DEMO_CHECKPOINT_DIR": str(dispatch.tmp / "ckpt"), "DEMO_STEP_SECONDS": "0.05",
        "PATH": os.path.dirname(sys.executable) + os.pathsep + dispatch.env["PATH"]})
    done = dispatch("run", "examples/demo/job.yaml", "--json", "--poll", "0.2", timeout=300)
    assert done.returncode == 0, (done.stdout, done.stderr)
    logs = dispatch("logs", "demo", check=True).stdout  # the last submission's
    resumed = re.findall(r"\[rank (\d)/2\] resumed from \S+ at step (\d+) \(every rank "
                         r"checkpointed this step before the preemption\)", logs)
    assert sorted(resumed) == [("0", "5"), ("1", "5")], logs
    history = dispatch("history", "--all", "demo", check=True).stdout
    assert "submission 1 execution 0, written" in history  # the checkpoints were reported
