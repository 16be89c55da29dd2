"""The H3 launch shape (pure): one launcher per node, srun --kill-on-bad-exit=1, arrays
--no-requeue, the decision directory handed to the launcher."""

from __future__ import annotations

import shlex
import subprocess

import pytest

from dispatch.segment_health.artifact import DirectoryNotAbsolute
from dispatch.segment_health.launch import (
    Launcher,
    LaunchRequest,
    LaunchShape,
    LaunchShapeError,
    launch_shape,
    render_lines,
)

DIR = "/shared/job 1/segment-health"  # a space: literal words survive rendering
FIRST_NODE = 'DISPATCH_RDZV_HOST="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
RDZV_ID = 'export PET_RDZV_ID="${SLURM_JOB_ID}"'


def request(**overrides):
    fields = dict(
        launcher=Launcher.TORCHRUN,
        nodes=2,
        nproc_per_node=4,
        decision_dir=DIR,
        program=("train.py", "--lr", "0.1"),
    )
    fields.update(overrides)
    return LaunchRequest(**fields)


SRUN = ("srun", "--kill-on-bad-exit=1", "--ntasks-per-node=1")

TABLE = [
    (
        "torchrun, regular job",
        request(),
        LaunchShape(
            sbatch_options=("--nodes=2", "--ntasks-per-node=1"),
            environment=(("DISPATCH_SEGMENT_DIR", DIR),),
            preamble=(
                FIRST_NODE,
                'export PET_RDZV_ENDPOINT="${DISPATCH_RDZV_HOST}":29500',
                RDZV_ID,
            ),
            srun_argv=SRUN
            + ("--nodes=2", "torchrun", "--rdzv-backend=dispatch-segment-c10d")
            + ("--nnodes=2", "--nproc-per-node=4", "train.py", "--lr", "0.1"),
        ),
    ),
    (
        "torchrun, array, fixed host, a port per array task",
        request(
            nodes=2,
            nproc_per_node=1,
            array=True,
            rdzv_host="127.0.0.1",
            rdzv_port=29600,
            port_per_array_task=True,
            launcher_executable="/opt/venv/bin/torchrun",
            program=("train.py",),
        ),
        LaunchShape(
            sbatch_options=("--nodes=2", "--ntasks-per-node=1", "--no-requeue"),
            environment=(("DISPATCH_SEGMENT_DIR", DIR),),
            preamble=(
                'export PET_RDZV_ENDPOINT=127.0.0.1:"$((29600 + ${SLURM_ARRAY_TASK_ID:-0}))"',
                RDZV_ID,
            ),
            srun_argv=SRUN
            + ("--nodes=2", "/opt/venv/bin/torchrun", "--rdzv-backend=dispatch-segment-c10d")
            + ("--nnodes=2", "--nproc-per-node=1", "train.py"),
        ),
    ),
    (
        "ft_launcher, array",
        request(launcher=Launcher.FT_LAUNCHER, nodes=16, nproc_per_node=8, array=True),
        LaunchShape(
            sbatch_options=("--nodes=16", "--ntasks-per-node=1", "--no-requeue"),
            environment=(),
            preamble=(
                FIRST_NODE,
                'export PET_RDZV_ENDPOINT="${DISPATCH_RDZV_HOST}":29500',
                RDZV_ID,
            ),
            srun_argv=SRUN
            + ("--nodes=16", "ft_launcher", "--ft-segment-health-check-dir", DIR)
            + ("--nnodes=16", "--nproc-per-node=8", "train.py", "--lr", "0.1"),
        ),
    ),
    (
        "ft_launcher, regular job, one node",
        request(launcher=Launcher.FT_LAUNCHER, nodes=1, nproc_per_node=1, rdzv_host="head-0"),
        LaunchShape(
            sbatch_options=("--nodes=1", "--ntasks-per-node=1"),
            environment=(),
            preamble=("export PET_RDZV_ENDPOINT=head-0:29500", RDZV_ID),
            srun_argv=SRUN
            + ("--nodes=1", "ft_launcher", "--ft-segment-health-check-dir", DIR)
            + ("--nnodes=1", "--nproc-per-node=1", "train.py", "--lr", "0.1"),
        ),
    ),
]


@pytest.mark.parametrize(("name", "req", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_launch_shape_table(name, req, expected):
    assert launch_shape(req) == expected


@pytest.mark.parametrize(("name", "req", "expected"), TABLE, ids=[t[0] for t in TABLE])
def test_invariants_of_every_shape(name, req, expected):
    shape = launch_shape(req)
    argv = shape.srun_argv
    assert argv[:2] == ("srun", "--kill-on-bad-exit=1")
    assert "--ntasks-per-node=1" in argv and "--ntasks-per-node=1" in shape.sbatch_options
    assert ("--no-requeue" in shape.sbatch_options) == req.array
    assert argv[-len(req.program) :] == req.program


def test_rendering_quotes_every_literal():
    shape = launch_shape(request(program=("train.py", "--name", "a b; rm -rf /")))
    lines = render_lines(shape)
    assert lines[0] == f"export DISPATCH_SEGMENT_DIR={shlex.quote(DIR)}"
    assert shlex.split(lines[-1]) == list(shape.srun_argv)


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": True}, "nodes"),
        ({"nproc_per_node": -1}, "nproc_per_node"),
        ({"rdzv_port": 0}, "rdzv_port"),
        ({"rdzv_port": 70000}, "rdzv_port"),
        ({"rdzv_host": "h; reboot"}, "rdzv_host"),
        ({"rdzv_host": "$(id)"}, "rdzv_host"),
        ({"port_per_array_task": True}, "array"),
        ({"program": ()}, "program"),
        ({"program": ["train.py"]}, "program"),
        ({"launcher": "mpirun"}, "launcher"),
        ({"launcher_executable": ""}, "launcher_executable"),
    ],
)
def test_bad_requests_are_refused_with_what_is_wrong(overrides, words):
    with pytest.raises(LaunchShapeError) as info:
        launch_shape(request(**overrides))
    assert words in str(info.value)


def test_every_problem_is_reported_at_once():
    with pytest.raises(LaunchShapeError) as info:
        launch_shape(request(nodes=0, rdzv_port=0))
    assert "nodes" in str(info.value) and "rdzv_port" in str(info.value)


def test_the_decision_directory_must_be_absolute():
    with pytest.raises(DirectoryNotAbsolute):
        launch_shape(request(decision_dir="segment-health"))


def test_the_preamble_runs_in_bash_and_hands_the_launcher_its_rendezvous():
    shape = launch_shape(
        request(array=True, rdzv_host="127.0.0.1", rdzv_port=29600, port_per_array_task=True)
    )
    lines = render_lines(shape)[:-1]  # everything but srun
    lines.append('printf "%s\\n" "$PET_RDZV_ENDPOINT" "$PET_RDZV_ID" "$DISPATCH_SEGMENT_DIR"')
    env = {"PATH": "/usr/bin:/bin", "SLURM_JOB_ID": "4711", "SLURM_ARRAY_TASK_ID": "3"}
    done = subprocess.run(
        ["bash", "-euc", "\n".join(lines)], env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.splitlines() == ["127.0.0.1:29603", "4711", DIR]
