"""The batch script and sbatch argv for a submission. No Slurm needed: the script is run with
a stand-in ``srun`` that records the argv it got, so quoting is checked by bash itself."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.backends.base import Submission
from dispatch.backends.slurm.script import (
    ARRAY_TASK_ERROR_FILE,
    NODE_ERROR_FILE,
    dry_run,
    memory_option,
    render,
    time_option,
    wants_requeue,
)
from dispatch.core.policy import Action, RecoveryPolicy, Rule
from dispatch.core.spec import JobSpec, SegmentHealthSpec, SpecError

HOSTILE = ["python", "-c", "print('hi'); import sys", "$(rm -rf /)", "a b", "`id`", "'\"",
           "; echo pwned", "--flag=$HOME", "*", "line\nbreak", "\\"]


def sub(gated: bool = False, **spec: object) -> Submission:
    base: dict[str, object] = {"name": "train", "command": ("python", "train.py"),
                               "backend": "slurm"}
    base.update(spec)
    return Submission(job_id="j1", number=2, token="j1.2", spec=JobSpec(**base),  # type: ignore[arg-type]
                      gated=gated)


def test_argv_carries_token_gate_requeue_and_limits(tmp_path: Path) -> None:
    s = sub(gated=True, nodes=2, time_limit=90, memory=512 * 1024 * 1024, workdir="/work/x",
            slurm={"partition": "high", "exclusive": True, "account": "ml",
                   "extra": ["--mail-type=END", "--no-kill"]})
    script, argv = render(s, out_dir=tmp_path)
    assert argv[0] == "sbatch" and "--parsable" in argv
    assert "--comment=j1.2" in argv
    assert "--hold" in argv and "--no-requeue" in argv
    assert "--nodes=2" in argv and "--ntasks-per-node=1" in argv
    assert "--time=2" in argv  # 90 s -> 2 minutes (never rounded down)
    assert "--mem=512M" in argv and "--chdir=/work/x" in argv
    assert "--partition=high" in argv and "--exclusive" in argv and "--account=ml" in argv
    assert "--mail-type=END" in argv and "--no-kill" in argv
    assert f"--output={tmp_path}/j1.2.%j.out" in argv
    assert argv[-1] == str(tmp_path / "j1.2.sbatch")
    assert ("srun --kill-on-bad-exit=1 --nodes=2 --ntasks-per-node=1 /bin/sh -c "
            f"{shlex.quote(NODE_ERROR_FILE)} {tmp_path}/j1.2 python train.py") in script


def test_requeue_only_with_a_backend_requeue_rule(tmp_path: Path) -> None:
    plain = sub()
    assert not wants_requeue(plain)
    policy = RecoveryPolicy(rules=(Rule(on=("preempted",), action=Action.REQUEUE, budget=2),))  # type: ignore[arg-type]
    with_rule = sub(policy=policy)
    assert wants_requeue(with_rule)
    assert "--requeue" in render(with_rule, out_dir=tmp_path)[1]
    assert "--no-requeue" in render(plain, out_dir=tmp_path)[1]
    assert "--requeue" in render(plain, out_dir=tmp_path, requeue=True)[1]
    resubmit = sub(policy=RecoveryPolicy(rules=(
        Rule(on=("preempted",), action=Action.RESUBMIT, budget=2),)))  # type: ignore[arg-type]
    assert not wants_requeue(resubmit)


def test_no_hold_without_gate(tmp_path: Path) -> None:
    assert "--hold" not in render(sub(), out_dir=tmp_path)[1]


@pytest.mark.parametrize(("section", "where"), [
    ({"partitoin": "low"}, "slurm.partitoin"),
    ({"exclusive": "yes"}, "slurm.exclusive"),
    ({"extra": ["--comment=evil"]}, "slurm.extra[0]"),
    ({"extra": ["--hold"]}, "slurm.extra[0]"),
    ({"extra": ["--requeue"]}, "slurm.extra[0]"),
    ({"extra": ["-w n1"]}, "slurm.extra[0]"),
    ({"extra": "--mail-type=END"}, "slurm.extra"),
    ({"extra": ["--mail-type=END\n#SBATCH --hold"]}, "slurm.extra[0]"),
    ({"partition": "--hold"}, "slurm.partition"),
    ({"cpus_per_task": 0}, "slurm.cpus_per_task"),
    ({"output_dir": "relative/dir"}, "slurm.output_dir"),
])
def test_bad_slurm_section_is_refused_naming_the_key(section: dict[str, object],
                                                     where: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        render(sub(slurm=section), out_dir=tmp_path)
    assert err.value.where == where


def test_bad_env_name_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        render(sub(env={"A B": "x"}), out_dir=tmp_path)
    assert err.value.where == "env.A B"


def fake_srun(tmp_path: Path) -> dict[str, str]:
    """A stand-in srun that writes its argv and some env as JSON."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    srun = bindir / "srun"
    srun.write_text("#!/usr/bin/env python3\nimport json, os, sys\n"
                    "json.dump({'argv': sys.argv[1:], 'GREETING': os.environ.get('GREETING')},"
                    " open(os.environ['SRUN_OUT'], 'w'))\n")
    srun.chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    env["SRUN_OUT"] = str(tmp_path / "srun.json")
    return env


