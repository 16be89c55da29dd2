"""The handle ``Executor.submit`` returns: a ``dispatch.Job`` plus its call folder, with
submitit's ``result()``, ``exception()``, ``done()``, ``stdout()``, ``stderr()``,
``cancel()``."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Generic, TypeVar, cast

from dispatch.api import WAIT_POLL_S, HistoryLine, Job, JobFailed, _open
from dispatch.core.model import State, Status
from dispatch.errors import NotFound, StateConflict
from dispatch.fn.calls import MOST_RESULT_BYTES, Names, RemoteError, read_pickle, read_tail

# The output copies are read whole up to this many bytes (the end of a longer one).
MOST_OUTPUT_BYTES = 16 * 1024**2


class FunctionFailed(JobFailed):
    """``result()`` of a function whose job did not succeed: ``status`` (its final Status,
    with the cause), ``error`` (the application error dispatch captured) and ``remote``: the
    exception the function raised on a rank (type, message, traceback, and the exception
    itself, also this error's ``__cause__``, when it could be pickled back); None when the
    job ended without one (cancelled, preempted with no recovery, out of memory...)."""

    error_code = "function-failed"

    def __init__(self, status: Status, remote: RemoteError | None) -> None:
        super().__init__(status)
        self.remote = remote
        if status.state is State.CANCELLED:
            self.args = (f"job {status.job} ({status.name}) was cancelled",)
        if remote is not None:
            self.args = (f"{self.args[0]}; remote exception on rank {remote.rank}: "
                         f"{remote.one_line()}\n{remote.traceback.rstrip()}",)
            self.__cause__ = remote.exception


class ResultMissing(NotFound):
    """The job succeeded but its return value is not in the call folder (removed?)."""


R = TypeVar("R")


class FunctionJob(Generic[R]):
    """A submitted function's job. ``job`` is the ``dispatch.Job`` (id, store, every method of
    the Python API); inside ``Executor.batch()`` it exists only once the block has ended."""

    def __init__(self, folder: Path, task: int | None = None, job: Job | None = None) -> None:
        self.folder = folder
        self.task = task  # its item of a map_array run as a Slurm array
        self._job = job

    def __repr__(self) -> str:
        which = "not submitted yet" if self._job is None else repr(self._job.id)
        task = "" if self.task is None else f", task={self.task}"
        return f"FunctionJob({which}{task})"

    @property
    def job(self) -> Job:
        if self._job is None:
            raise StateConflict("this function is submitted when its executor.batch() block "
                                "ends; it has no job yet")
        return self._job

    @property
    def id(self) -> str:
        return self.job.id

    def _names(self) -> Names:
        return Names(self.folder, self.id, self.task)

    # ---- the Python API's methods, on the job -------------------------------------------
    def status(self) -> Status:
        return self.job.status()

    def wait(self, timeout: float | None = None, *, poll: float = WAIT_POLL_S,
             supervise: bool = True) -> Status:
        return self.job.wait(timeout, poll=poll, supervise=supervise)

    def cancel(self) -> Status:
        """Ask for the job to be cancelled (``StateConflict`` if it is finished)."""
        return self.job.cancel()

    def history(self) -> list[HistoryLine]:
        return self.job.history()

    def logs(self, follow: bool = False) -> Iterator[str]:
        return self.job.logs(follow)

    # ---- submitit's ------------------------------------------------------------------------
    def done(self) -> bool:
        """Whether the job's outcome is committed. When it is not, this call supervises the
        job for one pass (as ``wait`` does), so a loop of ``done()`` moves it on."""
        if self._outcome() is not None:
            return True
        try:
            self.job.wait(timeout=0)
        except TimeoutError:
            return False
        return True

    def result(self, timeout: float | None = None, *, poll: float = WAIT_POLL_S) -> R:
        """Wait for the job (supervising it, as ``Job.wait``) and return rank 0's return
        value. Raises ``FunctionFailed`` (a ``JobFailed``) when the job did not succeed,
        carrying the cause and the remote exception; ``TimeoutError`` after ``timeout``;
        ``DamagedFile`` (a ``DispatchError``, naming the file) for a result or exception file
        that cannot be read back: over its bound (refused from its size, unread), cut short,
        not a pickle, or one that refers to a module this process cannot import."""
        final = self.job.wait(timeout, poll=poll)
        if final.state is State.SUCCEEDED or self.task is not None:
            # A task of an array returns its value even when another task failed the array.
            found, value = read_pickle(self._names().result(self._submission()),
                                       MOST_RESULT_BYTES)
            if found:
                return cast(R, value)
            if final.state is State.SUCCEEDED:
                raise ResultMissing(f"job {self.id} succeeded but its return value is not "
                                    f"in {self.folder}")
        raise FunctionFailed(final, self._remote_error())

    def results(self, ranks: int, timeout: float | None = None, *,
                poll: float = WAIT_POLL_S) -> list[R]:
        """Every rank's return value, rank 0 first, for a job whose ranks all write theirs
        back (``DISPATCH_FN_RESULTS=every`` in its env). Waits and raises as ``result``."""
        values = [self.result(timeout, poll=poll)]
        submission = self._submission()
        for rank in range(1, ranks):
            path = self._names().result(submission, rank)
            found, value = read_pickle(path, MOST_RESULT_BYTES)
            if not found:
                raise ResultMissing(f"job {self.id} succeeded but rank {rank}'s return value "
                                    f"is not in {self.folder} ({path.name})")
            values.append(cast(R, value))
        return values

    def exception(self, timeout: float | None = None, *,
                  poll: float = WAIT_POLL_S) -> FunctionFailed | None:
        """Wait as ``result`` does; the error ``result`` would raise, or None on success."""
        try:
            self.result(timeout, poll=poll)
        except FunctionFailed as err:
            return err
        return None

    def stdout(self, rank: int = 0) -> str | None:
        """What rank ``rank`` wrote to its stdout in the latest submission that ran it (None
        when there is none yet)."""
        return self._output(rank, "stdout")

    def stderr(self, rank: int = 0) -> str | None:
        return self._output(rank, "stderr")

    # ---- reading the record and the folder -------------------------------------------------
    def _outcome(self) -> object | None:
        with _open(self.job.store) as service:
            return service.job(self.id).outcome

    def _submission(self) -> int:
        with _open(self.job.store) as service:
            current = service.job(self.id).current
        return 0 if current is None else current.number

    def _remote_error(self) -> RemoteError | None:
        names = self._names()
        for path in names.errors(self._submission()):
            found, error = read_pickle(path, MOST_RESULT_BYTES)
            if found and isinstance(error, RemoteError):
                return error
        return None

    def _output(self, rank: int, stream: str) -> str | None:
        names = self._names()
        for n in range(self._submission(), 0, -1):
            path = names.output(n, rank, stream)
            data = read_tail(path, MOST_OUTPUT_BYTES)
            if data is not None:
                return data.decode(errors="replace")
        return None
