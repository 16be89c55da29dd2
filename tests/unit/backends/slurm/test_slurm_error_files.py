"""Issue 23, the Slurm reader of the nodes' error files (app_errors.py) on real files in a
temporary output directory: an array task's error comes from its own files only; a file
that is a symbolic link, a hard link to another job's file, huge, truncated, not JSON or
older than the execution is ignored with a note, the output tail speaks, and the cause is
never touched."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from dispatch.backends.slurm.app_errors import capture, with_error
from dispatch.core.model import Cause, CauseKind, Execution, ObjectReport, State

STARTED = datetime.now(UTC) - timedelta(minutes=5)
OUTPUT = ("step 6 loss 0.1\nTraceback (most recent call last):\n  File \"train.py\", line 9\n"
          "ValueError: the words of the output\n"
          "srun: error: n2: task 1: Exited with exit code 1\n")


def error_file(words: str, stamp: int = 1_900_000_000) -> str:
    """torchelastic's agent's copy of a failed worker's file (errorCode added)."""
    return json.dumps({"message": {"message": words, "extraInfo": {
        "py_callstack": f"Traceback (most recent call last):\n{words}\n",
        "timestamp": str(stamp)}, "errorCode": 1}})


def execution() -> Execution:
    cause = Cause(kind=CauseKind.NON_ZERO_EXIT, detail="FAILED; ExitCode=1:0", exit_code=1)
    return Execution(index=0, started_at=STARTED, ended_at=STARTED + timedelta(minutes=1),
                     cause=cause, nodes=("n1", "n2"))


def setup_task(tmp: Path, ref: str) -> Path:
    out = tmp / f"tok.1.{ref}.out"
    out.write_text(OUTPUT)
    return out


def test_an_array_task_reads_its_own_file_never_another_tasks(tmp_path: Path) -> None:
    out0 = setup_task(tmp_path, "100_0")
    out1 = setup_task(tmp_path, "100_1")
    # task 0's file is stamped earlier: a reader that mixed tasks would take it first
    (tmp_path / "tok.1.100_0.r0.node0.error.json").write_text(
        error_file("KeyError: task 0's own", stamp=1_000))
    (tmp_path / "tok.1.100_1.r0.node1.error.json").write_text(
        error_file("FloatingPointError: task 1's own"))
    one = capture("100_1", execution(), out1)
    zero = capture("100_0", execution(), out0)
    assert one is not None and one.message == "FloatingPointError: task 1's own"
    assert one.node == "n2" and one.source.value == "torchelastic-error-file"
    assert zero is not None and zero.message == "KeyError: task 0's own" and zero.node == "n1"


def _plant(kind: str, path: Path, other: Path) -> None:
    if kind == "huge":
        path.write_text('{"message": "' + "x" * (2 << 20) + '"}')
    elif kind == "truncated":
        path.write_text(error_file("FloatingPointError: cut")[:40])
    elif kind == "not-json":
        path.write_text("this is not json")
    elif kind == "symlink":
        path.symlink_to(other)
    elif kind == "another-job":
        os.link(other, path)
    elif kind == "older":
        path.write_text(error_file("OtherJobError: an earlier execution's"))
        old = (STARTED - timedelta(hours=1)).timestamp()
        os.utime(path, (old, old))


@pytest.mark.parametrize(("kind", "why"), [
    ("huge", "more than"), ("truncated", "not JSON"), ("not-json", "not JSON"),
    ("symlink", "symbolic link"), ("another-job", "another job's file"),
    ("older", "before this execution started"),
])
def test_a_bad_error_file_is_ignored_with_a_note_and_the_cause_kept(
        tmp_path: Path, kind: str, why: str) -> None:
    other = tmp_path / "elsewhere" / "other.error.json"
    other.parent.mkdir()
    other.write_text(error_file("OtherJobError: not ours"))
    out = setup_task(tmp_path, "200")
    _plant(kind, tmp_path / "tok.1.200.r0.node1.error.json", other)
    ex = execution()
    report = ObjectReport(ref="200", token="tok.1", state=State.FAILED, cause=ex.cause,
                          executions=(ex,), nodes=ex.nodes)  # type: ignore[arg-type]
    got = with_error(report, out)
    error = got.executions[-1].error
    assert error is not None, got
    assert error.source.value == "output-tail"
    assert error.message == "ValueError: the words of the output"
    assert error.note.startswith("the error file was ignored") and why in error.note, error
    assert "OtherJobError" not in msgspec.json.encode(got).decode()
    assert got.cause == report.cause and got.state is State.FAILED
    assert msgspec.structs.replace(got.executions[-1], error=None) == ex