def run_script(script: str, tmp_path: Path) -> dict[str, object]:
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    subprocess.run(["bash", str(path)], env=fake_srun(tmp_path), check=True, timeout=30)
    return json.loads((tmp_path / "srun.json").read_text())  # type: ignore[no-any-return]


def test_hostile_argv_reaches_srun_word_for_word(tmp_path: Path) -> None:
    script, _ = render(sub(command=tuple(HOSTILE), env={"GREETING": "it's $(id) `x`"}),
                       out_dir=tmp_path)
    got = run_script(script, tmp_path)
    assert got["argv"] == ["--kill-on-bad-exit=1", "--nodes=1", "--ntasks-per-node=1",
                           "/bin/sh", "-c", NODE_ERROR_FILE, f"{tmp_path}/j1.2", *HOSTILE]
    assert got["GREETING"] == "it's $(id) `x`"
    assert "export DISPATCH_SUBMISSION=2" in script and "export DISPATCH_JOB_ID=j1" in script


@settings(max_examples=100, deadline=None)
@given(argv=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                    blacklist_characters="\x00"),
                             min_size=1, max_size=20), min_size=1, max_size=6))
def test_exec_line_quotes_any_argv(argv: list[str]) -> None:
    script, _ = dry_run(sub(command=tuple(argv)))
    exec_line = script[script.index("\nexec srun") + 1:]  # an argv word may hold newlines
    # Everything after the srun options and the error-file wrapper is the user's argv, word
    # for word.
    assert shlex.split(exec_line)[5:9] == ["/bin/sh", "-c", NODE_ERROR_FILE,
                                           shlex.split(exec_line)[8]]
    assert shlex.split(exec_line)[9:] == argv


def test_ft_launcher_gets_the_segment_health_dir(tmp_path: Path) -> None:
    s = sub(command=("ft_launcher", "train.py"),
            segment_health=SegmentHealthSpec(dir="/shared/sh", launcher="ft_launcher"))
    script, _ = render(s, out_dir=tmp_path)
    assert ("exec srun --kill-on-bad-exit=1 --ntasks-per-node=1 --nodes=1 /bin/sh -c "
            f"{shlex.quote(NODE_ERROR_FILE)} {tmp_path}/j1.2 ft_launcher "
            "--ft-segment-health-check-dir /shared/sh --nnodes=1 --nproc-per-node=1 train.py"
            ) in script
    assert "export DISPATCH_SEGMENT_HEALTH_DIR=/shared/sh" in script


