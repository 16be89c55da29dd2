"""submitit's ``Job`` over a dispatch function job: ``job_id``, ``state`` in submitit's
words, ``done``, ``result``/``results``, ``exception``, ``task(i)``, ``cancel``,
``stdout``/``stderr``, ``paths``, ``submission``, ``awaitable`` and ``_interrupt``. Also
``DebugJob``, which runs its call in this process when it is asked for its result."""

from __future__ import annotations

import asyncio
import os
import pdb
import sys
from pathlib import Path
from typing import Any, Generic, TypeVar

from dispatch.api import WAIT_POLL_S, _open
from dispatch.core.model import CauseKind, State, Status
from dispatch.errors import BadInput, StateConflict
from dispatch.fn.calls import Names
from dispatch.fn.job import FunctionFailed, FunctionJob
from dispatch.submitit.core.utils import (
    DelayedSubmission,
    FailedJobError,
    JobPaths,
    UncompletedJobError,
)
from dispatch.submitit.folders import link

R = TypeVar("R")

# A failed job's word is the cause's, as Slurm's sacct says it.
_FAILED_WORDS = {
    CauseKind.TIME_LIMIT: "TIMEOUT",
    CauseKind.OUT_OF_MEMORY: "OUT_OF_MEMORY",
    CauseKind.NODE_LOST: "NODE_FAIL",
    CauseKind.PREEMPTED: "PREEMPTED",
    CauseKind.CANCELLED: "CANCELLED",
}
_WORDS = {
    State.PENDING: "PENDING",
    State.HELD: "PENDING",
    State.RUNNING: "RUNNING",
    State.RECOVERING: "REQUEUED",
    State.SUCCEEDED: "COMPLETED",
    State.CANCELLED: "CANCELLED",
    State.UNKNOWN: "UNKNOWN",
}


def state_word(status: Status) -> str:
    """submitit's (Slurm's) word for a dispatch status: PENDING, RUNNING, REQUEUED,
    COMPLETED, FAILED, TIMEOUT, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED, CANCELLED, UNKNOWN."""
    if status.state is State.FAILED:
        kind = status.cause.kind if status.cause is not None else None
        return _FAILED_WORDS.get(kind, "FAILED") if kind is not None else "FAILED"
    return _WORDS[status.state]


def job_id_of(handle: FunctionJob[Any], backend: str) -> str:
    """``Job.job_id``: Slurm's id of the latest submission on Slurm (the array's id with
    ``_<task>`` for a task of an array), else the dispatch job id (``_<task>`` likewise)."""
    ref = handle.id
    if backend == "slurm":
        objects = handle.job.record().objects
        if objects:
            ref = objects[-1]
    return ref if handle.task is None else f"{ref}_{handle.task}"


def submitit_error(err: FunctionFailed, task: int) -> FailedJobError | UncompletedJobError:
    """submitit's exception for a function job that did not succeed."""
    word = state_word(err.status)
    if err.remote is not None:
        return FailedJobError(
            f"Job (task={task}) failed during processing with trace:\n"
            f"----------------------\n{err.remote.traceback.rstrip()}\n"
            f"----------------------\n{err.args[0].splitlines()[0]}\n"
            f"You can check full logs with 'job.stderr({task})' and 'job.stdout({task})'",
            err.status,
            err.remote,
        )
    return UncompletedJobError(
        f"Job {err.status.job} (task: {task}) has not produced any output "
        f"(state: {word}); {err.args[0]}",
        err.status,
        None,
    )


