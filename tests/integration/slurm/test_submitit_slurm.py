"""``import dispatch.submitit as submitit`` on the real Slurm testbed (issue 37): submitit's
README call (job_id, state, result), a FailedJobError with the remote trace, map_array as one
job array whose tasks are ``<id>_<i>`` with ``slurm_array_parallelism`` as ``%N``, and
submitit's Slurm names (``slurm_time``, ``slurm_additional_parameters``) reaching sbatch.
Written without the testbed at hand: the lead runs it (scripts/slurm-testbed)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from operator import truediv
from pathlib import Path

import pytest
from slurm_helpers import slurm

import dispatch.submitit as submitit

pytestmark = pytest.mark.slurm


def add(a: int, b: int) -> int:
    return a + b


class Where:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.jobs: list[submitit.Job[object]] = []

    def keep(self, *jobs: submitit.Job[object]) -> None:
        self.jobs.extend(jobs)


@pytest.fixture
def where(slurm_version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Where]:
    out = tmp_path / "slurm-out"
    out.mkdir()
    out.chmod(0o777)
    monkeypatch.setenv("DISPATCH_SLURM_OUTPUT_DIR", str(out))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DISPATCH_STORE", raising=False)
    monkeypatch.delenv("DISPATCH_SUBMITIT_CLUSTER", raising=False)
    w = Where(tmp_path / "log_test" / "%j")
    yield w
    refs = {r for j in w.jobs for r in j.handle.job.record().objects}
    if refs:
        subprocess.run(["scancel", *refs], capture_output=True, timeout=30, check=False)


def test_the_readme_call_on_slurm(where: Where) -> None:
    executor = submitit.AutoExecutor(folder=where.folder)  # srun is on the PATH: Slurm
    assert executor.cluster == "slurm"
    executor.update_parameters(timeout_min=1)
    job = executor.submit(add, 5, 7)
    failing = executor.submit(truediv, 1, 0)
    where.keep(job, failing)
    # submitit's job_id: Slurm's job id (the number sbatch printed), at once after submit
    refs = job.handle.job.record().objects
    assert job.job_id == refs[-1] and job.job_id.isdigit() and job.job_id != job.handle.id
    assert job.result() == 12 and job.state == "COMPLETED"
    # log_test/%j: log_test/<Slurm's id>, with the job's files
    assert job.paths.folder == where.folder.parent / job.job_id
    assert job.paths.result_pickle.is_file() and job.paths.stdout.parent.is_dir()
    with pytest.raises(submitit.FailedJobError, match="ZeroDivisionError") as caught:
        failing.result()
    assert caught.value.cause is not None and caught.value.cause.kind == "non-zero-exit"
    assert failing.state == "FAILED"


def test_map_array_is_one_job_array_with_its_parallelism(where: Where) -> None:
    executor = submitit.AutoExecutor(folder=where.folder, cluster="slurm")
    executor.update_parameters(timeout_min=2, slurm_array_parallelism=2)
    jobs = executor.map_array(add, [1, 2, 3, 4], [10, 20, 30, 40])
    where.keep(*jobs)
    refs = jobs[0].handle.job.record().objects  # one sbatch: one Slurm array
    assert [j.job_id for j in jobs] == [f"{refs[-1]}_{i}" for i in range(4)]
    assert [j.result() for j in jobs] == [11, 22, 33, 44]
    assert [j.paths.folder.name for j in jobs] == [j.job_id for j in jobs]
    assert jobs[2].paths.result_pickle.is_file()
    shown = slurm("scontrol", "show", "job", refs[-1])
    assert "%2" in shown or "ArrayTaskThrottle=2" in shown


def job_id_inside() -> str:
    return submitit.JobEnvironment().job_id


def test_the_job_environment_says_the_job_id_job_id_says(where: Where) -> None:
    executor = submitit.AutoExecutor(folder=where.folder, cluster="slurm")
    executor.update_parameters(timeout_min=1)
    job = executor.submit(job_id_inside)
    jobs = executor.map_array(lambda _: job_id_inside(), [0, 1])
    where.keep(job, *jobs)
    assert job.result() == job.job_id
    assert [j.result() for j in jobs] == [j.job_id for j in jobs]
    assert jobs[1].job_id.endswith("_1")


def test_a_batch_is_one_job_array_with_its_parallelism(where: Where) -> None:
    executor = submitit.AutoExecutor(folder=where.folder, cluster="slurm")
    executor.update_parameters(timeout_min=2, slurm_array_parallelism=2)
    with executor.batch():  # calls of different functions and arguments, as submitit allows
        jobs = [
            executor.submit(add, 1, 2),
            executor.submit(pow, 2, 5),
            executor.submit(truediv, 1, 0),
        ]
    where.keep(*jobs)
    refs = jobs[0].handle.job.record().objects
    assert len(refs) == 1 and {j.handle.id for j in jobs} == {jobs[0].handle.id}
    assert [j.job_id for j in jobs] == [f"{refs[0]}_{i}" for i in range(3)]
    shown = slurm("scontrol", "show", "job", refs[0])
    assert "ArrayTaskThrottle=2" in shown
    assert jobs[0].result() == 3 and jobs[1].result() == 32
    with pytest.raises(submitit.FailedJobError, match="ZeroDivisionError"):
        jobs[2].result()
    assert jobs[1].paths.folder == where.folder.parent / jobs[1].job_id
    # one call in a batch is a job of its own, as submitit submits it
    with executor.batch():
        single = executor.submit(add, 2, 2)
    where.keep(single)
    assert single.job_id.isdigit() and single.result() == 4


def cpu_bind() -> str:
    return os.environ.get("SLURM_CPU_BIND", "")


def test_submitits_slurm_parameters_reach_sbatch_and_srun(where: Where) -> None:
    executor = submitit.AutoExecutor(folder=where.folder, cluster="slurm")
    executor.update_parameters(
        timeout_min=5,  # two tasks each start Python: a minute was not enough under CI's load
        slurm_job_name="train",
        slurm_exclusive="user",
        slurm_mem_per_cpu="500M",
        slurm_srun_args=["--cpu-bind=none"],
        slurm_ntasks_per_node=2,
        slurm_use_srun=True,
    )
    job = executor.submit(cpu_bind)
    where.keep(job)
    binds = job.results()
    assert len(binds) == 2 and all("none" in b for b in binds), binds
    shown = slurm("scontrol", "show", "job", job.job_id)
    for words in ("JobName=train", "MinMemoryCPU=500M", "NumTasks=2", "TimeLimit=00:05:00"):
        assert words in shown, (words, shown)
    # --exclusive=user: OverSubscribe=USER up to 24.11, Exclusive=USER (OverSubscribe=NO) on 26.05
    assert "OverSubscribe=USER" in shown or "Exclusive=USER" in shown, shown


class Resumable(submitit.helpers.Checkpointable):
    """Counts to 3; its first submission outlives the 1-minute limit at 2."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> tuple[int, str]:
        while self.count < 3:
            self.count += 1
            if self.count == 2 and os.environ["DISPATCH_SUBMISSION"] == "1":
                time.sleep(600)
        return self.count, submitit.JobEnvironment().job_id


