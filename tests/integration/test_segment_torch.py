"""The dispatch-segment-c10d rendezvous backend under a real torchrun (torch 2.13, gloo, CPU).

torchrun finds the backend the way users get it: through the ``torchrun.handlers`` entry
point that pyproject.toml declares. The tests do not ``pip install`` dispatch; they put a
dist-info directory built from pyproject.toml's own declaration on PYTHONPATH, which is what
an installed dispatch provides.

torch is an optional extra. Without it these tests FAIL (a skip is not coverage), unless
DISPATCH_SKIP_TORCH=1 says the run knowingly has no torch.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from dispatch.segment_health.launch import Launcher, LaunchRequest, launch_shape, render_lines
from dispatch.segment_health.publisher import make_decision, publish

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
BACKEND = "dispatch-segment-c10d"
TIMEOUT = 240  # a bound for a hung run, never an assertion about speed

pytestmark = pytest.mark.torch

TRAIN = r"""
import os, sys
import torch
import torch.distributed as dist

attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
marks = os.environ["TEST_MARKS"]
open(os.path.join(marks, "attempt-" + attempt), "w").close()
if os.environ.get("TEST_PUBLISH_THEN_FAIL") and attempt == "0":
    # dispatch marks this unit while it runs; the worker then fails, the agent restarts
    # it, and the next rendezvous round must refuse the unit.
    from datetime import datetime, timezone
    from dispatch.segment_health.publisher import make_decision, publish
    job = os.environ["SLURM_JOB_ID"]
    publish(os.environ["TEST_DIR"], job, job, decision=make_decision(
        job_id=job, task_id=job, nodes=["n1"], cause="node-drained", who="test",
        why="drained while running", when=datetime(2026, 5, 1, tzinfo=timezone.utc)))
    sys.exit(3)
dist.init_process_group("gloo")
value = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(value)
world = dist.get_world_size()
assert value.item() == world * (world + 1) / 2
print(f"ALL_REDUCE_OK world={world} sum={value.item()}", flush=True)
dist.destroy_process_group()
open(os.path.join(marks, "trained"), "w").close()
"""


@pytest.fixture(scope="module")
def torch_ready():
    if importlib.util.find_spec("torch") is None:
        if os.environ.get("DISPATCH_SKIP_TORCH") == "1":
            pytest.skip("torch not installed and DISPATCH_SKIP_TORCH=1")
        pytest.fail(
            "torch is not installed: pip install torch==2.13.0 numpy (or DISPATCH_SKIP_TORCH=1)"
        )
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    assert torchrun is not None, "torch is installed but its torchrun script is not next to python"
    return torchrun


@pytest.fixture(scope="module")
def entry_point_path(tmp_path_factory):
    """A dist-info carrying pyproject.toml's [project.entry-points."torchrun.handlers"]."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    handlers = project["entry-points"]["torchrun.handlers"]
    assert handlers[BACKEND] == "dispatch.segment_health.rendezvous:create_handler"
    site = tmp_path_factory.mktemp("entry-points")
    info = site / f"dispatch-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: dispatch\nVersion: {project['version']}\n"
    )
    lines = ["[torchrun.handlers]"] + [f"{name} = {target}" for name, target in handlers.items()]
    (info / "entry_points.txt").write_text("\n".join(lines) + "\n")
    return site


