"""The launch shape the segment health check needs on Slurm (docs/semantics.md#h3). Pure.

Seed 002: one launcher per allocated node, ``srun --kill-on-bad-exit=1`` so an excluded
process 0 ends the workload step, ``--no-requeue`` for arrays, and the decision directory
given to the launcher (``--ft-segment-health-check-dir`` for ft_launcher; our
``dispatch-segment-c10d`` rendezvous backend for torchrun).

The srun argv is a list of literal words: the caller renders it with ``shlex.join`` (or
``render_lines``) and never builds a shell string from user input. The values only known
inside the allocation (the rendezvous host and id) reach the launcher through the
environment: torchrun reads every option from ``PET_<OPTION>`` when it is not on the
command line (torch/distributed/argparse_util.py), so ``PET_RDZV_ENDPOINT`` and
``PET_RDZV_ID`` are exported by the ``preamble``, whose lines are built only from
constants and validated values.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from dispatch.segment_health.artifact import SegmentHealthError, absolute_directory

BACKEND_NAME = "dispatch-segment-c10d"  # the torchrun.handlers entry point (pyproject.toml)
DIR_ENV = "DISPATCH_SEGMENT_DIR"  # read by the rendezvous handler and `dispatch segment check`

_HOST = re.compile(r"[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?")


class Launcher(StrEnum):
    FT_LAUNCHER = "ft_launcher"
    TORCHRUN = "torchrun"


class LaunchShapeError(SegmentHealthError, ValueError):
    """A launch request that cannot produce a correct launch shape."""


@dataclass(frozen=True)
class LaunchRequest:
    launcher: Launcher
    nodes: int  # nodes per allocation unit (per array task for an array)
    nproc_per_node: int
    decision_dir: str  # absolute
    program: tuple[str, ...]  # the training program and its arguments, verbatim
    array: bool = False
    rdzv_port: int = 29500
    # None: the first node of the allocation, resolved in the batch script.
    rdzv_host: str | None = None
    # Add SLURM_ARRAY_TASK_ID to the port: array tasks whose rendezvous hosts share an
    # address (a one-host test cluster) need distinct ports.
    port_per_array_task: bool = False
    launcher_executable: str | None = None  # default: the launcher's name on PATH


@dataclass(frozen=True)
class LaunchShape:
    sbatch_options: tuple[str, ...]  # e.g. ("--nodes=2", "--ntasks-per-node=1", "--no-requeue")
    environment: tuple[tuple[str, str], ...]  # literal values to export (quote when rendering)
    preamble: tuple[str, ...]  # shell lines from constants and validated values only
    srun_argv: tuple[str, ...]  # literal words


def launch_shape(request: LaunchRequest) -> LaunchShape:
    """The sbatch options, environment, preamble and srun argv for one launcher per node."""
    _validate(request)
    directory = str(absolute_directory(request.decision_dir))
    sbatch = [f"--nodes={request.nodes}", "--ntasks-per-node=1"]
    if request.array:
        sbatch.append("--no-requeue")
    srun = [
        "srun",
        "--kill-on-bad-exit=1",
        "--ntasks-per-node=1",
        f"--nodes={request.nodes}",
    ]
    environment: list[tuple[str, str]] = []
    launcher = [request.launcher_executable or request.launcher.value]
    if request.launcher is Launcher.FT_LAUNCHER:
        launcher += ["--ft-segment-health-check-dir", directory]
    else:
        launcher.append(f"--rdzv-backend={BACKEND_NAME}")
        environment.append((DIR_ENV, directory))
    launcher += [f"--nnodes={request.nodes}", f"--nproc-per-node={request.nproc_per_node}"]
    return LaunchShape(
        sbatch_options=tuple(sbatch),
        environment=tuple(environment),
        preamble=_rendezvous_preamble(request),
        srun_argv=tuple(srun + launcher + list(request.program)),
    )


def render_lines(shape: LaunchShape) -> list[str]:
    """The batch-script lines for a shape (after the #SBATCH header), every literal quoted."""
    lines = [f"export {name}={shlex.quote(value)}" for name, value in shape.environment]
    lines += shape.preamble
    lines.append(shlex.join(shape.srun_argv))
    return lines


def _rendezvous_preamble(request: LaunchRequest) -> tuple[str, ...]:
    lines: list[str] = []
    if request.rdzv_host is None:
        lines.append(
            'DISPATCH_RDZV_HOST="$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)"'
        )
        host = '"${DISPATCH_RDZV_HOST}"'
    else:
        host = shlex.quote(request.rdzv_host)
    if request.port_per_array_task:
        port = f'"$(({request.rdzv_port} + ${{SLURM_ARRAY_TASK_ID:-0}}))"'
    else:
        port = str(request.rdzv_port)
    lines.append(f"export PET_RDZV_ENDPOINT={host}:{port}")
    # Each array task is its own Slurm job: its SLURM_JOB_ID names its own rendezvous.
    lines.append('export PET_RDZV_ID="${SLURM_JOB_ID}"')
    return tuple(lines)


def _validate(request: LaunchRequest) -> None:
    problems: list[str] = []
    if not isinstance(request.launcher, Launcher):
        problems.append(f"launcher must be one of {[m.value for m in Launcher]}")
    for name in ("nodes", "nproc_per_node"):
        value = getattr(request, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            problems.append(f"{name} must be a positive integer, got {value!r}")
    port = request.rdzv_port
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        problems.append(f"rdzv_port must be 1..65535, got {port!r}")
    if request.rdzv_host is not None and not _HOST.fullmatch(request.rdzv_host):
        problems.append(f"rdzv_host must be a host name or IPv4 address, got {request.rdzv_host!r}")
    if request.port_per_array_task and not request.array:
        problems.append("port_per_array_task needs an array job")
    if not _is_words(request.program) or not request.program:
        problems.append(f"program must be a non-empty tuple of strings, got {request.program!r}")
    exe = request.launcher_executable
    if exe is not None and (not isinstance(exe, str) or not exe):
        problems.append(f"launcher_executable must be a non-empty string, got {exe!r}")
    if problems:
        raise LaunchShapeError("; ".join(problems))


def _is_words(words: Sequence[str]) -> bool:
    return isinstance(words, tuple) and all(isinstance(w, str) and w for w in words)
