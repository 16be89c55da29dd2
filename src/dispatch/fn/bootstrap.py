"""What every node of a function's job runs: ``python -m dispatch.fn FOLDER [--array]``,
isolated (``python -I``, dispatch/support/isolated.py: the Executor's command).

Isolated, the interpreter puts neither the job's working directory nor a PYTHONPATH on the
path, so dispatch and what it imports (cloudpickle, ...) come from the installation that
submitted the call, never from a ``dispatch/`` or ``cloudpickle.py`` someone left in a shared
working directory. Only then is the path made the call's (calls.import_path): the
submitter's ``sys.path``, then the working directory and the job's PYTHONPATH, so your own
modules are imported as they were where ``submit`` ran; a directory of these that other
users can write goes after the interpreter's own. Of the job's other PYTHON* variables,
which ``-I`` ignores, PYTHONUNBUFFERED (as line-buffered output), PYTHONFAULTHANDLER and
PYTHONDONTWRITEBYTECODE are applied here; the ones that only act at start-up
(PYTHONHASHSEED, PYTHONOPTIMIZE, PYTHONUTF8, PYTHONWARNINGS, ...) are not.

It sets the distributed environment (distributed.py), copies its output to the call folder
(stdout and stderr per rank, as well as to the job's own log), loads the call (the stored
checkpoint when a Checkpointable left one, else the submitted call), runs it, and writes back
rank 0's return value (every rank's with DISPATCH_FN_RESULTS=every), or this rank's
exception with its traceback (also as a torchelastic
error file where dispatch named one, so the job's application error says it:
backends/capture/app_error.py).
The exit status is 0 on success, 1 when the call raised.

With a checkpoint hook, SIGTERM (the scheduler's stop before SIGKILL) asks the callable, on
rank 0, for its checkpoint and stores it before the process exits.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
import traceback
from collections.abc import Mapping
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, TextIO

from dispatch.errors import DispatchError
from dispatch.fn.calls import (
    MOST_CALL_BYTES,
    MOST_RESULT_BYTES,
    MOST_TRACEBACK_CHARS,
    Call,
    Names,
    RemoteError,
    ResultTooLarge,
    check_folder,
    decode_call,
    dumps_bounded,
    encode_call,
    most_result_bytes,
    read_file,
    write_file,
)
from dispatch.fn.checkpoint import checkpoint_hook
from dispatch.fn.distributed import distributed_environment, tasks_per_node_environment

RESULTS_VAR = "DISPATCH_FN_RESULTS"  # "every": each rank writes its return value back
ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"  # as capture/app_error.py (not imported: heavier)


class Tee:
    """Copies what the function writes to ``sys.stdout`` and ``sys.stderr`` into a file per
    stream, while every write still reaches the job's log first, in order (a copy at the
    Python level: what a subprocess or a C library writes to the descriptors directly is in
    the job's log only)."""

    def __init__(self, files: dict[str, Path]) -> None:
        self.copies: list[tuple[str, TextIO, TextIO]] = []
        for name, path in files.items():
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            copy = open(fd, "w", encoding="utf-8", errors="replace", buffering=1)  # noqa: SIM115
            original = getattr(sys, name)
            setattr(sys, name, _Both(original, copy))
            self.copies.append((name, original, copy))

    def close(self) -> None:
        for name, original, copy in self.copies:
            for stream in (original, copy):
                try:
                    stream.flush()
                except (OSError, ValueError):
                    pass
            setattr(sys, name, original)
            copy.close()
        self.copies = []


class _Both(io.TextIOBase):
    """A text stream writing to ``first`` (the job's log), then to ``copy``."""

    def __init__(self, first: TextIO, copy: TextIO) -> None:
        self.first = first
        self.copy = copy

    def write(self, text: str) -> int:
        n = self.first.write(text)
        try:
            self.copy.write(text)
        except (OSError, ValueError):
            pass  # a full disk loses the copy, never the job
        return n

    def flush(self) -> None:
        self.first.flush()
        try:
            self.copy.flush()
        except (OSError, ValueError):
            pass

    def fileno(self) -> int:
        return self.first.fileno()

    def isatty(self) -> bool:
        return self.first.isatty()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return self.first.encoding


def remote_error(err: BaseException, rank: int) -> RemoteError:
    kind = type(err)
    name = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    text = "".join(traceback.format_exception(type(err), err, _user_frames(err)))
    text = text[-MOST_TRACEBACK_CHARS:]
    try:
        dumps_bounded(err, MOST_RESULT_BYTES, "the exception")
        kept: BaseException | None = err
    except Exception:
        kept = None  # its type, words and traceback still travel
    return RemoteError(rank=rank, type=name, message=str(err)[:MOST_TRACEBACK_CHARS],
                       traceback=text, exception=kept)


_OURS = (os.path.dirname(__file__),)


def _user_frames(err: BaseException) -> TracebackType | None:
    """The traceback from the first frame that is not the bootstrap's own."""
    tb = err.__traceback__
    while tb is not None and tb.tb_next is not None and \
            tb.tb_frame.f_code.co_filename.startswith(_OURS):
        tb = tb.tb_next
    return tb