@pytest.fixture
def workspace(tmp_path, entry_point_path, torch_ready):
    decisions = tmp_path / "decisions"
    decisions.mkdir()
    marks = tmp_path / "marks"
    marks.mkdir()
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PET_", "DISPATCH_"))}
    env.update(
        PYTHONPATH=os.pathsep.join([str(entry_point_path), str(SRC)]),
        TEST_MARKS=str(marks),
        TEST_DIR=str(decisions),
        SLURM_PROCID="0",
        SLURM_JOB_ID="4242",
        OMP_NUM_THREADS="1",
    )
    return {"dir": decisions, "marks": marks, "script": script, "env": env, "torchrun": torch_ready}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def torchrun(
    ws, *extra: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [
        ws["torchrun"],
        "--nnodes=1",
        "--nproc-per-node=1",
        f"--rdzv-backend={BACKEND}",
        f"--rdzv-endpoint=127.0.0.1:{free_port()}",
        "--rdzv-id=4242",
        f"--rdzv-conf=segment_health_check_dir={ws['dir']}",
        *extra,
        str(ws["script"]),
    ]
    return subprocess.run(
        argv, env={**ws["env"], **(env or {})}, capture_output=True, text=True, timeout=TIMEOUT
    )


def marks(ws) -> set[str]:
    return set(os.listdir(ws["marks"]))


def decide(ws, job="4242", task="4242"):
    from datetime import UTC, datetime

    return publish(
        ws["dir"],
        job,
        task,
        decision=make_decision(
            job_id=job,
            task_id=task,
            nodes=["n1"],
            cause="node-drained",
            who="test",
            why="n1 DRAIN",
            when=datetime(2026, 5, 1, tzinfo=UTC),
        ),
    )


def test_no_decision_trains_and_exits_0(workspace):
    done = torchrun(workspace)
    assert done.returncode == 0, done.stderr
    assert "ALL_REDUCE_OK world=1 sum=1.0" in done.stdout
    assert marks(workspace) == {"attempt-0", "trained"}
    installed = (
        f"Segment health check installed directory={workspace['dir']} job_id=4242 task_id=4242"
    )
    assert done.stderr.count(installed) == 1


def test_a_decision_stops_torchrun_before_rendezvous(workspace):
    path = decide(workspace)
    done = torchrun(workspace)
    assert done.returncode != 0
    assert "SegmentExcludedError" in done.stderr
    assert f"job_id=4242 task_id=4242 is excluded by segment health decision {path}" in done.stderr
    assert marks(workspace) == set()  # no worker was started


def test_a_decision_published_while_running_stops_the_next_round(workspace):
    done = torchrun(workspace, "--max-restarts=1", env={"TEST_PUBLISH_THEN_FAIL": "1"})
    assert done.returncode != 0
    assert "is excluded by segment health decision" in done.stderr
    # the first round ran the worker; the restart's rendezvous refused the unit
    assert marks(workspace) == {"attempt-0"}


def test_other_launchers_of_the_unit_do_not_check(workspace):
    decide(workspace)
    done = torchrun(workspace, env={"SLURM_PROCID": "1"})
    assert done.returncode == 0, done.stderr
    assert "Segment health check installed" not in done.stderr
    assert marks(workspace) == {"attempt-0", "trained"}


def test_an_array_task_is_named_by_array_ids(workspace):
    array = {"SLURM_ARRAY_JOB_ID": "4240", "SLURM_ARRAY_TASK_ID": "2"}
    decide(workspace, job="4240", task="1")  # another task of the array: not this one
    done = torchrun(workspace, env=array)
    assert done.returncode == 0, done.stderr
    decide(workspace, job="4240", task="2")
    done = torchrun(workspace, env=array)
    assert done.returncode != 0 and "job_id=4240 task_id=2 is excluded" in done.stderr


def test_a_relative_directory_is_refused(workspace):
    done = subprocess.run(
        [
            workspace["torchrun"],
            "--nnodes=1",
            "--nproc-per-node=1",
            f"--rdzv-backend={BACKEND}",
            f"--rdzv-endpoint=127.0.0.1:{free_port()}",
            "--rdzv-conf=segment_health_check_dir=relative/dir",
            str(workspace["script"]),
        ],
        env=workspace["env"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode != 0
    assert "must be an absolute path" in done.stderr
    assert marks(workspace) == set()


@pytest.mark.parametrize("decided", [False, True])
def test_the_generated_launch_shape_runs(workspace, decided):
    """launch.py's environment, preamble and argv, minus srun, under bash and real torchrun."""
    shape = launch_shape(
        LaunchRequest(
            launcher=Launcher.TORCHRUN,
            nodes=1,
            nproc_per_node=1,
            decision_dir=str(workspace["dir"]),
            program=(str(workspace["script"]),),
            rdzv_host="127.0.0.1",
            rdzv_port=free_port(),
            launcher_executable=workspace["torchrun"],
        )
    )
    if decided:
        decide(workspace)
    argv = list(shape.srun_argv)
    launcher = argv[argv.index(workspace["torchrun"]) :]  # no srun off the testbed
    assert argv[: argv.index(workspace["torchrun"])][:2] == ["srun", "--kill-on-bad-exit=1"]
    script = "\n".join([*render_lines(shape)[:-1], shlex.join(launcher)])
    done = subprocess.run(
        ["bash", "-euc", script],
        env=workspace["env"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    if decided:
        assert done.returncode != 0 and "is excluded by segment health decision" in done.stderr
        assert marks(workspace) == set()
    else:
        assert done.returncode == 0, done.stderr
        assert marks(workspace) == {"attempt-0", "trained"}


def test_torch_registers_the_backend_from_the_entry_point(workspace):
    probe = r"""
import torch.distributed.elastic.rendezvous as rdzv
from torch.distributed.elastic.rendezvous.api import RendezvousParameters
from dispatch.segment_health import rendezvous as ours
creator = rdzv.rendezvous_handler_registry._registry["dispatch-segment-c10d"]
assert creator is ours.create_handler() is ours.create_handler()
print("REGISTERED")
"""
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=workspace["env"],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "REGISTERED"
    assert "Exception while registering out of tree plugin" not in done.stderr