def test_each_node_gets_its_own_error_file_and_the_argv_untouched(tmp_path: Path) -> None:
    """Issue 23: the wrapper srun runs on each node names TORCHELASTIC_ERROR_FILE from the
    job, the execution and the node, then execs the command with its words as they are."""
    words = ["python3", "-c", "import os, sys; print(os.environ['TORCHELASTIC_ERROR_FILE']);"
             " print(sys.argv[1:]); print(os.environ['DISPATCH_PROGRESS_FILE']);"
             " print('n' in os.environ)", *HOSTILE]
    done = subprocess.run(["/bin/sh", "-c", NODE_ERROR_FILE, f"{tmp_path}/j1.2", *words],
                          env={**os.environ, "SLURM_JOB_ID": "77", "SLURM_NODEID": "1",
                               "SLURM_RESTART_COUNT": "2"},
                          capture_output=True, text=True, check=True, timeout=30)
    path, argv, progress, leaked = done.stdout.splitlines()[:4]
    assert path == f"{tmp_path}/j1.2.77.r2.node1.error.json"
    assert argv == repr(HOSTILE)
    # Issue 25: the node's progress file, beside its error file (G3).
    assert progress == f"{tmp_path}/j1.2.77.r2.node1.progress.jsonl"
    assert leaked == "False"


def test_limits_round_up() -> None:
    assert time_option(1) == "1" and time_option(60) == "1" and time_option(61) == "2"
    assert memory_option(1) == "1M" and memory_option(1024 * 1024 + 1) == "2M"


def test_dry_run_submits_nothing_and_shows_the_script() -> None:
    script, argv = dry_run(sub())
    assert script.startswith("#!/bin/bash\n") and "token j1.2" in script
    assert argv[0] == "sbatch" and argv[-1].endswith("j1.2.sbatch")


# --------------------------------------------------------------------------- arrays


def array_sub(launcher: str = "torchrun", **spec: object) -> Submission:
    base: dict[str, object] = {
        "nodes": 2, "command": ("train.py", "--steps", "5"),
        "segment_health": SegmentHealthSpec(dir="/shared/sh", launcher=launcher),
        "slurm": {"array": "0-1", "rdzv_host": "127.0.0.1", "rdzv_port": 29610}}
    base.update(spec)
    return sub(**base)


def test_array_argv_has_array_no_requeue_and_one_output_per_task(tmp_path: Path) -> None:
    script, argv = render(array_sub(), out_dir=tmp_path)
    assert "--array=0-1" in argv and "--no-requeue" in argv and "--requeue" not in argv
    assert f"--output={tmp_path}/j1.2.%A_%a.out" in argv
    assert argv.count("--nodes=2") == 1 and argv.count("--ntasks-per-node=1") == 1
    assert argv[-1] == str(tmp_path / "j1.2.sbatch")


def test_plain_array_without_launcher(tmp_path: Path) -> None:
    script, argv = render(sub(slurm={"array": "0-3%2"}), out_dir=tmp_path)
    assert "--array=0-3%2" in argv and "--no-requeue" in argv
    assert ("exec srun --kill-on-bad-exit=1 --nodes=1 --ntasks-per-node=1 /bin/sh -c "
            f"{shlex.quote(ARRAY_TASK_ERROR_FILE)} {tmp_path}/j1.2 python train.py") in script


def test_each_array_task_gets_its_own_error_file(tmp_path: Path) -> None:
    """Issue 23: an array's tasks share one script; the wrapper names each task's file on the
    node from SLURM_ARRAY_JOB_ID and SLURM_ARRAY_TASK_ID, like its output file (%A_%a)."""
    words = ["python3", "-c", "import os, sys; print(os.environ['TORCHELASTIC_ERROR_FILE']);"
             " print(sys.argv[1:])", *HOSTILE]
    seen = []
    for task, raw_id in (("0", "90"), ("1", "91")):
        done = subprocess.run(
            ["/bin/sh", "-c", ARRAY_TASK_ERROR_FILE, f"{tmp_path}/j1.2", *words],
            env={**os.environ, "SLURM_JOB_ID": raw_id, "SLURM_ARRAY_JOB_ID": "90",
                 "SLURM_ARRAY_TASK_ID": task, "SLURM_NODEID": "1"},
            capture_output=True, text=True, check=True, timeout=30)
        path, argv = done.stdout.splitlines()[:2]
        assert argv == repr(HOSTILE)
        seen.append(path)
    assert seen == [f"{tmp_path}/j1.2.90_0.r0.node1.error.json",
                    f"{tmp_path}/j1.2.90_1.r0.node1.error.json"]


