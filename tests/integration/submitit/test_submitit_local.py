"""dispatch.submitit in this process on the local backend (real node processes, a real
SQLite record): a cancel is an UncompletedJobError, as_completed over running jobs, a
batch's handles, paths and submission(), and escalations kept off the terminal."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import dispatch.submitit as submitit
from dispatch.errors import StateConflict
from dispatch.fn.calls import UnsafeFolder


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("DISPATCH_LOCAL_ROOT", str(tmp_path / "local"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setenv("DISPATCH_SUBMITIT_CLUSTER", "local")
    monkeypatch.delenv("DISPATCH_STORE", raising=False)
    yield tmp_path / "log_test" / "%j"
    subprocess.run(["pkill", "-f", str(tmp_path / "local")], check=False)


def test_a_cancelled_job_is_uncompleted(folder: Path) -> None:
    executor = submitit.AutoExecutor(folder=folder)
    job = executor.submit(time.sleep, 300)
    job.cancel()
    err = job.exception()
    assert isinstance(err, submitit.UncompletedJobError)
    assert "has not produced any output (state: CANCELLED)" in str(err)
    assert job.state == "CANCELLED" and job.done()
    job.cancel()  # a finished job stays as it is
    with pytest.raises(submitit.UncompletedJobError):
        job.result()


def test_as_completed_yields_every_job_once_done(folder: Path) -> None:
    executor = submitit.AutoExecutor(folder=folder)
    jobs = [executor.submit(pow, 2, k) for k in range(3)]
    seen = list(submitit.helpers.as_completed(jobs, timeout=300, poll_frequency=0.2))
    assert sorted(j.result() for j in seen) == [1, 2, 4]
    assert {j.job_id for j in seen} == {j.job_id for j in jobs}


def test_a_batchs_handles_paths_and_submission(folder: Path) -> None:
    executor = submitit.AutoExecutor(folder=folder)
    with executor.batch():
        job = executor.submit(divmod, 7, 2)
        assert "not submitted yet" in repr(job)
        with pytest.raises(StateConflict):
            executor.update_parameters(timeout_min=2)
    assert job.result() == (3, 1)
    # %j in the folder is the job id: log_test/<job_id>, with the job's files in it
    assert job.paths.folder == folder.parent / job.job_id and job.paths.folder.is_dir()
    assert job.paths.result_pickle.exists() and job.paths.submitted_pickle.exists()
    assert job.paths.stdout.parent == job.paths.folder
    assert not (folder.parent / "%j").exists()
    # %a fits only an array task: the job runs, its paths say why (submitit's ValueError)
    lone = submitit.AutoExecutor(folder=folder.parent / "%a").submit(divmod, 9, 2)
    assert lone.result() == (4, 1)
    with pytest.raises(ValueError, match="no task of a job array"):
        lone.paths  # noqa: B018
    delayed = job.submission()
    assert delayed.function is divmod and delayed.args == (7, 2)


def test_a_job_folder_another_user_put_in_place_is_refused_not_followed(folder: Path) -> None:
    # Issue 45, item 1: the %j link is dispatch's own; one put in its place (here: ours
    # pointing elsewhere; as root also another user's to the very call folder) is refused by
    # job.paths, naming it, and nothing is read or written through it.
    executor = submitit.AutoExecutor(folder=folder)
    job = executor.submit(divmod, 7, 2)
    assert job.result() == (3, 1)
    mine = job.paths.folder
    target = os.readlink(mine)
    elsewhere = folder.parent.parent / "elsewhere"
    elsewhere.mkdir()
    os.unlink(mine)
    os.symlink(elsewhere, mine)
    with pytest.raises(UnsafeFolder, match="is there already and is not the link") as caught:
        job.paths  # noqa: B018
    assert str(mine) in str(caught.value) and "remove it" in str(caught.value)
    assert os.listdir(elsewhere) == []
    if os.getuid() == 0:
        os.unlink(mine)
        os.symlink(target, mine)
        os.lchown(mine, 65534, 65534)
        with pytest.raises(UnsafeFolder, match="owner uid 65534"):
            job.paths  # noqa: B018
    os.unlink(mine)  # gone: made again, as ours
    assert job.paths.folder == mine and job.paths.result_pickle.exists()


def test_escalations_go_to_the_folders_log_not_the_terminal(
    folder: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    executor = submitit.AutoExecutor(folder=folder)
    job = executor.submit(int, "not a number")
    with pytest.raises(submitit.FailedJobError, match="ValueError: invalid literal") as caught:
        job.result()
    assert isinstance(caught.value.__cause__, ValueError)
    assert job.state == "FAILED"
    _, err = capfd.readouterr()
    assert "ESCALATION" not in err
    log = (folder.parent / "dispatch.log").read_text()
    assert f"ESCALATION job {job.job_id} (int)" in log


def test_torch_distributed_environment_from_a_task(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in {
        "RANK": "3",
        "WORLD_SIZE": "4",
        "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "2",
        "MASTER_ADDR": "node0",
        "MASTER_PORT": "29511",
    }.items():
        monkeypatch.setenv(key, value)
    env = submitit.helpers.TorchDistributedEnvironment().export()
    assert (
        env.rank,
        env.world_size,
        env.local_rank,
        env.local_world_size,
        env.master_addr,
        env.master_port,
    ) == (3, 4, 1, 2, "node0", 29511)
    assert os.environ["RANK"] == "3"


class SlowCounter(submitit.helpers.Checkpointable):
    """Counts to 5, one a second; its first submission outlives the 1-minute limit at 2."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> tuple[int, str]:
        while self.count < 5:
            self.count += 1
            if self.count == 2 and os.environ["DISPATCH_SUBMISSION"] == "1":
                time.sleep(600)  # the time limit (60 s) ends this submission
        return self.count, os.environ["DISPATCH_SUBMISSION"]


def test_a_time_limit_resubmits_a_checkpointable_from_its_checkpoint(folder: Path) -> None:
    executor = submitit.AutoExecutor(folder=folder, slurm_max_num_timeout=1)
    executor.update_parameters(timeout_min=1)
    job = executor.submit(SlowCounter())
    # without a checkpoint method, a time limit ends the job, as submitit's does
    plain = executor.submit(time.sleep, 600)
    assert job.result() == (5, "2")
    kinds = [
        t.cause.kind
        for t in job.handle.job.record().history
        if t.cause is not None and t.state.value == "recovering"
    ]
    assert kinds == ["time-limit"]
    assert isinstance(plain.exception(), submitit.UncompletedJobError)
    assert plain.state == "TIMEOUT"
