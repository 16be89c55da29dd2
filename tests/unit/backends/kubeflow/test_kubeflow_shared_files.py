"""Issue 46: the pods' progress and torchelastic error files in the spec's
``kubeflow.shared_dir`` (shared_files.py), read from real files in a temporary directory
standing for the shared volume: each pod's own files by its name, the first failing worker's
error over the termination message, a file dispatch does not trust ignored with a note, the
latest checkpoint riding on the last execution; never the cause."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dispatch.backends.kubeflow.mapping import report_trainjob
from dispatch.backends.kubeflow.shared_files import (
    error_from_files,
    shared_dir_of,
    with_shared_files,
)
from dispatch.core.app_error import ErrorSource
from dispatch.core.model import CauseKind, State

STARTED = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=5)
ENDED = STARTED + timedelta(minutes=2)
TJ = "fail-0123456789"


def _stamp(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


def trainjob(shared: Path | None, *, failed: bool = True) -> dict[str, Any]:
    annotations = {"dispatch.io/gate": "open"}
    if shared is not None:
        annotations["dispatch.io/shared-dir"] = str(shared)
    conditions = [{"type": "Failed", "status": "True", "reason": "JobSetFailed",
                   "message": "jobset failed", "lastTransitionTime": _stamp(ENDED)}] \
        if failed else []
    return {"metadata": {"name": TJ, "namespace": "ns", "uid": "tj",
                         "labels": {"dispatch.io/token": "1.1"}, "annotations": annotations},
            "spec": {}, "status": {"conditions": conditions}}


def pod(index: int, *, code: int | None = 1, finished: datetime = ENDED,
        message: str = "") -> dict[str, Any]:
    state: dict[str, Any] = {"running": {"startedAt": _stamp(STARTED)}}
    if code is not None:
        state = {"terminated": {"reason": "Error", "exitCode": code, "message": message,
                                "startedAt": _stamp(STARTED), "finishedAt": _stamp(finished)}}
    return {"metadata": {"name": f"{TJ}-node-0-{index}-abcde", "namespace": "ns",
                         "uid": f"u{index}",
                         "labels": {"jobset.sigs.k8s.io/jobset-name": TJ,
                                    "batch.kubernetes.io/job-completion-index": str(index)}},
            "spec": {"nodeName": f"real-node-{index + 1}"},
            "status": {"phase": "Failed" if code else "Running", "startTime": _stamp(STARTED),
                       "containerStatuses": [{"name": "node", "state": state}]}}


def error_file(words: str, stamp: int, *, worker: bool = True) -> str:
    """torchelastic's agent's copy of a failed worker's file (errorCode added), or a
    launcher's own (no errorCode)."""
    body: dict[str, Any] = {"message": {"message": words, "extraInfo": {
        "py_callstack": f"Traceback (most recent call last):\n  File \"train.py\", line 7, in "
                        f"main\n    step()\n{words}\n", "timestamp": str(stamp)}}}
    if worker:
        body["message"]["errorCode"] = 1
    return json.dumps(body)


def _file(shared: Path, index: int, suffix: str) -> Path:
    return shared / f"dispatch-{TJ}-node-0-{index}-abcde{suffix}"


def read(shared: Path, pods: list[dict[str, Any]], now: datetime = ENDED,
         failed: bool = True) -> Any:
    tj = trainjob(shared, failed=failed)
    report = report_trainjob(tj, None, [], pods, [], now)
    return with_shared_files(report, tj, pods, now)


def test_the_first_failing_workers_error_file_is_the_applications_error(tmp_path: Path) -> None:
    stamp = int(STARTED.timestamp()) + 60
    # rank 1 raised; rank 0's worker failed after it (its peer gone), in the same second:
    # the later write loses though rank 0 sorts first
    _file(tmp_path, 1, ".error.json").write_text(error_file("ValueError: rank 1 raised", stamp))
    later = _file(tmp_path, 0, ".error.json")
    later.write_text(error_file("RuntimeError: Connection closed by peer", stamp))
    then = _file(tmp_path, 1, ".error.json").stat().st_mtime_ns
    os.utime(later, ns=(then + 10**6, then + 10**6))
    report = read(tmp_path, [pod(0, message="Connection closed"), pod(1, message="x")])
    assert report.state is State.FAILED and report.cause.kind is CauseKind.NON_ZERO_EXIT
    error = report.executions[-1].error
    assert error.source is ErrorSource.TORCHELASTIC_ERROR_FILE
    assert error.message == "ValueError: rank 1 raised"
    assert error.rank == 1 and error.node == "real-node-2" and error.exit_code == 1
    assert 'File "train.py", line 7' in error.traceback_tail


def test_an_earlier_timestamp_wins_and_a_launchers_file_only_without_a_workers(
        tmp_path: Path) -> None:
    stamp = int(STARTED.timestamp()) + 60
    _file(tmp_path, 0, ".error.json").write_text(error_file("KeyError: first", stamp))
    _file(tmp_path, 1, ".error.json").write_text(
        error_file("RendezvousClosedError: launcher's own", stamp - 30, worker=False))
    error = read(tmp_path, [pod(0), pod(1)]).executions[-1].error
    assert error.message == "KeyError: first" and error.rank == 0
    _file(tmp_path, 0, ".error.json").unlink()
    error = read(tmp_path, [pod(0), pod(1)]).executions[-1].error
    assert error.message == "RendezvousClosedError: launcher's own" and error.rank == 1