class Job(Generic[R]):
    """One submitted call. ``num_tasks`` tasks (nodes x tasks_per_node) each run it;
    ``results()`` has every task's return value, ``result()`` the one value (the list when
    there are several tasks)."""

    def __init__(
        self,
        handle: FunctionJob[R],
        submission: DelayedSubmission,
        num_tasks: int = 1,
        backend: str = "local",
        folder: Path | None = None,
    ) -> None:
        self._handle = handle
        self._submission = submission
        self.num_tasks = num_tasks
        self._backend = backend
        self._folder = folder  # the executor's, with its %j

    def link_folder(self) -> Path:
        """The job's folder: the executor's with this job's id put in (``log/%j`` ->
        ``log/1234``), a link to the call folder (made if missing: a resubmitted Slurm job
        has a new id); the call folder when the executor's has no pattern."""
        if self._folder is None:
            return self._handle.folder
        return link(self._folder, self.job_id, self._handle.folder)

    @property
    def handle(self) -> FunctionJob[R]:
        """The dispatch handle (``.job``: the ``dispatch.Job``, its record and history)."""
        return self._handle

    @property
    def job_id(self) -> str:
        """submitit's job id. On Slurm: Slurm's id of the job's latest submission
        (``"1234"``; ``"1234_0"`` for task 0 of an array: ``map_array``, ``batch()``); a
        resubmitted job has its new submission's id, as ``squeue`` shows it. Locally, and on
        Slurm before any submission reached sbatch: the dispatch job id (``8378a8771a``;
        ``<id>_<i>`` for a task of an array), which never changes."""
        return job_id_of(self._handle, self._backend)

    @property
    def state(self) -> str:
        return state_word(self._handle.status())

    def __repr__(self) -> str:
        try:
            state = self.state
            ident = self.job_id
        except StateConflict:
            ident, state = "<batch: not submitted yet>", "UNSUBMITTED"
        return f'{type(self).__name__}<job_id={ident}, task_id=0, state="{state}">'

    def done(self, force_check: bool = False) -> bool:
        return self._handle.done()

    def wait(self) -> None:
        """Wait until the job has ended (supervising it, as ``result`` does)."""
        self._handle.wait()

    def results(self) -> list[R]:
        try:
            return self._handle.results(self.num_tasks)
        except FunctionFailed as err:
            raise submitit_error(err, 0)  # noqa: B904 - its __cause__ is the remote one

    def result(self) -> Any:
        values = self.results()
        return values[0] if self.num_tasks == 1 else values

    def exception(self) -> FailedJobError | UncompletedJobError | None:
        try:
            self.results()
        except (FailedJobError, UncompletedJobError) as err:
            return err
        return None

    def cancel(self, check: bool = True) -> None:
        """Cancel the job (recorded, carried out); a finished job stays as it is."""
        try:
            self._handle.cancel()
        except StateConflict:
            if check and not self.done():
                raise

    def task(self, task_id: int) -> JobTask[R]:
        if not 0 <= task_id < self.num_tasks:
            raise BadInput(f"task {task_id}: this job has tasks 0 to {self.num_tasks - 1}")
        return JobTask(self, task_id)

    def stdout(self) -> str | None:
        """Task 0's stdout; with several tasks, every task's, one after another."""
        return self._joined("stdout")

    def stderr(self) -> str | None:
        return self._joined("stderr")

    def _joined(self, stream: str) -> str | None:
        read = self._handle.stdout if stream == "stdout" else self._handle.stderr
        parts = [read(rank) for rank in range(self.num_tasks)]
        if all(p is None for p in parts):
            return None
        return "".join(p or "" for p in parts)

    def get_logs_path(self, name: str) -> str:
        return str(getattr(self.paths, name))

    @property
    def paths(self) -> JobPaths:
        h = self._handle
        folder = self.link_folder()
        names = Names(folder, h.id, h.task)
        n = max(h._submission(), 1)
        return JobPaths(
            folder=folder,
            submitted_pickle=names.call(),
            result_pickle=names.result(n),
            stdout=names.output(n, 0, "stdout"),
            stderr=names.output(n, 0, "stderr"),
        )

    def submission(self) -> DelayedSubmission:
        return self._submission

    def awaitable(self) -> AsyncJobProxy[R]:
        return AsyncJobProxy(self)

    def _interrupt(self, timeout: bool = False) -> None:
        """submitit's simulated preemption, here a real one: the local scheduler preempts
        the job (SIGTERM, then SIGKILL), its checkpoint is stored, and recovery (the rule
        ``slurm_max_num_timeout`` made) resubmits it from there. ``timeout=True`` (a time
        limit) has no local equivalent."""
        if timeout:
            raise BadInput(
                "_interrupt(timeout=True): the local backend cannot end a job on "
                "its time limit on demand; use timeout=False (a preemption)"
            )
        if self._backend != "local":
            raise BadInput(
                f"_interrupt: only the local backend preempts on demand (this job "
                f"runs on {self._backend})"
            )
        job = self._handle.job
        with _open(job.store) as service:
            service.backends("local").inject(job.id, "preempt")  # type: ignore[attr-defined]


