"""submitit 1.5.4's documentation examples (README, docs/examples.md, docs/checkpointing.md),
ported by changing their import line only (``import dispatch.submitit as submitit``), run as
their reader runs them: a real Python process (run_example.py) on dispatch's local backend
(real node processes, a real SQLite record). Where a doc leaves names to its reader (a
fragment), the test's prelude defines them; the example's own lines are unchanged.
docs/coming-from-submitit.md lists which run unchanged and why the others cannot."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.submitit.doc_examples import (
    EXAMPLES,
    FOR_LOOP_PRELUDE,
    JOB_ENV_PRELUDE,
    RUNNER,
    checked,
)

WAIT_S = 300  # an upper bound for a slow shared machine, never a timing assertion


def run(
    tmp: Path,
    example: str,
    prelude: str = "",
    check: str = "",
) -> subprocess.CompletedProcess[str]:
    work = tmp / "work"
    if not work.exists():
        shutil.copytree(EXAMPLES, work)
    env = {
        **os.environ,
        "DISPATCH_SUBMITIT_CLUSTER": "local",  # this machine has srun: pick local
        "DISPATCH_LOCAL_ROOT": str(tmp / "local"),
        "XDG_STATE_HOME": str(tmp / "state"),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    env.pop("DISPATCH_STORE", None)
    return subprocess.run(
        [sys.executable, str(RUNNER), example, prelude, check],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        check=False,
    )


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    yield tmp_path
    subprocess.run(["pkill", "-f", str(tmp_path / "local")], check=False)


def test_readme_add(tmp: Path) -> None:
    done = run(tmp, "readme_add.py", check="(job.job_id, job.state, output)")
    job_id, state, output = eval(checked(done))  # noqa: S307 - our own repr
    assert done.stdout.splitlines()[0] == job_id and state == "COMPLETED" and output == 12


def test_explained_add_with_percent_j_in_the_folder(tmp: Path) -> None:
    done = run(tmp, "explained_add.py", check="(str(job.paths.folder), job.job_id, output)")
    folder, job_id, output = eval(checked(done))  # noqa: S307
    assert output == 12
    # log_test/%j: the job's folder is log_test/<job id>, its files in it
    assert Path(folder) == tmp / "work" / "log_test" / job_id
    assert (Path(folder) / "call.pkl").is_file()
    assert not (tmp / "work" / "log_test" / "%j").exists()


def test_job_arrays_after_the_explained_example(tmp: Path) -> None:
    done = run(tmp, "explained_add.py+job_arrays.py", check="[j.result() for j in jobs]")
    assert checked(done) == "[11, 22, 33, 44]"


@pytest.mark.parametrize("example", ["for_loop.py", "batch.py"])
def test_submitting_in_a_loop_and_in_a_batch(tmp: Path, example: str) -> None:
    done = run(tmp, example, FOR_LOOP_PRELUDE, "[j.result() for j in jobs]")
    assert checked(done) == "[2, 4, 6]"


def test_concurrent_jobs(tmp: Path) -> None:
    done = run(tmp, "concurrent_jobs.py", check="(outputs, num_finished)")
    outputs, num_finished = eval(checked(done))  # noqa: S307
    assert outputs == [None] * 10 and 0 <= num_finished <= 10


def test_asyncio_with_top_level_await(tmp: Path) -> None:
    done = run(tmp, "asyncio_jobs.py", check="sorted(j.result() for j in jobs)")
    values = eval(checked(done))  # noqa: S307
    printed = [int(line) for line in done.stdout.splitlines()[:-1]]
    assert sorted(printed) == values and len(values) == 4


def test_errors_raise_failed_job_error_with_the_trace(tmp: Path) -> None:
    done = run(tmp, "errors.py")
    assert done.returncode == 3, done.stdout + done.stderr
    raised = done.stdout[done.stdout.index("RAISED: ") :]
    assert raised.startswith(
        "RAISED: dispatch.submitit.core.utils.FailedJobError: "
        "Job (task=0) failed during processing with trace:"
    )
    assert "ZeroDivisionError: division by zero" in raised and "ESCALATION" not in done.stderr
    assert "non-zero-exit" in raised  # dispatch's cause, beside submitit's words
    log = (tmp / "work" / "log_test" / "dispatch.log").read_text()
    assert "ESCALATION" in log  # the supervisor's escalation, in the folder's log


def test_command_function_and_its_arguments(tmp: Path) -> None:
    done = run(tmp, "command_function.py+command_arguments.py", check="'ran'")
    assert checked(done) == "'ran'"
    lines = done.stdout.splitlines()
    assert any(line.endswith("/python") for line in lines)
    assert any(line.endswith("/pip") for line in lines)


def test_command_function_in_a_job(tmp: Path) -> None:
    done = run(tmp, "command_environment.py", check="job.result()")
    assert checked(done).strip("'").endswith("/python")


def test_multi_tasks(tmp: Path) -> None:
    done = run(tmp, "multi_tasks.py", check="(job.results(), job.num_tasks)")
    assert checked(done) == "([12, 12, 12, 12, 12, 12], 6)"


def test_task_method(tmp: Path) -> None:
    done = run(tmp, "task_method.py", check="job.task(2).result()")
    assert checked(done) == "12"
    assert "[12, 12, 12, 12, 12, 12]" in done.stdout


def test_job_environment(tmp: Path) -> None:
    done = run(tmp, "job_environment.py", JOB_ENV_PRELUDE, "_check()")
    results, stdout = eval(checked(done))  # noqa: S307
    assert results == [sum(range(5)), sum(range(5, 10))]
    assert stdout == (
        "There are 2 in this job\nI'm the task #1 on the node 0\nI'm the task #1 in the job\n"
    )


CHECKPOINT_PRELUDE = """
import dispatch.submitit as submitit
from typing import Any
def _check():
    import os, time
    from pathlib import Path

    class Counter:
        def __init__(self, marker):
            self.marker = marker
            self.count = 0

        def __call__(self, total):
            started_at = self.count
            while self.count < total:
                self.count += 1
                if self.count == 3 and not Path(self.marker).exists():
                    Path(self.marker).write_text("at 3")
                    time.sleep(300)
            return started_at, self.count, os.environ["DISPATCH_SUBMISSION"]

        checkpoint = checkpoint  # the doc's method

    executor = submitit.AutoExecutor(folder="log_test")
    marker = os.path.abspath("at-3")
    job = executor.submit(Counter(marker), 10)
    deadline = time.monotonic() + 240
    while not os.path.exists(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    job._interrupt()
    return job.result(), job.state
"""


def test_checkpoint_method_resumes_after_interrupt(tmp: Path) -> None:
    done = run(tmp, "checkpoint_method.py", CHECKPOINT_PRELUDE, "_check()")
    # preempted at 3 (a real preemption), resumed from the checkpoint on submission 2
    assert checked(done) == "((3, 10, '2'), 'COMPLETED')"


def test_network_training_from_its_package(tmp: Path) -> None:
    done = run(tmp, "training.main", check="(job.result(), job.state)")
    assert checked(done) == "(None, 'COMPLETED')"