def test_array_with_a_requeue_rule_is_refused(tmp_path: Path) -> None:
    policy = RecoveryPolicy(rules=(Rule(on=("preempted",), action=Action.REQUEUE, budget=2),))  # type: ignore[arg-type]
    with pytest.raises(SpecError) as err:
        render(sub(policy=policy, slurm={"array": "0-1"}), out_dir=tmp_path)
    assert err.value.where == "slurm.array" and "--no-requeue" in err.value.message


@pytest.mark.parametrize("array", [
    "0-1", "7", "1,3,5", "0-7:2", "0-15%4", "0-3,8-9:1%2"])
def test_good_array_strings(array: str, tmp_path: Path) -> None:
    assert f"--array={array}" in render(sub(slurm={"array": array}), out_dir=tmp_path)[1]


@pytest.mark.parametrize("array", [
    1, ["0", "1"], "", "0-", "-1", "3-1", "0-1%0", "0-7:0", "0-1 ", "a-b", "0--1", "0-1,",
    "[0-1]", "0-1;id", "0-1\n#SBATCH --hold", "1:2", "0-4000001"])
def test_bad_array_strings_are_refused(array: object, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        render(sub(slurm={"array": array}), out_dir=tmp_path)
    assert err.value.where == "slurm.array"


@pytest.mark.parametrize(("section", "where"), [
    ({"rdzv_port": 0}, "slurm.rdzv_port"),
    ({"rdzv_port": "29500"}, "slurm.rdzv_port"),
    ({"rdzv_port": True}, "slurm.rdzv_port"),
    ({"rdzv_host": "a b"}, "slurm.rdzv_host"),
    ({"rdzv_host": "$(id)"}, "slurm.rdzv_host"),
    ({"nproc_per_node": 0}, "slurm.nproc_per_node"),
])
def test_bad_launch_keys_are_refused(section: dict[str, object], where: str,
                                     tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        render(array_sub(slurm={"array": "0-1", **section}), out_dir=tmp_path)
    assert err.value.where == where


def test_launch_keys_need_a_launcher(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        render(sub(slurm={"rdzv_port": 29500}), out_dir=tmp_path)
    assert err.value.where == "slurm.rdzv_port" and "launcher" in err.value.message


def test_torchrun_launch_shape_in_the_script(tmp_path: Path) -> None:
    script, _ = render(array_sub(), out_dir=tmp_path)
    assert "export DISPATCH_SEGMENT_DIR=/shared/sh" in script
    assert "export PET_RDZV_ENDPOINT=127.0.0.1:\"$((29610 + ${SLURM_ARRAY_TASK_ID:-0}))\"" \
        in script
    assert ("exec srun --kill-on-bad-exit=1 --ntasks-per-node=1 --nodes=2 /bin/sh -c "
            f"{shlex.quote(ARRAY_TASK_ERROR_FILE)} {tmp_path}/j1.2 torchrun "
            "--rdzv-backend=dispatch-segment-c10d --nnodes=2 --nproc-per-node=1 "
            "train.py --steps 5") in script


def fake_tools(tmp_path: Path) -> dict[str, str]:
    """Stand-ins: srun dumps its argv and the launch environment; scontrol prints hosts."""
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    (bindir / "srun").write_text(
        "#!/usr/bin/env python3\nimport json, os, sys\n"
        "keys = ('PET_RDZV_ENDPOINT', 'PET_RDZV_ID', 'DISPATCH_SEGMENT_DIR', 'PET_MAX_RESTARTS')\n"
        "json.dump({'argv': sys.argv[1:], 'env': {k: os.environ.get(k) for k in keys}},"
        " open(os.environ['SRUN_OUT'], 'w'))\n")
    (bindir / "scontrol").write_text("#!/bin/sh\nprintf 'gpu17\\ngpu18\\n'\n")
    for tool in ("srun", "scontrol"):
        (bindir / tool).chmod(0o755)
    env = dict(os.environ)
    env["PATH"] = f"{bindir}:{env['PATH']}"
    env["SRUN_OUT"] = str(tmp_path / "srun.json")
    env["SLURM_JOB_ID"] = "4243"
    env["SLURM_JOB_NODELIST"] = "gpu[17-18]"
    return env


def run_with(script: str, tmp_path: Path, **env: str) -> dict[str, object]:
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    subprocess.run(["bash", str(path)], env={**fake_tools(tmp_path), **env}, check=True,
                   timeout=30)
    return json.loads((tmp_path / "srun.json").read_text())  # type: ignore[no-any-return]


def test_array_task_gets_its_own_port_and_rendezvous(tmp_path: Path) -> None:
    script, _ = render(array_sub(env={"PET_MAX_RESTARTS": "1"}), out_dir=tmp_path)
    got = run_with(script, tmp_path, SLURM_ARRAY_TASK_ID="1")
    assert got["env"] == {"PET_RDZV_ENDPOINT": "127.0.0.1:29611", "PET_RDZV_ID": "4243",
                          "DISPATCH_SEGMENT_DIR": "/shared/sh", "PET_MAX_RESTARTS": "1"}
    assert got["argv"] == ["--kill-on-bad-exit=1", "--ntasks-per-node=1", "--nodes=2",
                           "/bin/sh", "-c", ARRAY_TASK_ERROR_FILE, f"{tmp_path}/j1.2",
                           "torchrun", "--rdzv-backend=dispatch-segment-c10d", "--nnodes=2",
                           "--nproc-per-node=1", "train.py", "--steps", "5"]


def test_default_rendezvous_host_is_the_first_node(tmp_path: Path) -> None:
    s = array_sub(slurm={"array": "0-1", "nproc_per_node": 4})
    script, _ = render(s, out_dir=tmp_path)
    got = run_with(script, tmp_path, SLURM_ARRAY_TASK_ID="1")
    # Distinct hosts per task: one port is enough.
    assert got["env"]["PET_RDZV_ENDPOINT"] == "gpu17:29500"  # type: ignore[index]
    assert "--nproc-per-node=4" in got["argv"]  # type: ignore[operator]


def test_command_may_name_its_launcher_and_options(tmp_path: Path) -> None:
    s = array_sub(command=("/opt/bin/torchrun", "--max-restarts=1", "train.py", "a b"))
    got = run_with(render(s, out_dir=tmp_path)[0], tmp_path, SLURM_ARRAY_TASK_ID="0")
    assert got["argv"][3:] == [  # type: ignore[index]
        "/bin/sh", "-c", ARRAY_TASK_ERROR_FILE, f"{tmp_path}/j1.2",
        "/opt/bin/torchrun", "--rdzv-backend=dispatch-segment-c10d", "--nnodes=2",
        "--nproc-per-node=1", "--max-restarts=1", "train.py", "a b"]


@pytest.mark.parametrize("word", ["--rdzv-backend=c10d", "--rdzv_backend=c10d", "--nnodes=4",
                                  "--rdzv-endpoint=h:1", "--standalone"])
def test_command_may_not_undo_the_launch_shape(word: str, tmp_path: Path) -> None:
    with pytest.raises(SpecError) as err:
        render(array_sub(command=("torchrun", word, "train.py")), out_dir=tmp_path)
    assert err.value.where == "command"


def test_ft_launcher_may_not_set_the_directory_itself(tmp_path: Path) -> None:
    s = sub(command=("ft_launcher", "--ft-segment-health-check-dir=/elsewhere", "train.py"),
            segment_health=SegmentHealthSpec(dir="/shared/sh", launcher="ft_launcher"))
    with pytest.raises(SpecError) as err:
        render(s, out_dir=tmp_path)
    assert err.value.where == "command"


def test_ft_launcher_array_with_gpus(tmp_path: Path) -> None:
    s = array_sub(launcher="ft_launcher", slurm={"array": "0-3", "gpus_per_node": 8})
    script, argv = render(s, out_dir=tmp_path)
    assert "--array=0-3" in argv and "--no-requeue" in argv and "--gpus-per-node=8" in argv
    got = run_with(script, tmp_path, SLURM_ARRAY_TASK_ID="3")
    assert got["argv"][3:] == [  # type: ignore[index]
        "/bin/sh", "-c", ARRAY_TASK_ERROR_FILE, f"{tmp_path}/j1.2",
        "ft_launcher", "--ft-segment-health-check-dir", "/shared/sh", "--nnodes=2",
        "--nproc-per-node=8", "train.py", "--steps", "5"]


@settings(max_examples=50, deadline=None)
@given(program=st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",),
                                                       blacklist_characters="\x00"),
                                min_size=1, max_size=12), min_size=1, max_size=4))
