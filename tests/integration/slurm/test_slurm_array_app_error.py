"""Issue 23 for a Slurm job array on the real testbed: each task's nodes get an error file of
their own (named on the node from SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID), and the failing
task's error is read from its own file, never from another task's.

The program writes the error file in the format torchelastic's agent leaves for a failed
worker (``{"message": {"message", "extraInfo": {"py_callstack", "timestamp"}, "errorCode"}}``,
as in tests/fixtures/torchelastic/record-main-raising.json), to the path dispatch put in
TORCHELASTIC_ERROR_FILE: torch is not installed here, the wrapper and the reader are what is
under test (test_slurm_app_error.py runs the real torchrun)."""

from __future__ import annotations

import re
import sys

import pytest
from slurm_helpers import Cluster

from dispatch.core.model import CauseKind, State

pytestmark = [pytest.mark.slurm]

# Every node says where it runs and which file it was given. Task 0's first node leaves a
# decoy in its own file, stamped earlier than anything else, then both of its nodes succeed;
# task 1's second node (SLURM_NODEID 1) fails with its words in its own file.
PROGRAM = r"""
import json, os, sys, time
task, node = os.environ["SLURM_ARRAY_TASK_ID"], os.environ["SLURM_NODEID"]
path = os.environ["TORCHELASTIC_ERROR_FILE"]
# one write() per line: print() writes text and newline apart when stdout is unbuffered
os.write(1, f"task {task} node {node} on {os.environ['SLURMD_NODENAME']} file {path}\n".encode())

def leave(words, stamp):
    stack = f"Traceback (most recent call last):\n  File \"train.py\", line 9, in main\n{words}\n"
    with open(path, "w") as fh:
        json.dump({"message": {"message": words, "extraInfo": {
            "py_callstack": stack, "timestamp": str(stamp)}, "errorCode": 1}}, fh)

if task == "0":
    if node == "0":
        leave("ValueError: a decoy in task 0's own file", int(time.time()) - 60)
    sys.exit(0)
if node == "1":
    time.sleep(1)
    leave("FloatingPointError: loss is NaN in task 1", int(time.time()))
    print("this output line is not the error", flush=True)
    sys.exit(1)
time.sleep(120)  # killed by srun --kill-on-bad-exit when its neighbour fails
"""


def test_an_array_tasks_error_comes_from_its_own_file(cluster: Cluster) -> None:
    ref, token = cluster.submit((sys.executable, "-c", PROGRAM), nodes=2, time_limit=300,
                                slurm={"array": "0-1"})
    report = cluster.wait(token, lambda o: o.ended, timeout=240, what="the array's end")
    assert report.state is State.FAILED, report
    assert report.cause.kind is CauseKind.NON_ZERO_EXIT, report.cause
    assert report.cause.note.startswith("task 1 speaks for the array"), report.cause

    outputs = {p.name: p.read_text() for p in cluster.backend.logs(ref)}
    said = {(m.group(1), m.group(2)): (m.group(3), m.group(4)) for text in outputs.values()
            for m in re.finditer(r"task (\d+) node (\d+) on (\S+) file (\S+)", text)}
    prefix = f"{cluster.out_dir}/{token}"
    # Each task's nodes were given files of their own, named by the array and the task.
    for task in ("0", "1"):
        for node in ("0", "1"):
            assert said[(task, node)][1] == \
                f"{prefix}.{ref}_{task}.r0.node{node}.error.json", said
    assert (cluster.out_dir / f"{token}.{ref}_0.r0.node0.error.json").is_file()  # the decoy

    error = report.executions[-1].error
    assert error is not None, report
    assert error.source.value == "torchelastic-error-file", error
    assert error.message == "FloatingPointError: loss is NaN in task 1", error
    assert error.node == said[("1", "1")][0], (error, said)
    assert "decoy" not in error.message + error.traceback_tail and not error.note, error
    # The application's words never reach the scheduler's voice.
    assert "FloatingPointError" not in report.cause.detail + report.cause.note
