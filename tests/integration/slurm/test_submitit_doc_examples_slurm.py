"""submitit 1.5.4's documentation examples on the real Slurm testbed (issue 37), the same
ported files as the local run (tests/integration/submitit/examples/, changed in their import
line only) run the same way (run_example.py: a real Python process, the example as its main
program), with ``srun`` on the PATH so ``AutoExecutor`` picks Slurm, as on a login node. They
ask for ``slurm_partition="dev"``, which the testbed has for them.

Not here, each for its reason (docs/coming-from-submitit.md): the multi-task examples ask for
3 tasks on each of 2 nodes and the testbed's nodes have 2 CPUs (``tasks_per_node`` on Slurm
is tested with 2 x 2 in test_submitit_slurm.py); ``_interrupt()`` is a preemption on demand,
which only the local scheduler can do; the training example asks for
``slurm_partition="your_partition"``."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.submitit.doc_examples import (
    EXAMPLES,
    FOR_LOOP_PRELUDE,
    JOB_ENV_PRELUDE,
    RUNNER,
    checked,
)

pytestmark = pytest.mark.slurm
WAIT_S = 600  # an upper bound for a slow shared machine, never a timing assertion


class Example:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.work = tmp / "work"
        subprocess.run(["cp", "-r", str(EXAMPLES), str(self.work)], check=True)
        out = tmp / "slurm-out"
        out.mkdir()
        out.chmod(0o777)
        self.env = {
            **os.environ,
            "DISPATCH_SLURM_OUTPUT_DIR": str(out),
            "XDG_STATE_HOME": str(tmp / "state"),
            "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        }
        for name in ("DISPATCH_STORE", "DISPATCH_SUBMITIT_CLUSTER"):
            self.env.pop(name, None)

    def run(
        self, example: str, prelude: str = "", check: str = ""
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(RUNNER), example, prelude, check],
            cwd=self.work, env=self.env, capture_output=True, text=True, timeout=WAIT_S,
            check=False,
        )

    def cancel_leftovers(self) -> None:
        """Cancel the Slurm jobs this example left (a failed test's), found by their working
        directory: the example's record is the subprocess's, gone with it."""
        listed = subprocess.run(["squeue", "-h", "-o", "%A %Z"], capture_output=True, text=True,
                                timeout=30, check=False)
        ids = [line.split()[0] for line in listed.stdout.splitlines()
               if len(line.split()) == 2 and line.split()[1].startswith(str(self.work))]
        if ids:
            subprocess.run(["scancel", *ids], capture_output=True, timeout=30, check=False)


@pytest.fixture
def example(slurm_version: str, tmp_path: Path) -> Iterator[Example]:
    ex = Example(tmp_path)
    yield ex
    ex.cancel_leftovers()


def sbatch_partition(job_id: str) -> str:
    """The job's partition as the controller keeps it (MinJobAge 300 s): sacct may not have the
    job yet when slurmdbd lags under load (seen in CI on 22.05: an empty answer)."""
    out = subprocess.run(["scontrol", "-o", "show", "job", job_id],
                         capture_output=True, text=True, timeout=30, check=True)
    found = re.search(r"(?:^|\s)Partition=(\S+)", out.stdout)
    return found.group(1) if found else ""


def test_readme_add_runs_on_slurm_in_the_dev_partition(example: Example) -> None:
    done = example.run("readme_add.py", check="(job.job_id, job.state, output)")
    job_id, state, output = eval(checked(done))  # noqa: S307 - our own repr
    # Slurm's id, printed by the example as submitit prints it
    assert done.stdout.splitlines()[0] == job_id and job_id.isdigit()
    assert state == "COMPLETED" and output == 12
    assert sbatch_partition(job_id) == "dev"


def test_explained_add_then_job_arrays(example: Example) -> None:
    done = example.run(
        "explained_add.py+job_arrays.py",
        check="(job.job_id, str(job.paths.folder), [j.job_id for j in jobs], "
              "[j.result() for j in jobs])",
    )
    job_id, folder, array_ids, values = eval(checked(done))  # noqa: S307
    assert Path(folder) == example.work / "log_test" / job_id  # log_test/%j: Slurm's id
    assert values == [11, 22, 33, 44]
    array = array_ids[0].split("_")[0]  # map_array: one Slurm array, its tasks <id>_<i>
    assert array_ids == [f"{array}_{i}" for i in range(4)]


@pytest.mark.parametrize("name", ["for_loop.py", "batch.py"])
def test_submitting_in_a_loop_and_in_a_batch(example: Example, name: str) -> None:
    done = example.run(
        name, FOR_LOOP_PRELUDE, "([j.result() for j in jobs], [j.job_id for j in jobs])"
    )
    values, ids = eval(checked(done))  # noqa: S307
    assert values == [2, 4, 6]
    if name == "batch.py":  # a batch of two or more calls is one Slurm array
        assert len({i.split("_")[0] for i in ids}) == 1 and all("_" in i for i in ids)
    else:
        assert len(set(ids)) == 3 and all(i.isdigit() for i in ids)


def test_concurrent_jobs(example: Example) -> None:
    done = example.run("concurrent_jobs.py", check="(outputs, num_finished)")
    outputs, num_finished = eval(checked(done))  # noqa: S307
    assert outputs == [None] * 10 and 0 <= num_finished <= 10


def test_asyncio_with_top_level_await(example: Example) -> None:
    done = example.run("asyncio_jobs.py", check="sorted(j.result() for j in jobs)")
    values = eval(checked(done))  # noqa: S307
    printed = [int(line) for line in done.stdout.splitlines()[:-1]]
    assert sorted(printed) == values and len(values) == 4


def test_errors_raise_failed_job_error_with_the_trace(example: Example) -> None:
    done = example.run("errors.py")
    assert done.returncode == 3, done.stdout + done.stderr
    raised = done.stdout[done.stdout.index("RAISED: "):]
    assert raised.startswith(
        "RAISED: dispatch.submitit.core.utils.FailedJobError: "
        "Job (task=0) failed during processing with trace:"
    )
    assert "ZeroDivisionError: division by zero" in raised and "non-zero-exit" in raised
    assert "ESCALATION" not in done.stderr
    assert "ESCALATION" in (example.work / "log_test" / "dispatch.log").read_text()


def test_command_function_in_a_job(example: Example) -> None:
    done = example.run("command_environment.py", check="job.result()")
    # the python the job ran is the submitter's (the same environment on the node)
    assert checked(done).strip("'").strip() == str(Path(sys.executable).parent / "python")


def test_job_environment_with_two_tasks_started_by_srun(example: Example) -> None:
    done = example.run("job_environment.py", JOB_ENV_PRELUDE, "_check()")
    results, stdout = eval(checked(done))  # noqa: S307
    assert results == [sum(range(5)), sum(range(5, 10))]
    assert "There are 2 in this job\n" in stdout and "I'm the task #1 in the job\n" in stdout
