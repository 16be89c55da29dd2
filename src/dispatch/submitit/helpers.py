"""``submitit.helpers``: ``Checkpointable``, ``DelayedSubmission``, ``CommandFunction``,
``FunctionSequence``, ``as_completed``, ``clean_env``, ``TorchDistributedEnvironment``.

Any callable with a ``checkpoint`` (or ``__submitit_checkpoint__``) method is checkpointable,
subclass or not, as in submitit: the executor wraps it in ``Resumable``, whose
``__dispatch_checkpoint__`` asks it and turns its ``DelayedSubmission`` into the call the
next submission runs."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol

from dispatch.errors import DispatchError
from dispatch.fn.calls import Call
from dispatch.submitit.core.utils import DelayedSubmission
from dispatch.submitit.job_environment import JobEnvironment

__all__ = [
    "Checkpointable",
    "CommandFunction",
    "DelayedSubmission",
    "FailedSubprocessError",
    "FunctionSequence",
    "Resumable",
    "TorchDistributedEnvironment",
    "as_completed",
    "clean_env",
    "resumable",
]


class Checkpointable:
    """A callable to resume after a preemption or a time limit: ``checkpoint`` returns the
    ``DelayedSubmission`` to run next; by default this object as it is now, with the same
    arguments. Return None to not be resubmitted."""

    def checkpoint(self, *args: Any, **kwargs: Any) -> DelayedSubmission | None:
        return DelayedSubmission(self, *args, **kwargs)


def _hook(fn: object) -> Callable[..., Any] | None:
    for name in ("__submitit_checkpoint__", "checkpoint"):
        hook: Callable[..., Any] | None = getattr(fn, name, None)
        if callable(hook):
            return hook
    return None


class Resumable:
    """A checkpointable callable as dispatch's bootstrap asks it: calls ``func``, and on a
    stop asks ``func``'s ``checkpoint`` for the next submission."""

    def __init__(self, func: Callable[..., Any]) -> None:
        self.func = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __dispatch_checkpoint__(self, *args: Any, **kwargs: Any) -> Call | None:
        hook = _hook(self.func)
        resume = None if hook is None else hook(*args, **kwargs)
        if resume is None:
            return None
        if isinstance(resume, DelayedSubmission):
            return Call(resumable(resume.function), resume.args, resume.kwargs)
        return Call(resumable(resume))


def resumable(fn: Callable[..., Any]) -> Callable[..., Any]:
    """``fn`` wrapped in ``Resumable`` when it has a checkpoint method, else ``fn``."""
    return Resumable(fn) if _hook(fn) is not None and not isinstance(fn, Resumable) else fn


class FunctionSequence(Checkpointable):
    """Calls the functions added to it one after the other and returns their values; a
    resumed sequence skips those that already returned."""

    def __init__(self, verbose: bool = False) -> None:
        self.verbose = verbose
        self.delayed_functions: list[DelayedSubmission] = []

    def add(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        self.delayed_functions.append(DelayedSubmission(func, *args, **kwargs))

    def __len__(self) -> int:
        return len(self.delayed_functions)

    def __iter__(self) -> Iterator[DelayedSubmission]:
        return iter(self.delayed_functions)

    def __call__(self) -> list[Any]:
        for i, delayed in enumerate(self.delayed_functions):
            if self.verbose and not delayed.done():
                print(f"Computing {i + 1}/{len(self)}", flush=True)
            delayed.result()
        return [d.result() for d in self.delayed_functions]


class FailedSubprocessError(DispatchError, RuntimeError):
    """A ``CommandFunction``'s command exited with a non-zero status (its stderr in the
    message)."""


class CommandFunction:
    """A command (an argv list, never a shell string) as a function: calling it runs the
    command, with the call's arguments appended (``--key=value`` for keyword ones), and
    returns its stdout, stripped. ``cwd``, ``env`` as subprocess's; ``verbose``: also copy
    the output to this process's streams."""

    def __init__(
        self,
        command: list[str],
        verbose: bool = True,
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        if not isinstance(command, list):
            raise TypeError("The command must be provided as a list")
        self.command = command
        self.verbose = verbose
        self.cwd = None if cwd is None else os.fspath(cwd)
        self.env = env

    def __call__(self, *args: Any, **kwargs: Any) -> str:
        argv = [*self.command, *(str(a) for a in args), *(f"--{k}={v}" for k, v in kwargs.items())]
        done = subprocess.run(
            argv, cwd=self.cwd, env=self.env, capture_output=True, text=True, check=False
        )
        if self.verbose:
            sys.stdout.write(done.stdout)
            sys.stderr.write(done.stderr)
        if done.returncode:
            raise FailedSubprocessError(
                f"{argv} failed with exit status {done.returncode}:\n{done.stderr}"
            )
        return done.stdout.strip()


class _Finishing(Protocol):
    def done(self, force_check: bool = False) -> bool: ...


def as_completed(
    jobs: Sequence[Any], timeout: float | None = None, poll_frequency: float = 10
) -> Iterator[Any]:
    """The jobs, each as soon as it is done (supervising them while it waits);
    ``TimeoutError`` after ``timeout`` seconds."""
    start = time.monotonic()
    left = list(jobs)
    while left:
        finished = [job for job in left if job.done()]
        for job in finished:
            left.remove(job)
            yield job
        if not left:
            return
        if timeout is not None and time.monotonic() - start > timeout:
            raise TimeoutError(f"{len(left)} job(s) not done after {timeout} s")
        if not finished:
            time.sleep(min(poll_frequency, 1.0))


_CLUSTER_NAMES = ("SLURM_", "SUBMITIT_", "DISPATCH_", "TORCHELASTIC_")


@contextlib.contextmanager
def clean_env(extra_names: Sequence[str] = ()) -> Iterator[None]:
    """Within the block, the environment lacks the scheduler's variables (SLURM_*,
    SUBMITIT_*, DISPATCH_* and the distributed ones), so a job submitted from inside a job
    does not inherit them; they are back afterwards."""
    distributed = {
        "RANK",
        "WORLD_SIZE",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "MASTER_ADDR",
        "MASTER_PORT",
        *extra_names,
    }
    removed = {
        k: os.environ.pop(k)
        for k in list(os.environ)
        if k.startswith(_CLUSTER_NAMES) or k in distributed
    }
    try:
        yield
    finally:
        os.environ.update(removed)


class TorchDistributedEnvironment:
    """What ``torch.distributed``'s ``env://`` needs, from the job's environment:
    ``export()`` sets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR and
    MASTER_PORT (dispatch sets them already on every task; export keeps them)."""

    def __init__(self) -> None:
        env = JobEnvironment()
        self.rank = env.global_rank
        self.local_rank = env.local_rank
        self.world_size = env.num_tasks
        self.local_world_size = env.tasks_per_node
        self.master_addr = os.environ.get("MASTER_ADDR", "127.0.0.1")
        self.master_port = int(os.environ.get("MASTER_PORT", "29500"))

    def export(
        self, set_cuda_visible_devices: bool = True, overwrite: bool = False
    ) -> TorchDistributedEnvironment:
        wanted = {
            "RANK": self.rank,
            "LOCAL_RANK": self.local_rank,
            "WORLD_SIZE": self.world_size,
            "LOCAL_WORLD_SIZE": self.local_world_size,
            "MASTER_ADDR": self.master_addr,
            "MASTER_PORT": self.master_port,
        }
        for key, value in wanted.items():
            if overwrite or key not in os.environ:
                os.environ[key] = str(value)
        return self
