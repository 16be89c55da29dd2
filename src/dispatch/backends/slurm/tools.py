"""Running one Slurm tool: an argv list (never a shell), a timeout, and what its words mean
when it fails (an unreachable controller or database is SchedulerUnreachable, never a state;
a job that has already ended is not an error to stop)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from dispatch.core.model import SchedulerUnreachable
from dispatch.errors import BackendError
from dispatch.support.deadline import time_left

NAME = "slurm"

# Words the Slurm tools print when they cannot reach slurmctld or slurmdbd.
UNREACHABLE_WORDS = (
    "unable to contact slurm controller", "connection refused", "connect failure",
    "socket timed out", "timed out", "zero bytes were transmitted",
    "problem talking to the database", "unable to connect to database",
    "slurm_persist_conn_open", "communication connection failure", "could not establish",
    "failed while looking for jobs", "slurm_load_jobs", "slurm_load_node",
    "slurm_load_partitions", "slurmdbd: no response", "unable to establish",
    "transport endpoint is not connected", "no route to host", "network is unreachable",
)
# scancel / scontrol words for a job that has already ended: stopping it again is a no-op.
ALREADY_ENDED_WORDS = (
    "already completing or completed", "job has already finished", "invalid job id",
    "job is no longer pending", "no longer pending execution", "already complete",
)


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def words(self) -> str:
        return " ".join((self.stderr.strip() or self.stdout.strip()).split())


Runner = Callable[[Sequence[str], float], Result]


def run_tool(argv: Sequence[str], timeout: float) -> Result:
    """Run one Slurm tool. A tool that hangs or is missing is an unreachable scheduler.
    Under a read's deadline (dispatch.support.deadline) it gets at most the time left, and is
    killed when that runs out."""
    limit = time_left(timeout)
    if limit <= 0:
        raise SchedulerUnreachable(NAME, f"{argv[0]} not run: the read's deadline has passed")
    try:
        proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=limit,
                              check=False, env=os.environ.copy())
    except subprocess.TimeoutExpired:
        raise SchedulerUnreachable(NAME, f"{argv[0]} timed out after {limit:.3g}s") from None
    except OSError as err:
        raise SchedulerUnreachable(NAME, f"cannot run {argv[0]}: {err.strerror}") from None
    return Result(tuple(argv), proc.returncode, proc.stdout, proc.stderr)


def unreachable_words(text: str) -> bool:
    low = text.lower()
    return any(w in low for w in UNREACHABLE_WORDS)


class SlurmCommandError(BackendError):
    """scancel / scontrol refused (not an unreachable controller, not an ended job)."""

    def __init__(self, argv: Sequence[str], words: str) -> None:
        super().__init__(f"{' '.join(argv)}: {words}")
        self.argv = tuple(argv)
        self.words = words