class JobTask(Generic[R]):
    """Task ``task_id`` of a multi-task job: its own result, stdout and stderr."""

    def __init__(self, job: Job[R], task_id: int) -> None:
        self._job = job
        self.task_id = task_id

    @property
    def job_id(self) -> str:
        return self._job.job_id

    @property
    def state(self) -> str:
        return self._job.state

    def done(self, force_check: bool = False) -> bool:
        return self._job.done()

    def result(self) -> R:
        return self._job.results()[self.task_id]

    def exception(self) -> FailedJobError | UncompletedJobError | None:
        return self._job.exception()

    def stdout(self) -> str | None:
        return self._job.handle.stdout(self.task_id)

    def stderr(self) -> str | None:
        return self._job.handle.stderr(self.task_id)

    def cancel(self, check: bool = True) -> None:
        self._job.cancel(check)


class AsyncJobProxy(Generic[R]):
    """``job.awaitable()``: ``await proxy.result()`` waits in a thread, so the event loop
    runs on."""

    def __init__(self, job: Job[R] | DebugJob[R]) -> None:
        self.job = job

    async def wait(self, poll_frequency: float = WAIT_POLL_S) -> None:
        await asyncio.to_thread(self.job.wait)

    async def result(self, poll_frequency: float = WAIT_POLL_S) -> Any:
        return await asyncio.to_thread(self.job.result)

    async def results(self, poll_frequency: float = WAIT_POLL_S) -> list[Any]:
        return await asyncio.to_thread(self.job.results)


class DebugJob(Generic[R]):
    """``DebugExecutor``'s job: the call runs in this process, when its result is first
    asked for, so ``pdb`` and breakpoints work; an exception opens ``pdb.post_mortem`` when
    stdin is a terminal, then is raised as it was. Nothing is recorded."""

    num_tasks = 1

    def __init__(self, submission: DelayedSubmission) -> None:
        self._submission = submission
        self.job_id = f"DEBUG_{id(submission)}"
        self.cancelled = False
        self._error: BaseException | None = None

    def __repr__(self) -> str:
        return f'DebugJob<job_id={self.job_id}, task_id=0, state="{self.state}">'

    @property
    def state(self) -> str:
        if self.cancelled:
            return "CANCELLED"
        if self._error is not None:
            return "FAILED"
        return "DONE" if self._submission.done() else "QUEUED"

    def submission(self) -> DelayedSubmission:
        return self._submission

    def done(self, force_check: bool = False) -> bool:
        return self._submission.done() or self._error is not None or self.cancelled

    def cancel(self, check: bool = True) -> None:
        self.cancelled = True

    def wait(self) -> None:
        self.exception()

    def results(self) -> list[R]:
        if self.cancelled:
            raise UncompletedJobError(f"Job {self.job_id} was cancelled.")
        if self._error is not None:
            raise self._error
        environ = dict(os.environ)
        os.environ["SUBMITIT_DEBUG_JOB_ID"] = os.environ["DISPATCH_JOB_ID"] = self.job_id
        os.environ.update(
            {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        )
        try:
            return [self._submission.result()]
        except Exception as err:
            self._error = err
            if sys.stdin is not None and sys.stdin.isatty():
                print(err)
                pdb.post_mortem(err.__traceback__)
            raise
        finally:
            os.environ.clear()
            os.environ.update(environ)

    def result(self) -> R:
        return self.results()[0]

    def exception(self) -> BaseException | None:
        try:
            self.results()
        except Exception as err:
            return err
        return None

    def stdout(self) -> str | None:
        return None

    def stderr(self) -> str | None:
        return None

    def task(self, task_id: int) -> DebugJob[R]:
        if task_id != 0:
            raise BadInput(f"task {task_id}: a debug job has task 0 only")
        return self

    def awaitable(self) -> AsyncJobProxy[R]:
        return AsyncJobProxy(self)
