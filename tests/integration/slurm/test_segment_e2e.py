"""Issue 6, item 5: the segment health check end to end on the Slurm testbed, real torchrun.

A two-task job array, two nodes per task, each task its own torchrun rendezvous (CPU, gloo)
through dispatch's ``dispatch-segment-c10d`` backend, submitted and supervised by ``dispatch
run``. One node of task 1 is drained; dispatch publishes ``segment_health_check.<array>.1``.
A simulated fault in task 1 (tests/fixtures/slurm/segment_train.py) makes torchrun's agent
start a new rendezvous round (``--max-restarts=1``); process 0 of task 1 runs the check
there, refuses to rejoin and exits non-zero, and ``srun --kill-on-bad-exit=1`` ends the
step. Task 0 runs on and completes. ``dispatch status --json`` and ``dispatch history`` say
why: the array's end is the exclusion's (node-lost, scheduler), not the application's.

Every wait is bounded; nothing asserts a duration. The drained node is always resumed and
the array cancelled, whatever happens.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import socket
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml
from slurm_helpers import hostnames
from tests.e2e.conftest import Dispatch

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[3]
TRAIN = REPO / "tests" / "fixtures" / "slurm" / "segment_train.py"
BACKEND = "dispatch-segment-c10d"


def wait_until(what: str, check: Callable[[], Any], timeout: float, every: float = 1.0) -> Any:
    """Poll ``check`` until it returns something true; fail naming ``what`` (a bound for a
    hung run, never an assertion about speed)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    raise AssertionError(f"gave up waiting for {what} after {timeout:g}s; last: {last!r}")


# Rendezvous ports are drawn below the kernel's ephemeral range (32768-60999 here) and above
# the testbeds' own ports (the highest: 26819). A port the kernel hands out (bind to port 0)
# is free now, but the job binds it minutes later (a resubmission reuses it), and meanwhile
# any outgoing connection on the machine may be given it: seen on the 26.05 testbed, both
# agents of a resubmitted array task found 127.0.0.1:55654 taken and timed out as clients.
RDZV_PORTS = range(27000, 32700)


def free_port_pair() -> int:
    """A port p with p and p + 1 free on 127.0.0.1 (one rendezvous per array task), outside
    the ephemeral range, so that no outgoing connection takes it before the job binds it."""
    rng = random.SystemRandom()
    for _ in range(200):
        port = rng.randrange(RDZV_PORTS.start, RDZV_PORTS.stop - 1)
        try:
            with socket.socket() as first, socket.socket() as second:
                first.bind(("127.0.0.1", port))
                second.bind(("127.0.0.1", port + 1))
            return port
        except OSError:
            continue
    raise AssertionError(f"no two adjacent free ports on 127.0.0.1 in {RDZV_PORTS}")


