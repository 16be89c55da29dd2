"""dispatch.submitit's pure parts: submitit's parameter names checked in its words and
mapped onto the dispatch Executor's (and, on Slurm, onto sbatch's arguments), requeueing as a
policy, dispatch's states in submitit's words, the job environment, and the helpers that run
in this process (DebugExecutor, FunctionSequence, CommandFunction, clean_env, as_completed,
the duck-typed checkpoint)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import pytest

import dispatch.submitit as submitit
from dispatch.backends.base import Submission
from dispatch.backends.slurm.script import render, sbatch_argv
from dispatch.core.model import Cause, CauseKind, Level, State, Status
from dispatch.errors import BadInput, DispatchError
from dispatch.fn.calls import Call
from dispatch.submitit.executors import which
from dispatch.submitit.folders import base_folder, calls_folder, expand, link
from dispatch.submitit.helpers import FailedSubprocessError, Resumable, resumable
from dispatch.submitit.job import state_word
from dispatch.submitit.parameters import (
    PREEMPTION_BUDGET,
    BadParameter,
    UnknownParameter,
    check_names,
    dispatch_parameters,
    for_cluster,
    recovery_policy,
)


def test_an_unknown_slurm_name_is_refused_in_submitits_words_with_a_did_you_mean() -> None:
    with pytest.raises(UnknownParameter) as caught:
        check_names({"slurm_partiton": "dev"})
    err = caught.value
    assert isinstance(err, NameError) and isinstance(err, BadInput)
    text = str(err)
    assert text.startswith(
        "Unknown argument 'partiton' for executor 'slurm' in parameter "
        "'slurm_partiton'. (did you mean 'partition'?) Valid arguments:"
    )
    assert "Known executors: slurm, local, debug" in text


def test_an_unprefixed_unknown_name_and_an_unknown_executor() -> None:
    with pytest.raises(
        UnknownParameter,
        match="Parameter 'timeoutmin' need to be prefixed by "
        r"an executor name\. \(did you mean 'timeout_min'\?\)",
    ):
        check_names({"timeoutmin": 4})
    with pytest.raises(
        UnknownParameter, match="Unknown executor 'slrum' in parameter 'slrum_partition'"
    ):
        check_names({"slrum_partition": "dev"})


def test_a_generic_name_of_the_wrong_type() -> None:
    with pytest.raises(
        BadParameter,
        match='Parameter "timeout_min" expected type int '
        r'\(but value: "soon"\)',
    ) as caught:
        check_names({"timeout_min": "soon"})
    assert isinstance(caught.value, AssertionError)
    check_names({"mem_gb": 2, "stderr_to_stdout": False, "slurm_time": 5})


def test_a_clusters_own_names_win_there_and_are_ignored_elsewhere() -> None:
    given = {"timeout_min": 4, "slurm_timeout_min": 9, "slurm_partition": "dev"}
    assert for_cluster(given, "slurm") == {"timeout_min": 9, "partition": "dev"}
    assert for_cluster(given, "local") == {"timeout_min": 4}


def test_slurm_names_become_the_executors() -> None:
    mine = {
        "partition": "dev",
        "time": 30,
        "mem": "32G",
        "ntasks_per_node": 1,
        "gpus_per_node": 2,
        "cpus_per_task": 4,
        "job_name": "train",
        "mem_per_gpu": "8G",
        "wckey": "x",
        "array_parallelism": 2,
        "additional_parameters": {"mail_type": "END"},
        "max_num_timeout": 5,
    }
    assert dispatch_parameters(mine, "slurm") == {
        "slurm_partition": "dev",
        "timeout_min": 30,
        "memory": "32G",
        "tasks_per_node": 1,
        "gpus_per_node": 2,
        "cpus_per_task": 4,
        "name": "train",
        "slurm_array_parallelism": 2,
        "slurm_additional_parameters": {"mail_type": "END", "mem_per_gpu": "8G", "wckey": "x"},
    }
    # a Slurm request means nothing to the local backend
    assert dispatch_parameters({"gpus_per_node": 1, "timeout_min": 3}, "local") == {
        "timeout_min": 3
    }


@pytest.mark.parametrize("name", ["setup", "teardown", "signal_delay_s", "comment"])
def test_slurm_names_dispatch_does_not_take_say_why(name: str) -> None:
    with pytest.raises(BadInput, match=f"slurm_{name}: not taken by dispatch.submitit: "):
        dispatch_parameters({name: ["x"]}, "slurm")


# Every parameter of submitit 1.5.4's SlurmExecutor (submitit/slurm/slurm.py,
# _make_sbatch_string's keywords but command, folder and map_count), a value, and the sbatch
# option it becomes here (None: taken, nothing on sbatch's line; a string starting "!": refused,
# with those words in the reason).
SUBMITIT_SLURM = {
    "job_name": ("train", "--job-name=train"),
    "partition": ("dev", "--partition=dev"),
    "time": (7, "--time=7"),
    "nodes": (2, "--nodes=2"),
    "ntasks_per_node": (2, "--ntasks-per-node=2"),
    "cpus_per_task": (3, "--cpus-per-task=3"),
    "cpus_per_gpu": (4, "--cpus-per-gpu=4"),
    "num_gpus": (2, "--gpus-per-node=2"),
    "gpus_per_node": (2, "--gpus-per-node=2"),
    "gpus_per_task": (1, "--gpus-per-task=1"),
    "qos": ("high", "--qos=high"),
    "setup": (["module load x"], "!shell lines"),
    "teardown": (["rm x"], "!shell lines"),
    "mem": ("16GB", "--mem=16384M"),
    "mem_per_gpu": ("8G", "--mem-per-gpu=8G"),
    "mem_per_cpu": ("1G", "--mem-per-cpu=1G"),
    "signal_delay_s": (90, "!SIGTERM"),
    "comment": ("hi", "!token"),
    "constraint": ("a100", "--constraint=a100"),
    "exclude": ("n1", "--exclude=n1"),
    "account": ("me", "--account=me"),
    "gres": ("gpu:1", "--gres=gpu:1"),
    "mail_type": ("END", "--mail-type=END"),
    "mail_user": ("a@b", "--mail-user=a@b"),
    "nodelist": ("n2", "--nodelist=n2"),
    "dependency": ("afterok:1", "--dependency=afterok:1"),
    "exclusive": (True, "--exclusive"),
    "array_parallelism": (4, None),
    "wckey": ("w", "--wckey=w"),
    "stderr_to_stdout": (False, None),
    "additional_parameters": ({"mail_type": "FAIL"}, "--mail-type=FAIL"),
    "srun_args": (["--cpu-bind=none"], None),
    "use_srun": (True, None),
}


@pytest.mark.parametrize("name", sorted(SUBMITIT_SLURM))
def test_every_submitit_slurm_parameter_reaches_sbatch_or_is_refused_saying_why(
    name: str, tmp_path: Path
) -> None:
    value, wanted = SUBMITIT_SLURM[name]
    ex = submitit.AutoExecutor(folder=tmp_path / "log", cluster="slurm")
    if wanted is not None and wanted.startswith("!"):
        with pytest.raises(
            BadInput, match=f"slurm_{name}: not taken by dispatch.submitit: .*{wanted[1:]}"
        ):
            ex.update_parameters(**{f"slurm_{name}": value})
        return
    ex.update_parameters(**{f"slurm_{name}": value})
    argv = _sbatch(ex, tmp_path)
    if wanted is not None:
        assert wanted in argv, argv


def test_the_other_values_of_submitit_slurm_parameters(tmp_path: Path) -> None:
    ex = submitit.AutoExecutor(folder=tmp_path / "log", cluster="slurm")
    ex.update_parameters(
        slurm_exclusive="user",
        slurm_mem=2048,
        slurm_use_srun=True,
        slurm_srun_args=["--cpu-bind=none"],
        slurm_ntasks_per_node=2,
    )
    assert "--exclusive=user" in _sbatch(ex, tmp_path) and "--mem=2048M" in _sbatch(ex, tmp_path)
    script, _ = render(
        Submission(
            job_id="j1",
            number=1,
            token="j1.1",
            spec=ex._executor._functions._spec(tmp_path / "c", "f"),
        ),
        out_dir=tmp_path,
    )
    assert "srun --kill-on-bad-exit=1 --nodes=1 --ntasks-per-node=2 --cpu-bind=none " in script
    with pytest.raises(BadInput, match="use_srun=False: .*always starts the tasks with srun"):
        ex.update_parameters(slurm_use_srun=False)
    with pytest.raises(BadInput, match="stderr_to_stdout=True: .*apart"):
        ex.update_parameters(slurm_stderr_to_stdout=True)
    with pytest.raises(BadInput, match="--ntasks-per-node is set by dispatch's srun line"):
        ex.update_parameters(slurm_srun_args=["--ntasks-per-node=3"])
    with pytest.raises(BadInput, match="a list of srun options"):
        ex.update_parameters(slurm_srun_args="--cpu-bind=none")


def test_requeueing_as_a_policy() -> None:
    assert recovery_policy(True, 3) == {
        "rules": [
            {"on": ["preempted"], "action": "resubmit", "budget": PREEMPTION_BUDGET},
            {"on": ["time-limit"], "action": "resubmit", "budget": 3},
        ]
    }
    # submitit requeues a preempted function from scratch, never a timed-out one
    assert recovery_policy(False, 3) == {
        "rules": [{"on": ["preempted"], "action": "resubmit", "budget": PREEMPTION_BUDGET}]
    }


def add(a: int, b: int) -> int:
    return a + b


def _sbatch(executor: Any, tmp: Path, array: str | None = None) -> list[str]:
    functions = executor._executor._functions
    spec = functions._spec(tmp / "call", functions._name(add), array=array)
    return sbatch_argv(
        Submission(job_id="j1", number=1, token="j1.1", spec=spec), script=tmp / "s.sh", out_dir=tmp
    )


def test_submitit_slurm_parameters_as_sbatch_arguments(tmp_path: Path) -> None:
    ex = submitit.AutoExecutor(
        folder=tmp_path / "log" / "%j", cluster="slurm", slurm_max_num_timeout=5
    )
    ex.update_parameters(
        timeout_min=4,
        slurm_partition="dev",
        nodes=2,
        gpus_per_node=8,
        cpus_per_task=10,
        mem_gb=32,
        slurm_qos="high",
        slurm_mem_per_gpu="8G",
        slurm_additional_parameters={"mail_type": "END"},
    )
    argv = _sbatch(ex, tmp_path)
    for option in (
        "--nodes=2",
        "--time=4",
        f"--mem={32 * 1024}M",
        "--partition=dev",
        "--qos=high",
        "--gpus-per-node=8",
        "--cpus-per-task=10",
        "--mail-type=END",
        "--mem-per-gpu=8G",
    ):
        assert option in argv, (option, argv)
    assert ex._executor.max_num_timeout == 5
    ex.update_parameters(slurm_array_parallelism=2)
    assert ex._executor._functions._array_parallelism == 2
    assert "--array=0-3%2" in _sbatch(ex, tmp_path, array="0-3%2")
    # a Slurm executor takes the same names unprefixed
    direct = submitit.SlurmExecutor(folder=tmp_path / "log")
    direct.update_parameters(partition="dev", time=7)
    argv = sbatch_argv(
        Submission(
            job_id="j1", number=1, token="j1.1", spec=direct._functions._spec(tmp_path / "c", "f")
        ),
        script=tmp_path / "s.sh",
        out_dir=tmp_path,
    )
    assert "--partition=dev" in argv and "--time=7" in argv


def test_the_folder_up_to_its_first_pattern(tmp_path: Path) -> None:
    assert base_folder("log_test/%j") == Path("log_test")
    assert base_folder(tmp_path / "a" / "%j" / "b") == tmp_path / "a"
    assert base_folder("%j") == Path(".")


def test_the_folder_with_the_job_id_put_in(tmp_path: Path) -> None:
    assert expand(Path("log/%j"), "1234") == Path("log/1234")
    assert expand(Path("log/%A/task_%a/%t"), "1234_5") == Path("log/1234/task_5/0")
    assert expand(Path("log/run_%j"), "1234_5") == Path("log/run_1234_5")
    with pytest.raises(BadInput, match="no task of a job array"):
        expand(Path("log/%a"), "1234")
    assert calls_folder(tmp_path / "log") == tmp_path / "log"
    assert calls_folder(tmp_path / "log" / "%j") == tmp_path / "log" / ".calls"


def test_the_job_folder_is_a_link_to_the_call_folder(tmp_path: Path) -> None:
    call = tmp_path / "log" / ".calls" / "add-1"
    call.mkdir(parents=True)
    (call / "call.pkl").write_bytes(b"x")
    made = link(tmp_path / "log" / "%j" / "files", "1234", call)
    assert made == tmp_path / "log" / "1234" / "files" and made.is_symlink()
    assert (made / "call.pkl").read_bytes() == b"x"
    assert not os.path.isabs(os.readlink(made))  # the folder can be moved whole
    assert link(tmp_path / "log" / "%j" / "files", "1234", call) == made  # again: kept
    assert link(tmp_path / "plain", "1234", call) == call


def test_which_cluster(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DISPATCH_SUBMITIT_CLUSTER", "debug")
    assert which() == "debug"
    monkeypatch.delenv("DISPATCH_SUBMITIT_CLUSTER")
    monkeypatch.setenv("PATH", str(tmp_path))  # no srun here
    assert which() == "local"
    with pytest.raises(BadInput, match="AutoExecutor doesn't know any executor named pbs"):
        submitit.AutoExecutor(tmp_path, cluster="pbs")
    with pytest.raises(BadInput, match="must be prefixed by executor named"):
        submitit.AutoExecutor(tmp_path, cluster="local", max_num_timeout=3)


def _status(state: State, kind: CauseKind | None = None) -> Status:
    return Status(
        job="j",
        name="n",
        state=state,
        level=Level.FULL,
        cause=None if kind is None else Cause(kind=kind),
    )


@pytest.mark.parametrize(
    ("state", "kind", "word"),
    [
        (State.PENDING, None, "PENDING"),
        (State.HELD, CauseKind.HELD, "PENDING"),
        (State.RUNNING, None, "RUNNING"),
        (State.RECOVERING, CauseKind.PREEMPTED, "REQUEUED"),
        (State.SUCCEEDED, CauseKind.NONE, "COMPLETED"),
        (State.CANCELLED, None, "CANCELLED"),
        (State.FAILED, CauseKind.NON_ZERO_EXIT, "FAILED"),
        (State.FAILED, None, "FAILED"),
        (State.FAILED, CauseKind.TIME_LIMIT, "TIMEOUT"),
        (State.FAILED, CauseKind.OUT_OF_MEMORY, "OUT_OF_MEMORY"),
        (State.FAILED, CauseKind.NODE_LOST, "NODE_FAIL"),
        (State.FAILED, CauseKind.PREEMPTED, "PREEMPTED"),
        (State.UNKNOWN, None, "UNKNOWN"),
    ],
)
def test_states_in_submitits_words(state: State, kind: CauseKind | None, word: str) -> None:
    assert state_word(_status(state, kind)) == word


def test_the_job_environment_of_a_task() -> None:
    env = submitit.JobEnvironment(
        {
            "RANK": "4",
            "WORLD_SIZE": "6",
            "LOCAL_RANK": "1",
            "LOCAL_WORLD_SIZE": "3",
            "DISPATCH_JOB_ID": "abc",
        }
    )
    assert (
        env.global_rank,
        env.local_rank,
        env.node,
        env.num_tasks,
        env.num_nodes,
        env.job_id,
    ) == (4, 1, 1, 6, 2, "abc")
    array = submitit.JobEnvironment({"DISPATCH_JOB_ID": "abc", "SLURM_ARRAY_TASK_ID": "3"})
    assert array.job_id == "abc_3"
    # On Slurm: Slurm's id, as job.job_id says it (the array's id and the task in an array)
    slurm = {"DISPATCH_JOB_ID": "abc", "SLURM_JOB_ID": "1234"}
    assert submitit.JobEnvironment(slurm).job_id == "1234"
    task = {
        **slurm,
        "SLURM_JOB_ID": "1236",
        "SLURM_ARRAY_JOB_ID": "1234",
        "SLURM_ARRAY_TASK_ID": "2",
    }
    assert submitit.JobEnvironment(task).job_id == "1234_2"
    outside = submitit.JobEnvironment({})
    assert not outside.activated()
    with pytest.raises(RuntimeError, match="not a dispatch job"):
        outside.global_rank  # noqa: B018


class Halves:
    """Duck-typed: a checkpoint method, no base class."""

    def __init__(self) -> None:
        self.done = 0

    def __call__(self, n: int) -> int:
        return n - self.done

    def checkpoint(self, n: int) -> submitit.helpers.DelayedSubmission:
        self.done = n // 2
        return submitit.helpers.DelayedSubmission(self, n)


def test_a_checkpoint_method_is_honoured_without_a_base_class() -> None:
    wrapped = resumable(Halves())
    assert isinstance(wrapped, Resumable) and resumable(wrapped) is wrapped
    assert resumable(len) is len  # nothing to ask: unwrapped
    resume = wrapped.__dispatch_checkpoint__(10)  # type: ignore[attr-defined]
    assert isinstance(resume, Call) and isinstance(resume.fn, Resumable)
    assert resume.args == (10,) and resume() == 5


def test_checkpointable_and_function_sequence() -> None:
    seq = submitit.helpers.FunctionSequence()
    seq.add(pow, 2, 3)
    seq.add(sum, [1, 2])
    assert len(seq) == 2 and seq() == [8, 3]
    delayed = seq.checkpoint()
    assert isinstance(delayed, submitit.helpers.DelayedSubmission) and delayed.function is seq
    assert isinstance(resumable(seq), Resumable)


def test_command_function(tmp_path: Path) -> None:
    echo = submitit.helpers.CommandFunction(
        [sys.executable, "-c", "import sys; print(sys.argv[1:])"], verbose=False, cwd=tmp_path
    )
    assert echo("a", key=2) == "['a', '--key=2']"
    with pytest.raises(TypeError, match="list"):
        submitit.helpers.CommandFunction("ls -l")  # type: ignore[arg-type]
    failing = submitit.helpers.CommandFunction(
        [sys.executable, "-c", "raise SystemExit(3)"], verbose=False
    )
    with pytest.raises(FailedSubprocessError, match="exit status 3"):
        failing()


def test_clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLURM_JOB_ID", "7")
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("KEEP_ME", "yes")
    with submitit.helpers.clean_env():
        assert "SLURM_JOB_ID" not in os.environ and "RANK" not in os.environ
        assert os.environ["KEEP_ME"] == "yes"
    assert os.environ["SLURM_JOB_ID"] == "7" and os.environ["RANK"] == "1"


def test_debug_executor_runs_in_this_process(tmp_path: Path) -> None:
    ex = submitit.AutoExecutor(folder=tmp_path, cluster="debug")
    ex.update_parameters(timeout_min=1, slurm_partition="dev")
    seen: list[int] = []
    job = ex.submit(lambda x: seen.append(os.getpid()) or x * 2, 21)  # type: ignore[func-returns-value]
    assert job.state == "QUEUED" and not job.done()
    assert job.result() == 42 and seen == [os.getpid()] and job.state == "DONE"
    bad = ex.submit(lambda: 1 / 0)
    assert isinstance(bad.exception(), ZeroDivisionError) and bad.state == "FAILED"
    jobs = ex.map_array(pow, [2, 3], [2, 2])
    assert [j.result() for j in jobs] == [4, 9]
    # every job is done: as_completed yields them all, the first pass
    assert list(submitit.helpers.as_completed(jobs, timeout=60)) == jobs
    cancelled = ex.submit(len, "x")
    cancelled.cancel()
    with pytest.raises(submitit.UncompletedJobError, match="was cancelled"):
        cancelled.result()


def test_errors_are_submitits_and_dispatchs() -> None:
    for cls in (submitit.FailedJobError, submitit.UncompletedJobError):
        assert issubclass(cls, RuntimeError) and issubclass(cls, DispatchError)
    assert submitit.core.utils.FailedJobError is submitit.FailedJobError
    assert submitit.helpers.DelayedSubmission is submitit.core.utils.DelayedSubmission