def test_launch_shape_quotes_any_program(program: list[str]) -> None:
    if Path(program[0]).name == "torchrun":  # that would name the launcher, not a program
        program = ["train.py", *program]
    script, _ = dry_run(array_sub(command=tuple(program)))
    exec_line = script[script.index("\nexec srun") + 1:]
    words = shlex.split(exec_line)
    assert words[5:8] == ["/bin/sh", "-c", ARRAY_TASK_ERROR_FILE]  # then the prefix
    assert words[13:] == program


# Issue 45 item 6: each of the script's validators takes whole values only. With
# ``re.match(r"^...$")`` a value ending in "\n" passed ("$" matches before a final newline)
# and ended its line of the batch script or of sbatch's argv early. Each case: (how the
# submission is made from a value, the value that is good, where the error is named).
def _with(key: str) -> Callable[[str], Submission]:
    return lambda value: sub(slurm={key: value})


NEWLINE_CASES: dict[str, tuple[Callable[[str], Submission], str, str]] = {
    **{key: (_with(key), "x1", f"slurm.{key}")
       for key in ("partition", "account", "qos", "reservation", "constraint", "nodelist",
                   "exclude")},
    "output_dir": (lambda v: sub(slurm={"output_dir": v}), "/shared/out", "slurm.output_dir"),
    "array": (lambda v: sub(slurm={"array": v}), "0-3", "slurm.array"),
    "extra value": (lambda v: sub(slurm={"extra": [v]}), "--mail-type=END", "slurm.extra[0]"),
    "extra flag": (lambda v: sub(slurm={"extra": [v]}), "--no-kill", "slurm.extra[0]"),
    "srun_args value": (lambda v: sub(slurm={"srun_args": [v]}), "--cpu-bind=none",
                        "slurm.srun_args[0]"),
    "srun_args flag": (lambda v: sub(slurm={"srun_args": [v]}), "--exclusive",
                       "slurm.srun_args[0]"),
    "rdzv_host": (lambda v: array_sub(slurm={"array": "0-1", "rdzv_host": v}), "node1",
                  "slurm.rdzv_host"),
    "name": (lambda v: sub(name=v), "train", "name"),
    "env name": (lambda v: sub(env={v: "1"}), "GREETING", "env.GREETING\n"),
    "exclude_nodes": (lambda v: Submission(job_id="j1", number=2, token="j1.2",
                                           spec=JobSpec(name="t", command=("true",),
                                                        backend="slurm"),
                                           exclude_nodes=(v,)), "node7", "exclude_nodes"),
}


@pytest.mark.parametrize("case", NEWLINE_CASES, ids=list(NEWLINE_CASES))
def test_a_value_ending_in_a_newline_is_refused(case: str, tmp_path: Path) -> None:
    make, good, where = NEWLINE_CASES[case]
    render(make(good), out_dir=tmp_path)  # the value itself is fine
    with pytest.raises(SpecError) as err:
        render(make(good + "\n"), out_dir=tmp_path)
    assert err.value.where == where


def test_an_array_in_other_digits_is_refused(tmp_path: Path) -> None:
    """\\d takes Arabic-Indic digits, which int() reads and Slurm does not."""
    with pytest.raises(SpecError) as err:
        render(sub(slurm={"array": "\u0660-\u0663"}), out_dir=tmp_path)
    assert err.value.where == "slurm.array"
