"""The consumer: every sentence of seed 002's consumer contract, against real files."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from dispatch.segment_health.consumer import (
    CheckResult,
    DirectoryNotAbsolute,
    Outcome,
    check,
    classify,
    install,
    unit_from_environ,
)

SRC = str(Path(__file__).resolve().parents[3] / "src")
LOG = logging.getLogger("test.segment.consumer")
REGULAR = {"SLURM_PROCID": "0", "SLURM_JOB_ID": "123"}
ARRAY = {
    "SLURM_PROCID": "0",
    "SLURM_JOB_ID": "130",
    "SLURM_ARRAY_JOB_ID": "123",
    "SLURM_ARRAY_TASK_ID": "7",
}


def records(caplog, level=logging.DEBUG):
    return [r for r in caplog.records if r.levelno >= level and r.name == LOG.name]


def installed_line(directory, job, task):
    return f"Segment health check installed directory={directory} job_id={job} task_id={task}"


# -- installation -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "environ",
    [
        {"SLURM_PROCID": "1", "SLURM_JOB_ID": "123"},
        {"SLURM_PROCID": "3", **{k: v for k, v in ARRAY.items() if k != "SLURM_PROCID"}},
        {"SLURM_JOB_ID": "123"},  # not launched by srun at all
        {"SLURM_PROCID": "", "SLURM_JOB_ID": "123"},
        {"SLURM_PROCID": "00", "SLURM_JOB_ID": "123"},
    ],
)
def test_only_process_0_installs_and_others_do_nothing_at_all(
    tmp_path, caplog, monkeypatch, environ
):
    (tmp_path / "segment_health_check.123.123").write_text("excluded")
    (tmp_path / "segment_health_check.123.7").write_text("excluded")

    def no_metadata(*args, **kwargs):
        raise AssertionError("a launcher other than process 0 looked at the artifact")

    monkeypatch.setattr(os, "stat", no_metadata)
    monkeypatch.setattr(os, "lstat", no_metadata)
    with caplog.at_level(logging.DEBUG):
        assert install(tmp_path, environ, LOG) is None
        result = check(tmp_path, environ, LOG)
    assert result.outcome is Outcome.NOT_INSTALLED and not result.excluded
    assert "not process 0" in result.reason
    assert records(caplog) == []  # no log at all


def test_process_0_logs_the_installation_once(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        segment_check = install(tmp_path, ARRAY, LOG)
        assert segment_check is not None
        for _ in range(3):  # one rendezvous round each
            assert segment_check.run(LOG).outcome is Outcome.PROCEED
    messages = [r.getMessage() for r in records(caplog)]
    assert messages == [installed_line(tmp_path, "123", "7")]
    assert records(caplog)[0].levelno == logging.INFO


@pytest.mark.parametrize(
    ("environ", "unit"),
    [
        (ARRAY, ("123", "7")),  # an array task: array job id and array task id
        (REGULAR, ("123", "123")),  # a regular job: its job id for both
        ({"SLURM_JOB_ID": "5", "SLURM_ARRAY_JOB_ID": "", "SLURM_ARRAY_TASK_ID": ""}, ("5", "5")),
        ({}, None),
        ({"SLURM_ARRAY_TASK_ID": "7"}, None),
    ],
)
def test_unit_from_environ(environ, unit):
    assert unit_from_environ(environ) == unit


def test_the_artifact_path_for_an_array_and_a_regular_job(tmp_path):
    array = install(tmp_path, ARRAY, LOG)
    regular = install(tmp_path, REGULAR, LOG)
    assert array is not None and regular is not None
    assert array.path == tmp_path / "segment_health_check.123.7"
    assert regular.path == tmp_path / "segment_health_check.123.123"


def test_process_0_without_a_job_identity_warns_and_installs_nothing(tmp_path, caplog):
    with caplog.at_level(logging.INFO):
        result = check(tmp_path, {"SLURM_PROCID": "0"}, LOG)
    assert result.outcome is Outcome.NOT_INSTALLED
    [warning] = records(caplog)
    assert warning.levelno == logging.WARNING and "SLURM_JOB_ID" in warning.getMessage()


def test_a_job_id_that_is_not_a_slurm_id_is_not_followed(tmp_path, caplog):
    (tmp_path.parent / "segment_health_check.x.x").touch()
    with caplog.at_level(logging.INFO):
        result = check(tmp_path, {"SLURM_PROCID": "0", "SLURM_JOB_ID": "../x"}, LOG)
    assert result.outcome is Outcome.NOT_INSTALLED
    assert [r.levelno for r in records(caplog)] == [logging.WARNING]


@pytest.mark.parametrize("directory", [None, ""])
def test_omitting_the_directory_disables_consumption(directory, caplog):
    with caplog.at_level(logging.DEBUG):
        result = check(directory, REGULAR, LOG)
    assert (
        result.outcome is Outcome.NOT_INSTALLED and "no segment health directory" in result.reason
    )
    assert records(caplog) == []


def test_a_relative_directory_is_a_configuration_error(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DirectoryNotAbsolute):
        check("dec", REGULAR, LOG)


# -- the one metadata check ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "size", "outcome"),
    [
        (stat.S_IFREG | 0o644, 1, Outcome.EXCLUDED),
        (stat.S_IFREG | 0o000, 10_000, Outcome.EXCLUDED),  # mode bits do not matter
        (stat.S_IFREG | 0o644, 0, Outcome.PROCEED),
        (stat.S_IFDIR | 0o755, 4096, Outcome.FAIL_OPEN),
        (stat.S_IFIFO | 0o644, 0, Outcome.FAIL_OPEN),
        (stat.S_IFSOCK | 0o755, 0, Outcome.FAIL_OPEN),
        (stat.S_IFCHR | 0o666, 0, Outcome.FAIL_OPEN),
        (stat.S_IFBLK | 0o660, 0, Outcome.FAIL_OPEN),
        (stat.S_IFLNK | 0o777, 9, Outcome.FAIL_OPEN),
    ],
)
def test_classify(mode, size, outcome):
    assert classify(mode, size)[0] is outcome


def run_check(directory, caplog, environ=REGULAR) -> tuple[CheckResult, list[logging.LogRecord]]:
    with caplog.at_level(logging.INFO):
        result = check(directory, environ, LOG)
    return result, [r for r in records(caplog) if r.levelno >= logging.WARNING]


def artifact(directory: Path) -> Path:
    return directory / "segment_health_check.123.123"


def test_a_non_empty_regular_file_excludes_the_unit(tmp_path, caplog):
    artifact(tmp_path).write_bytes(b"\x00\xff not json at all")  # content is not parsed
    result, warnings = run_check(tmp_path, caplog)
    assert result.outcome is Outcome.EXCLUDED and result.excluded
    assert result.path == artifact(tmp_path)
    assert "job_id=123 task_id=123 is excluded" in result.reason
    assert str(artifact(tmp_path)) in result.reason
    assert warnings == []


def test_a_missing_file_proceeds_quietly(tmp_path, caplog):
    result, warnings = run_check(tmp_path, caplog)
    assert result.outcome is Outcome.PROCEED and warnings == []


def test_a_missing_directory_proceeds_quietly(tmp_path, caplog):
    result, warnings = run_check(tmp_path / "not-yet-created", caplog)
    assert result.outcome is Outcome.PROCEED and warnings == []


def test_a_zero_byte_file_proceeds_quietly(tmp_path, caplog):
    artifact(tmp_path).touch()
    result, warnings = run_check(tmp_path, caplog)
    assert result.outcome is Outcome.PROCEED and warnings == []


def make_directory(path: Path) -> None:
    path.mkdir()
    (path / "inside").write_text("x")  # a non-empty directory is still not a decision


def make_fifo(path: Path) -> None:
    os.mkfifo(path)  # opening it for reading would block: proof the content is never read


def make_dangling_symlink(path: Path) -> None:
    path.symlink_to(path.parent / "nowhere")


def make_symlink_to_directory(path: Path) -> None:
    (path.parent / "target-dir").mkdir()
    path.symlink_to(path.parent / "target-dir")


def make_symlink_to_device(path: Path) -> None:
    path.symlink_to("/dev/null")


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (make_directory, "directory"),
        (make_fifo, "FIFO"),
        (make_symlink_to_directory, "directory"),
        (make_symlink_to_device, "character device"),
    ],
)
@pytest.mark.timeout(60)
def test_unexpected_file_types_warn_and_fail_open(tmp_path, caplog, make, words):
    make(artifact(tmp_path))
    result, warnings = run_check(tmp_path, caplog)
    assert result.outcome is Outcome.FAIL_OPEN and not result.excluded
    [warning] = warnings
    assert words in warning.getMessage() and str(artifact(tmp_path)) in warning.getMessage()


def test_a_socket_warns_and_fails_open(caplog):
    # AF_UNIX paths are limited to ~108 bytes: tmp_path can be longer.
    with tempfile.TemporaryDirectory() as short:
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            server.bind(str(artifact(Path(short))))
            result, warnings = run_check(Path(short), caplog)
        finally:
            server.close()
    assert result.outcome is Outcome.FAIL_OPEN
    [warning] = warnings
    assert "socket" in warning.getMessage()


def test_a_symlink_follows_to_the_file_it_names(tmp_path, caplog):
    # Documented choice: os.stat follows links, as ft_launcher's Path.stat() does.
    (tmp_path / "real-decision").write_text('{"why": "x"}')
    (tmp_path / "empty").touch()
    artifact(tmp_path).symlink_to(tmp_path / "real-decision")
    result, warnings = run_check(tmp_path, caplog)
    assert result.outcome is Outcome.EXCLUDED and warnings == []
    artifact(tmp_path).unlink()
    artifact(tmp_path).symlink_to(tmp_path / "empty")
    caplog.clear()
    result, warnings = run_check(tmp_path, caplog)
    assert result.outcome is Outcome.PROCEED and warnings == []


def test_a_dangling_symlink_is_a_missing_file_and_proceeds_quietly(tmp_path, caplog):
    # One stat (issue 12 item 9) cannot tell a dangling link from a missing file, and
    # NVRx's Path.stat() raises the same FileNotFoundError for both: proceed quietly.
    make_dangling_symlink(artifact(tmp_path))
    result, warnings = run_check(tmp_path, caplog)
    assert result.outcome is Outcome.PROCEED and warnings == []
    assert "no decision file" in result.reason


def test_a_path_through_a_regular_file_warns_and_fails_open(tmp_path, caplog):
    (tmp_path / "not-a-dir").write_text("x")
    result, warnings = run_check(tmp_path / "not-a-dir", caplog)
    assert result.outcome is Outcome.FAIL_OPEN
    [warning] = warnings
    assert "NotADirectoryError" in warning.getMessage()


def test_stat_errors_warn_and_fail_open(tmp_path, caplog, monkeypatch):
    artifact(tmp_path).write_text("excluded")

    def broken_storage(*args, **kwargs):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "stat", broken_storage)
    result, warnings = run_check(tmp_path, caplog)
    assert result.outcome is Outcome.FAIL_OPEN
    [warning] = warnings
    assert "Input/output error" in warning.getMessage()


def test_permission_denied_on_the_directory_warns_and_fails_open():
    """Run as user nobody: root would bypass the mode bits."""
    base = Path(tempfile.mkdtemp())
    try:
        base.chmod(0o755)
        directory = base / "decisions"
        directory.mkdir(mode=0o700)  # root only: nobody cannot search it
        artifact(directory).write_text("excluded")
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: drop to nobody, check, report through the pipe
            try:
                os.close(read_end)
                os.setgroups([])
                os.setgid(65534)
                os.setuid(65534)
                captured: list[str] = []

                class Keep(logging.Handler):
                    def emit(self, record):
                        captured.append(f"{record.levelname} {record.getMessage()}")

                log = logging.getLogger("test.segment.nobody")
                log.addHandler(Keep())
                log.setLevel(logging.INFO)
                log.propagate = False
                result = check(directory, REGULAR, log)
                report = {"uid": os.getuid(), "outcome": result.outcome.value, "logs": captured}
                os.write(write_end, json.dumps(report).encode())
            finally:
                os._exit(0)
        os.close(write_end)
        with os.fdopen(read_end, "rb") as stream:
            report = json.loads(stream.read())
        os.waitpid(pid, 0)
    finally:
        subprocess.run(["rm", "-rf", str(base)], check=True)
    assert report["uid"] == 65534
    assert report["outcome"] == "fail-open"
    assert report["logs"][0].startswith("INFO Segment health check installed")
    assert len(report["logs"]) == 2
    assert report["logs"][1].startswith("WARNING") and "Permission denied" in report["logs"][1]


# -- never reading the content ------------------------------------------------------------

AUDIT_SCRIPT = r"""
import json, logging, sys
sys.path.insert(0, sys.argv[2])
from dispatch.segment_health.consumer import check
directory = sys.argv[1]
opened = []
def hook(event, args):
    if event == "open" and "segment_health_check" in str(args[0]):
        opened.append(str(args[0]))