def write_error(names: Names, submission: int, error: RemoteError) -> None:
    try:
        data = dumps_bounded(error, MOST_RESULT_BYTES, "the exception")
    except Exception:
        data = dumps_bounded(RemoteError(rank=error.rank, type=error.type,
                                         message=error.message, traceback=error.traceback),
                             MOST_RESULT_BYTES, "the exception")
    write_file(names.error(submission, error.rank), data)
    path = os.environ.get(ERROR_FILE_VAR)
    if path:  # torchelastic's format, so the record's application error names it
        doc = {"message": {"message": error.one_line(), "errorCode": None,
                           "extraInfo": {"py_callstack": error.traceback,
                                         "timestamp": str(int(time.time()))}}}
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o600)
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
        except OSError:
            pass  # a courtesy: the error file in the call folder is what result() reads


def load_call(names: Names, job_path: list[str] | None = None) -> tuple[Call, bool]:
    """The call to run and whether it is a stored checkpoint (only from a folder of ours
    alone: a pickle is code), unpickled with the path of ``decode_call``."""
    check_folder(names.folder)
    for path, resumed in ((names.checkpoint(), True), (names.call(), False)):
        data = read_file(path, MOST_CALL_BYTES + 1024**2)
        if data is not None:
            return decode_call(data, job_path or []), resumed
    raise FileNotFoundError(f"no call in {names.folder}")


def job_path(env: Mapping[str, str], cwd: str) -> list[str]:
    """The job's own import path for its code: the working directory, then its PYTHONPATH's
    entries (an empty one is the working directory, as Python reads it)."""
    entries = env.get("PYTHONPATH", "").split(os.pathsep) if env.get("PYTHONPATH") else []
    return [cwd, *(os.path.join(cwd, e) if e else cwd for e in entries)]


def apply_job_settings(env: Mapping[str, str]) -> None:
    """The job's PYTHON* settings an isolated interpreter ignored that still apply now."""
    if env.get("PYTHONUNBUFFERED"):
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, io.TextIOWrapper):
                stream.reconfigure(line_buffering=True, write_through=True)
    if env.get("PYTHONDONTWRITEBYTECODE"):
        sys.dont_write_bytecode = True
    if env.get("PYTHONFAULTHANDLER"):
        import faulthandler

        faulthandler.enable()


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or (len(argv) == 3 and argv[2] != "--array"):
        print("usage: python -m dispatch.fn FOLDER [--array]", file=sys.stderr)
        return 2
    apply_job_settings(os.environ)
    os.environ.update(distributed_environment(os.environ))
    os.environ.update(tasks_per_node_environment(os.environ))
    rank = int(os.environ["RANK"])
    task = int(os.environ["SLURM_ARRAY_TASK_ID"]) if len(argv) == 3 else None
    submission = int(os.environ.get("DISPATCH_SUBMISSION") or 0)
    names = Names(Path(argv[1]), os.environ.get("DISPATCH_JOB_ID") or "0", task)
    try:
        check_folder(names.folder)  # before anything is written there or read from it
    except DispatchError as err:
        print(f"dispatch.fn: {err}", file=sys.stderr)
        return 1
    tee = Tee({"stdout": names.output(submission, rank, "stdout"),
               "stderr": names.output(submission, rank, "stderr")})
    try:
        return run(names, rank, submission, tee, job_path(os.environ, os.getcwd()))
    finally:
        tee.close()


def run(names: Names, rank: int, submission: int, tee: Tee,
        path: list[str] | None = None) -> int:
    try:
        call, resumed = load_call(names, path)
    except Exception as err:
        write_error(names, submission, remote_error(err, rank))
        traceback.print_exc()
        return 1
    if resumed:
        print(f"dispatch.fn: resuming from the checkpoint {names.checkpoint().name}",
              file=sys.stderr, flush=True)
    hook = checkpoint_hook(call.fn)
    if hook is not None:
        signal.signal(signal.SIGTERM, _on_stop(names, rank, call, hook, tee))
    try:
        value = call()
    except SystemExit as err:
        if err.code not in (None, 0):
            return _failed(names, submission, rank, err)
        value = None
    except BaseException as err:  # noqa: BLE001 - every end of the call is written back
        return _failed(names, submission, rank, err)
    if rank == 0 or os.environ.get(RESULTS_VAR) == "every":
        try:
            data = dumps_bounded(value, most_result_bytes(), "the return value",
                                 ResultTooLarge)
        except Exception as err:  # unpicklable or too large: the submitter must hear why
            return _failed(names, submission, rank, err)
        write_file(names.result(submission, rank), data)
    return 0


def _failed(names: Names, submission: int, rank: int, err: BaseException) -> int:
    traceback.print_exception(type(err), err, _user_frames(err))
    write_error(names, submission, remote_error(err, rank))
    return 1


def _on_stop(names: Names, rank: int, call: Call, hook: Any, tee: Tee) -> Any:
    def handler(signum: int, frame: FrameType | None) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # one checkpoint, not two
        if rank == 0:
            try:
                resume = hook(*call.args, **(call.kwargs or {}))
                if resume is not None:
                    if not isinstance(resume, Call):
                        resume = Call(resume)  # a bare callable: called with no arguments
                    write_file(names.checkpoint(), encode_call(resume))
                    print(f"dispatch.fn: stopped; checkpoint stored in "
                          f"{names.checkpoint().name}", file=sys.stderr, flush=True)
            except BaseException:  # noqa: BLE001 - the stop goes on; say why there is none
                print("dispatch.fn: stopped; the checkpoint failed:", file=sys.stderr)
                traceback.print_exc()
        tee.close()
        os._exit(128 + signum)

    return handler