def entry_point_dir(root: Path) -> Path:
    """A dist-info carrying pyproject.toml's torchrun.handlers entry point: what an installed
    dispatch gives torchrun, without pip-installing this checkout."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    handlers = project["entry-points"]["torchrun.handlers"]
    info = root / f"dispatch-{project['version']}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: dispatch\nVersion: {project['version']}\n")
    (info / "entry_points.txt").write_text(
        "[torchrun.handlers]\n" + "".join(f"{k} = {v}\n" for k, v in handlers.items()))
    return root


def tasks_of(array: str) -> dict[str, tuple[str, str]]:
    """task id -> (state, nodes) from squeue, then sacct for tasks squeue no longer shows."""
    out: dict[str, tuple[str, str]] = {}
    acct = subprocess.run(["sacct", "-P", "-n", "-X", "-j", array, "-o", "JobID,State,NodeList"],
                          capture_output=True, text=True, timeout=30, check=False).stdout
    for line in acct.splitlines():
        job_id, state, nodes = (line.split("|") + ["", ""])[:3]
        if job_id.startswith(f"{array}_") and job_id[len(array) + 1:].isdigit():
            out[job_id[len(array) + 1:]] = (state.split(" ")[0], nodes)
    live = subprocess.run(["squeue", "-h", "-r", "-j", array, "-o", "%K|%T|%N"],
                          capture_output=True, text=True, timeout=30, check=False).stdout
    for line in live.splitlines():
        task, state, nodes = (line.split("|") + ["", ""])[:3]
        if task.isdigit():
            out[task] = (state, nodes)
    return out


def test_drained_array_task_is_excluded_at_its_next_rendezvous(cli: Dispatch,
                                                               tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun is not None, "torch (with its torchrun) is needed: pip install torch==2.13.0"
    segdir, control = tmp_path / "segment-health", tmp_path / "control"
    segdir.mkdir()
    control.mkdir()
    eps = entry_point_dir(tmp_path / "entry-points")
    spec = {
        "name": "seg-e2e", "backend": "slurm", "nodes": 2,
        "command": [torchrun, "--max-restarts=1", "--monitor-interval=0.5", str(TRAIN),
                    str(control)],
        "segment_health": {"dir": str(segdir), "launcher": "torchrun"},
        # --exclusive: the testbed nodes have room for both tasks; each task gets its own.
        "slurm": {"array": "0-1", "exclusive": True, "rdzv_host": "127.0.0.1",
                  "rdzv_port": free_port_pair()},
        "env": {"PYTHONPATH": os.pathsep.join([str(eps), str(REPO / "src")]),
                "OMP_NUM_THREADS": "1", "TRAIN_MAX_SECONDS": "900"},
    }
    spec_path = tmp_path / "seg-e2e.yaml"
    spec_path.write_text(yaml.safe_dump(spec))

    dry = cli("submit", "--dry-run", str(spec_path), check=True).stdout
    assert "--array=0-1" in dry and "--no-requeue" in dry and f"--rdzv-backend={BACKEND}" in dry

    run = cli.spawn("run", str(spec_path), "--json", "--poll", "1")
    array: str | None = None
    drained: str | None = None
    try:
        status = cli.wait_for("seg-e2e", lambda s: bool(s.get("objects")), timeout=120)
        array = status["objects"][0]
        assert array.isdigit(), status

        # Both tasks must run at once (task 0 runs until told to finish).
        def both_running() -> dict[str, tuple[str, str]] | None:
            t = tasks_of(array)
            return t if {k: v[0] for k, v in t.items()} == {"0": "RUNNING", "1": "RUNNING"} \
                else None

        tasks = wait_until("both array tasks running", both_running, timeout=300)
        task1_nodes = hostnames(tasks["1"][1])
        assert len(task1_nodes) == 2 and not set(task1_nodes) & set(hostnames(tasks["0"][1]))
        out_dir = tmp_path / "state" / "dispatch" / "slurm"

        def training_logs() -> dict[str, Path] | None:
            # Looked for on every poll: a task's output file appears when the task starts.
            found = {t: next(out_dir.glob(f"*.{array}_{t}.out"), None) for t in ("0", "1")}
            return {t: p for t, p in found.items() if p is not None} if all(
                p is not None and "started" in p.read_text() for p in found.values()) else None

        logs = wait_until("both tasks training", training_logs, timeout=180)

        drained = task1_nodes[1]
        subprocess.run(["scontrol", "update", f"nodename={drained}", "state=drain",
                        "reason=e2e"], check=True, timeout=30)

        # dispatch publishes for the array task, not for the array or task 0.
        # The publisher writes the unit's file, then the job's state file (each atomically):
        # wait for the state file's line itself, then read the unit's file it names.
        decision = segdir / f"segment_health_check.{array}.1"
        state_file = segdir / f"segment_health_check.{array}.state"
        wait_until(f"{state_file.name} to name task 1", lambda: state_file.exists()
                   and state_file.read_text() == '["1"]\n', timeout=120)
        body = json.loads(decision.read_text())
        assert drained in json.dumps(body)
        # Only task 1's unit: nothing for task 0, nor for the array as a whole (on a fresh
        # cluster the array job id can itself be 1, so compare the whole listing).
        units = sorted(p.name for p in segdir.glob("segment_health_check.*")
                       if not p.name.endswith(".state") and not p.name.startswith("."))
        assert units == [f"segment_health_check.{array}.1"], units

        # A fault in task 1: its next rendezvous round runs the check on process 0.
        (control / "fault.1").touch()
        def task1_ended() -> dict[str, tuple[str, str]] | None:
            t = tasks_of(array)
            return t if t.get("1", ("",))[0] in ("FAILED", "COMPLETED", "CANCELLED",
                                                   "TIMEOUT", "NODE_FAIL") else None

        ended = wait_until("task 1 to end", task1_ended, timeout=240)
        assert ended["1"][0] == "FAILED", ended
        assert ended["0"][0] == "RUNNING", ended  # task 0 runs on
        task1_log = logs["1"].read_text()
        assert "simulated fault" in task1_log
        assert "SegmentExcludedError" in task1_log or "is excluded by segment health" in \
            task1_log, task1_log[-4000:]
        assert f"job_id={array} task_id=1" in task1_log
        assert "TRAINED" not in task1_log

        # Task 0 finishes its training and succeeds.
        (control / "finish").touch()
        out, err = run.communicate(timeout=300)
        final = tasks_of(array)
        assert final["0"][0] == "COMPLETED" and final["1"][0] == "FAILED", final
        task0_log = logs["0"].read_text()
        assert task0_log.count("TRAINED") == 2 and "simulated fault" not in task0_log

        # `dispatch run` / `status --json`: the array failed because task 1 did, and task 1
        # ended because its unit was excluded: the decision's cause (node-lost, the
        # scheduler's node state), never the application's (issue 17). The scheduler's
        # words stay verbatim in detail; dispatch's explanation is the note.
        st = json.loads(out)
        assert run.returncode == 1 and st["state"] == "failed", (out, err)
        assert st["cause"]["kind"] == "node-lost", st["cause"]
        assert st["cause"]["provenance"] == "scheduler", st["cause"]
        assert st["cause"]["detail"].startswith("FAILED")
        assert "task 1 speaks for the array; others: 0 succeeded" in st["cause"]["note"]
        assert f"allocation unit {array}.1 was excluded" in st["cause"]["note"]
        assert drained in st["cause"]["note"]
        st2 = cli.json("status", "seg-e2e")
        assert st2["state"] == "failed" and st2["cause"] == st["cause"]
        assert st2["objects"] == [array]

        # `dispatch history`: the publication, with the drained node, and the outcome.
        history = cli("history", "seg-e2e", check=True).stdout
        # The publication's own line ("segment health: unit ..."); the application error's
        # line may also say "segment health" (the launcher's SegmentExcludedError, when its
        # output tail is the one read), so a bare substring would count it too.
        published = [ln for ln in history.splitlines() if "segment health: unit " in ln]
        assert len(published) == 1, history
        assert f"unit {array}.1 decided unavailable" in published[0]
        assert drained in published[0] and f"array job {array} task 1" in published[0]
        # The scheduler's words about the node; Slurm may add flags after DRAIN (PLANNED:
        # the backfill scheduler has planned a job there; seen on 22.05).
        assert re.search(r"DRAIN(\+[A-Z_]+)* reason=e2e", published[0]), published[0]
        events = cli.json("history", "seg-e2e")
        (seg,) = [e for e in events if e["type"] == "SegmentPublished"]
        assert seg["event"]["unit_job_id"] == array and seg["event"]["task_id"] == "1"
        assert seg["event"]["nodes"] == [drained]
        assert "FAILED" in history and "task 1" in history
        (end,) = [e["event"] for e in events if e["type"] == "ExecutionEnded"]
        assert end["ref"] == array and end["cause"]["kind"] == "node-lost"
        assert "ended: non-zero-exit" not in history, history  # (the note may quote it)
    finally:
        if drained is not None:
            subprocess.run(["scontrol", "update", f"nodename={drained}", "state=resume"],
                           capture_output=True, timeout=30, check=False)
        if array is not None:
            subprocess.run(["scancel", array], capture_output=True, timeout=30, check=False)
        (control / "finish").touch()