sys.addaudithook(hook)
result = check(directory, {"SLURM_PROCID": "0", "SLURM_JOB_ID": "123"}, logging.getLogger("x"))
during = list(opened)
open(directory + "/segment_health_check.123.123", "rb").close()  # the hook does see opens
print(json.dumps({"outcome": result.outcome.value, "during": during, "control": opened}))
"""


def test_the_check_never_opens_the_artifact(tmp_path):
    """An audit hook sees every open() of the process (builtins, io, os): none during check."""
    artifact(tmp_path).write_text('{"why": "drained"}')
    done = subprocess.run(
        [sys.executable, "-c", AUDIT_SCRIPT, str(tmp_path), SRC],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    report = json.loads(done.stdout)
    assert report["outcome"] == "excluded"
    assert report["during"] == []
    assert report["control"] == [str(artifact(tmp_path))]  # the hook is not blind


def test_the_check_never_reads_through_any_open(tmp_path, monkeypatch):
    artifact(tmp_path).write_text("excluded")

    def forbidden(*args, **kwargs):
        raise AssertionError("the consumer opened a file")

    import builtins
    import io

    monkeypatch.setattr(builtins, "open", forbidden)
    monkeypatch.setattr(io, "open", forbidden)
    monkeypatch.setattr(os, "open", forbidden)
    monkeypatch.setattr(Path, "open", forbidden)
    assert check(tmp_path, REGULAR, LOG).outcome is Outcome.EXCLUDED


# -- exactly one metadata call (issue 12 item 9) -------------------------------------------


def make_missing(path: Path) -> None:
    pass


def make_zero_byte(path: Path) -> None:
    path.touch()


def make_decision_file(path: Path) -> None:
    path.write_text('{"why": "drained"}')


def make_link_to_decision(path: Path) -> None:
    (path.parent / "real").write_text("x")
    path.symlink_to(path.parent / "real")


ONE_CALL_CASES = [
    (make_missing, Outcome.PROCEED),
    (make_zero_byte, Outcome.PROCEED),
    (make_decision_file, Outcome.EXCLUDED),
    (make_dangling_symlink, Outcome.PROCEED),
    (make_link_to_decision, Outcome.EXCLUDED),
    (make_directory, Outcome.FAIL_OPEN),
    (make_symlink_to_device, Outcome.FAIL_OPEN),
]


@pytest.mark.parametrize(("make", "outcome"), ONE_CALL_CASES)
def test_the_check_makes_exactly_one_metadata_call(tmp_path, monkeypatch, make, outcome):
    make(artifact(tmp_path))
    check_ = install(tmp_path, REGULAR, LOG)
    assert check_ is not None
    calls: list[tuple[str, object]] = []
    real_stat, real_lstat = os.stat, os.lstat

    def counting_stat(path, *args, **kwargs):
        calls.append(("stat", path))
        return real_stat(path, *args, **kwargs)

    def counting_lstat(path, *args, **kwargs):
        calls.append(("lstat", path))
        return real_lstat(path, *args, **kwargs)

    monkeypatch.setattr(os, "stat", counting_stat)
    monkeypatch.setattr(os, "lstat", counting_lstat)
    assert check_.run(LOG).outcome is outcome
    assert calls == [("stat", artifact(tmp_path))]


STRACE_SCRIPT = """
import logging, sys
sys.path.insert(0, sys.argv[2])
from dispatch.segment_health.consumer import install
check = install(sys.argv[1], {"SLURM_PROCID": "0", "SLURM_JOB_ID": "123"}, logging.getLogger("x"))
print(check.run(logging.getLogger("x")).outcome.value)
"""


@pytest.mark.parametrize(("make", "outcome"), ONE_CALL_CASES)
@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_the_kernel_sees_one_metadata_syscall(tmp_path, make, outcome):
    """The same, counted by strace: every syscall naming the artifact, whatever wraps it."""
    make(artifact(tmp_path))
    trace = tmp_path / "trace"
    done = subprocess.run(
        ["strace", "-f", "-qq", "-o", str(trace), sys.executable, "-c", STRACE_SCRIPT,
         str(tmp_path), SRC],
        capture_output=True, text=True, timeout=120, check=False,
    )
    if done.returncode != 0 and "ptrace" in done.stderr:
        pytest.skip(f"strace cannot trace here: {done.stderr.strip()}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == outcome.value
    name = f'"{artifact(tmp_path)}"'
    touching = [line for line in trace.read_text().splitlines() if name in line]
    assert len(touching) == 1, touching
    assert any(call in touching[0] for call in ("newfstatat(", "stat(", "statx(")), touching
