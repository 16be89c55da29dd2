"""A tiny CPU training job for the dispatch demo: fits y = 3x + 2 by SGD on every node,
checkpoints after each step to a file, and resumes from it after a recovery.

On its first submission, node 0 asks the local scheduler to preempt the job at step 5
(visibly, through `dispatch local inject`), so the demo shows a recovery by cause. Every rank
stops at step 5 first (rank 0 waits until each has checkpointed it), so that all of them
resume from the same step, as ranks that checkpoint together would. Each checkpoint is also
reported to dispatch (DISPATCH_PROGRESS_FILE): `dispatch status demo` shows the last one.
"""

import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

STEPS = int(os.environ.get("DEMO_STEPS", "12"))
rank = int(os.environ.get("RANK", "0"))
world = int(os.environ.get("WORLD_SIZE", "1"))
job = os.environ.get("DISPATCH_JOB_ID", "demo")
submission = int(os.environ.get("DISPATCH_SUBMISSION", "1"))
ckpt_dir = Path(os.environ.get("DEMO_CHECKPOINT_DIR", "/tmp/dispatch-demo")) / job
ckpt_dir.mkdir(parents=True, exist_ok=True)
ckpt = ckpt_dir / f"rank{rank}.json"

state = {"step": 0, "w": 0.0, "b": 0.0}
if ckpt.exists():
    state = json.loads(ckpt.read_text())
    print(f"[rank {rank}/{world}] resumed from {ckpt} at step {state['step']} (every rank "
          "checkpointed this step before the preemption)", flush=True)
PREEMPT_AT = 5
preempting = submission == 1 and os.environ.get("DEMO_PREEMPT", "1") == "1"


def report_checkpoint(step: int) -> None:
    """Tell dispatch a checkpoint is durable (one JSON line; no import of dispatch)."""
    progress = os.environ.get("DISPATCH_PROGRESS_FILE")
    if progress:
        with open(progress, "a") as f:
            f.write(json.dumps({"step": step, "checkpoint": True, "time": time.time()}) + "\n")


def every_rank_at(step: int, wait_s: float = 30.0) -> bool:
    """Whether every rank's checkpoint holds ``step`` (waited for up to ``wait_s``)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            if all(json.loads((ckpt_dir / f"rank{r}.json").read_text())["step"] >= step
                   for r in range(world)):
                return True
        except (OSError, ValueError, KeyError):
            pass  # a rank not there yet
        time.sleep(0.1)
    return False


rng = random.Random(rank)
while state["step"] < STEPS:
    gw = gb = 0.0
    for _ in range(64):
        x = rng.uniform(-1, 1)
        err = state["w"] * x + state["b"] - (3 * x + 2)
        gw += err * x / 64
        gb += err / 64
    state["w"] -= 0.5 * gw
    state["b"] -= 0.5 * gb
    state["step"] += 1
    tmp = ckpt.with_suffix(".tmp")
    tmp.write_text(json.dumps(state))
    os.replace(tmp, ckpt)
    report_checkpoint(state["step"])
    print(f"[rank {rank}/{world}] submission {submission} step {state['step']}: "
          f"w={state['w']:.3f} b={state['b']:.3f}", flush=True)
    if preempting and state["step"] == PREEMPT_AT:
        if rank == 0:
            every_rank_at(PREEMPT_AT)
            argv = [sys.executable, "-m", "dispatch.cli", "local", "inject", job, "preempt"]
            print(f"[rank 0] demo: every rank checkpointed step {PREEMPT_AT}; asking the "
                  f"local scheduler to preempt this job: {' '.join(argv)}", flush=True)
            subprocess.run(argv, check=False)
        else:
            print(f"[rank {rank}] demo: waiting at step {PREEMPT_AT} for the preemption rank 0 "
                  "asks for", flush=True)
        time.sleep(60)  # the preemption arrives meanwhile
    time.sleep(float(os.environ.get("DEMO_STEP_SECONDS", "0.3")))

ok = abs(state["w"] - 3) < 0.5 and abs(state["b"] - 2) < 0.5
print(f"[rank {rank}] done: w={state['w']:.3f} b={state['b']:.3f} {'converged' if ok else ''}",
      flush=True)
sys.exit(0 if ok else 1)
