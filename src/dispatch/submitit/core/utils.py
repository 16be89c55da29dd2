"""submitit's errors, ``DelayedSubmission`` and ``JobPaths``, as dispatch's.

``FailedJobError`` (the function raised: its remote traceback) and ``UncompletedJobError``
(the job ended without a value or an exception: cancelled, preempted with no recovery, out of
memory, ...) are submitit's ``RuntimeError`` subclasses and also ``DispatchError``s: each
carries the job's final ``status`` (state and cause), the application ``error`` dispatch
recorded and the ``remote`` exception (type, words, traceback; the exception itself is the
``__cause__`` when it could be pickled back)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dispatch.core.model import Cause, Status
from dispatch.errors import DispatchError
from dispatch.fn.calls import RemoteError


class _JobError(DispatchError, RuntimeError):
    error_code = "job-failed"

    def __init__(
        self, message: str, status: Status | None = None, remote: RemoteError | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.remote = remote
        self.error = None if status is None else status.error
        if remote is not None and remote.exception is not None:
            self.__cause__ = remote.exception

    @property
    def cause(self) -> Cause | None:
        """Why the job ended (dispatch's cause: kind, provenance, the scheduler's words)."""
        return None if self.status is None else self.status.cause


class FailedJobError(_JobError):
    """The submitted function raised: the message holds its remote traceback."""

    error_code = "failed-job"


class UncompletedJobError(_JobError):
    """The job ended without a return value or an exception of the function's."""

    error_code = "uncompleted-job"


class DelayedSubmission:
    """A function with its arguments, to be called later: what ``checkpoint()`` returns to
    say what the next submission runs, and what ``job.submission()`` gives back."""

    def __init__(self, function: Any, *args: Any, **kwargs: Any) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self._result: Any = None
        self._done = False

    def result(self) -> Any:
        """Call the function (once) and return its value."""
        if not self._done:
            self._result = self.function(*self.args, **self.kwargs)
            self._done = True
        return self._result

    def done(self) -> bool:
        return self._done

    def __repr__(self) -> str:
        return f"DelayedSubmission({self.function!r}, *{self.args!r}, **{self.kwargs!r})"


@dataclass(frozen=True)
class JobPaths:
    """Where a job's files are: ``folder`` is its call folder (under the executor's folder),
    with the submitted call, the result, and each task's stdout and stderr copies."""

    folder: Path
    submitted_pickle: Path
    result_pickle: Path
    stdout: Path
    stderr: Path