def test_a_resubmitted_job_has_its_new_submissions_id_and_folder(where: Where) -> None:
    executor = submitit.AutoExecutor(folder=where.folder, cluster="slurm", slurm_max_num_timeout=1)
    executor.update_parameters(timeout_min=1)
    job = executor.submit(Resumable())
    where.keep(job)
    first = job.job_id
    first_folder = job.paths.folder
    count, inside = job.result()  # the time limit, the checkpoint, a new sbatch
    assert count == 3 and inside == job.job_id != first
    assert job.handle.job.record().objects[-1] == job.job_id
    assert job.paths.folder == where.folder.parent / job.job_id != first_folder
    assert job.paths.folder.resolve() == first_folder.resolve()  # one call folder


def test_slurm_names_reach_sbatch(where: Where) -> None:
    executor = submitit.AutoExecutor(folder=where.folder, cluster="slurm")
    executor.update_parameters(slurm_time=3, slurm_additional_parameters={"mail_type": "NONE"})
    job = executor.submit(add, 1, 1)
    where.keep(job)
    assert job.result() == 2
    refs = job.handle.job.record().objects
    shown = slurm("scontrol", "show", "job", refs[-1])
    assert "TimeLimit=00:03:00" in shown


def where_am_i(x: int) -> dict[str, object]:
    env = submitit.JobEnvironment()
    return {
        "x": x,
        "job_id": env.job_id,
        "global_rank": env.global_rank,
        "local_rank": env.local_rank,
        "node": env.node,
        "num_tasks": env.num_tasks,
        "num_nodes": env.num_nodes,
        "hostname": env.hostname,
        "slurm_node": os.environ["SLURMD_NODENAME"],
        "pid": os.getpid(),
    }


def test_tasks_per_node_is_one_process_per_task_with_its_environment(where: Where) -> None:
    executor = submitit.AutoExecutor(folder=where.folder, cluster="slurm")
    executor.update_parameters(timeout_min=2, nodes=2, tasks_per_node=2)
    job = executor.submit(where_am_i, 7)
    where.keep(job)
    values = job.results()  # every task's return value, rank 0 first
    assert [v["global_rank"] for v in values] == [0, 1, 2, 3]
    assert [v["local_rank"] for v in values] == [0, 1, 0, 1]
    assert [v["node"] for v in values] == [0, 0, 1, 1]
    assert {(v["num_tasks"], v["num_nodes"], v["x"]) for v in values} == {(4, 2, 7)}
    assert {v["job_id"] for v in values} == {job.job_id}
    assert len({v["pid"] for v in values}) == 4  # one process per task
    assert values[0]["slurm_node"] == values[1]["slurm_node"] != values[2]["slurm_node"]
    assert job.result() == values and job.task(3).result() == values[3]
    shown = slurm("scontrol", "show", "job", job.job_id)
    assert "NumTasks=4" in shown or "NumCPUs=4" in shown