def test_without_an_error_file_the_termination_message_stays(tmp_path: Path) -> None:
    error = read(tmp_path, [pod(0, message="ValueError: from the message")]).executions[-1].error
    assert error.source is ErrorSource.TERMINATION_MESSAGE
    assert error.message == "ValueError: from the message"


def _plant(kind: str, path: Path, other: Path) -> None:
    if kind == "symlink":
        path.symlink_to(other)
    elif kind == "another-job":
        os.link(other, path)
    elif kind == "not-json":
        path.write_text("this is not json")
    elif kind == "old":
        path.write_text(error_file("ValueError: an older run's", 1))
        old = (STARTED - timedelta(hours=1)).timestamp()
        os.utime(path, (old, old))


@pytest.mark.parametrize("kind", ["symlink", "another-job", "not-json", "old"])
def test_an_error_file_not_plainly_the_pods_is_ignored_with_a_note(tmp_path: Path,
                                                                  kind: str) -> None:
    other = tmp_path / "elsewhere.json"
    other.write_text(error_file("ValueError: someone else's", int(STARTED.timestamp()) + 1))
    _plant(kind, _file(tmp_path, 0, ".error.json"), other)
    report = read(tmp_path, [pod(0, message="ValueError: from the message")])
    error = report.executions[-1].error
    assert report.cause.kind is CauseKind.NON_ZERO_EXIT
    if kind == "old":  # an older execution's file: not this run's, nothing to say
        assert error.source is ErrorSource.TERMINATION_MESSAGE
        return
    assert error.source is ErrorSource.TERMINATION_MESSAGE  # the message still speaks
    assert error.message == "ValueError: from the message"
    assert "the error file was ignored" in error.note, error.note


def test_an_error_file_is_read_only_for_an_end_that_is_the_applications(tmp_path: Path) -> None:
    _file(tmp_path, 0, ".error.json").write_text(
        error_file("SignalException: 15", int(STARTED.timestamp()) + 1))
    tj = trainjob(tmp_path, failed=False)
    running = report_trainjob(tj, None, [], [pod(0, code=None)], [], ENDED)
    assert error_from_files(running, tmp_path, [pod(0, code=None)]) == (None, "")


def test_the_latest_checkpoint_of_the_pods_progress_files_rides_on_the_execution(
        tmp_path: Path) -> None:
    at = STARTED.timestamp()
    _file(tmp_path, 0, ".progress.jsonl").write_text(
        json.dumps({"step": 10, "checkpoint": True, "time": at + 10}) + "\n"
        + json.dumps({"step": 15}) + "\n"
        + json.dumps({"step": 20, "checkpoint": True, "time": at + 20}) + "\n")
    _file(tmp_path, 1, ".progress.jsonl").write_text(
        json.dumps({"step": 10, "checkpoint": True, "time": at + 11}) + "\n")
    now = STARTED + timedelta(minutes=1)
    report = read(tmp_path, [pod(0, code=None), pod(1, code=None)], now=now, failed=False)
    assert report.state is State.RUNNING
    progress = report.executions[-1].progress
    assert progress is not None and progress.checkpoint is not None
    assert progress.checkpoint.step == 20
    assert progress.checkpoint.written == datetime.fromtimestamp(at + 20, UTC)


def test_a_progress_file_that_is_a_link_is_ignored_with_a_note(tmp_path: Path) -> None:
    other = tmp_path / "elsewhere.jsonl"
    other.write_text(json.dumps({"step": 99, "checkpoint": True}) + "\n")
    _file(tmp_path, 0, ".progress.jsonl").symlink_to(other)
    report = read(tmp_path, [pod(0, code=None)], failed=False)
    progress = report.executions[-1].progress
    assert progress is not None and progress.checkpoint is None
    assert "symbolic link" in progress.note


def test_a_trainjob_without_the_annotation_reads_no_file(tmp_path: Path) -> None:
    _file(tmp_path, 0, ".error.json").write_text(
        error_file("ValueError: unasked", int(STARTED.timestamp()) + 1))
    tj = trainjob(None)
    assert shared_dir_of(tj) is None
    report = report_trainjob(tj, None, [], [pod(0, message="m")], [], ENDED)
    assert with_shared_files(report, tj, [pod(0, message="m")], ENDED) == report


@pytest.mark.parametrize("value", ["", "relative/dir", "/a\x00b", 5])
def test_an_annotation_that_is_no_absolute_path_names_no_directory(value: Any) -> None:
    tj = trainjob(None)
    tj["metadata"]["annotations"]["dispatch.io/shared-dir"] = value
    assert shared_dir_of(tj) is None


def test_a_pod_name_that_is_no_file_name_reads_nothing(tmp_path: Path) -> None:
    (tmp_path / "dispatch-..error.json").write_text("{}")
    bad = pod(0)
    bad["metadata"]["name"] = "../x"
    assert error_from_files(read(tmp_path, [bad]), tmp_path, [bad]) == (None, "")
