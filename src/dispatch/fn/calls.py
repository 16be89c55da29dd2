"""A submitted call's folder: what the submitter writes there, what each node writes back.

One folder per submitted call (``<executor folder>/<name>-<token>``, mode 0700), holding

    call.pkl                          the call: sys.path, then the cloudpickled function and
                                      arguments (map_array's item N: call.tN.pkl)
    <job>.checkpoint.pkl              what a Checkpointable asked to resume with (rank 0)
    <job>.s<N>.result.pkl             rank 0's return value, submission N
    <job>.s<N>.r<R>.error.pkl         rank R's exception (type, message, traceback)
    <job>.s<N>.r<R>.stdout|stderr     a copy of rank R's output

Every file is 0600, written whole (dispatch.support.files.write_atomic: a fresh temp file opened
O_EXCL|O_NOFOLLOW, then a rename) and read through an O_NOFOLLOW descriptor, its size checked
before a byte is read. The folder is ours alone (0700): a pickle there is trusted because
nobody else can write it, so ``read_pickle`` refuses a folder or file another user owns or
others can write; the executor's folder above it must be ours (or root's) and, when others
can write it, sticky (``check_executor_folder``). A file that cannot be read back (over its
bound, cut short, garbage, a pickle of a module this process lacks) is a ``DamagedFile``
naming it.

The call is unpickled with the submitter's ``sys.path`` (``decode_call``, ``import_path``):
a function pickled by reference (a module of yours) is imported by the same name from the
same place as where ``submit`` ran. The bootstrap has imported dispatch and its dependencies
before (isolated: dispatch/support/isolated.py), so nothing on that path can stand in for
them; and a
directory on it that other users can write (a shared scratch directory, the job's working
directory there) goes after the interpreter's own: a module planted there is never imported
in place of the standard library's or an installed one, while your own modules there are
still found.
"""

from __future__ import annotations

import os
import pickle
import stat
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cloudpickle

from dispatch.errors import BadInput, DamagedFile, DispatchError, NotFound
from dispatch.support.files import read_at_most, write_atomic
from dispatch.support.trusted_folders import FIX, Untrusted
from dispatch.support.trusted_folders import check_folder as check_folder_rule

# A call (the function, its arguments and what it closes over) and a result travel through a
# shared folder: past these sizes a data set was captured by mistake (pass a path instead).
MOST_CALL_BYTES = 256 * 1024**2
MOST_RESULT_BYTES = 256 * 1024**2
# A remote exception's words and traceback, as kept (the end of a longer traceback).
MOST_TRACEBACK_CHARS = 64 * 1024

# A lower bound for one executor's calls or results, through the environment (a spec's env
# reaches the node): never above the ones here.
MOST_CALL_VAR = "DISPATCH_FN_MOST_CALL_BYTES"
MOST_RESULT_VAR = "DISPATCH_FN_MOST_RESULT_BYTES"

CALL = "call.pkl"
FILE_MODE = 0o600
FOLDER_MODE = 0o700


class NotPicklable(BadInput, TypeError):
    """The function or one of its arguments cannot be pickled (cloudpickle's words)."""


class CallTooLarge(BadInput, ValueError):
    """The pickled call is over ``MOST_CALL_BYTES``."""


class ResultTooLarge(DispatchError):
    """A rank's pickled return value is over the bound (raised in the node; the submitter
    sees it as the remote exception)."""


class UnsafeFolder(BadInput):
    """A call folder or file that is not plainly ours (a link, another owner, writable by
    others): nothing is read from it."""


@dataclass(frozen=True)
class Call:
    """A function and the arguments to call it with (what submitit calls a
    DelayedSubmission): what ``Checkpointable.checkpoint`` returns to resume with."""

    fn: Any
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] | None = None

    def __call__(self) -> Any:
        return self.fn(*self.args, **(self.kwargs or {}))


@dataclass(frozen=True)
class RemoteError:
    """A rank's exception as it was raised in the job: its type's qualified name, its words,
    its formatted traceback, and the exception itself when it could be pickled back."""

    rank: int
    type: str
    message: str
    traceback: str
    exception: BaseException | None = None

    def one_line(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # The exception travels as a pickle of its own: one whose class the reader cannot
        # import (a module only the node has) leaves it None, not the whole error unread.
        inner = None
        if self.exception is not None:
            try:
                inner = cloudpickle.dumps(self.exception, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception:
                inner = None  # its type, words and traceback still travel
        return _remote_error, (self.rank, self.type, self.message, self.traceback, inner)


def _remote_error(rank: int, kind: str, message: str, text: str,
                  inner: bytes | None) -> RemoteError:
    """A RemoteError as unpickled: the exception rebuilt when this process can."""
    exception = None
    if inner is not None:
        try:
            exception = pickle.loads(inner)
        except Exception:
            exception = None  # its class is not importable here, say
    if not isinstance(exception, BaseException):
        exception = None
    return RemoteError(rank=rank, type=kind, message=message, traceback=text,
                       exception=exception)


def dumps_bounded(value: object, most: int, what: str,
                  too_large: type[DispatchError] | None = None) -> bytes:
    """``value`` cloudpickled; NotPicklable with the pickler's words, ``too_large``
    (CallTooLarge by default) past ``most`` bytes."""
    try:
        data: bytes = cloudpickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as err:  # cloudpickle raises what the object's reducer raises
        raise NotPicklable(f"{what} cannot be pickled: {type(err).__name__}: {err}") from err
    if len(data) > most:
        raise (too_large or CallTooLarge)(
            f"{what} pickles to {len(data)} bytes, more than the {most} it may (pass a path "
            "to the data instead of the data)")
    return data


def _most(var: str, most: int) -> int:
    text = os.environ.get(var, "")
    return min(int(text), most) if text.isdigit() else most


def most_call_bytes() -> int:
    return _most(MOST_CALL_VAR, MOST_CALL_BYTES)


def most_result_bytes() -> int:
    return _most(MOST_RESULT_VAR, MOST_RESULT_BYTES)


def encode_call(call: Call, sys_path: list[str] | None = None) -> bytes:
    """The bytes of call.pkl: the submitter's sys.path (so a function of a module the job can
    import is found by the same name), then the call, pickled apart so the path is set before
    the call is unpickled."""
    inner = dumps_bounded(call, most_call_bytes(), "the call (function and arguments)")
    path = list(sys.path if sys_path is None else sys_path)
    return pickle.dumps({"sys_path": path, "call": inner}, protocol=pickle.HIGHEST_PROTOCOL)


def import_path(installed: Sequence[str], wanted: Sequence[str],
                open_to_others: Callable[[str], bool]) -> list[str]:
    """The ``sys.path`` a call is unpickled and run with. ``wanted``: the submitter's
    ``sys.path``, then the job's working directory and PYTHONPATH entries; ``installed``:
    this interpreter's own (isolated) path. ``wanted`` keeps its order, then come the
    installed entries it lacks, and last every entry ``open_to_others`` says other users can
    write, so nothing planted there shadows a module found elsewhere. Pure."""
    ours: list[str] = []
    shared: list[str] = []
    seen: set[str] = set()
    for entry in wanted:
        if entry not in seen:
            seen.add(entry)
            (shared if open_to_others(entry) else ours).append(entry)
    return [*ours, *(e for e in installed if e not in seen), *shared]


def open_to_others(entry: str) -> bool:
    """Whether another user can put a module in the path entry ``entry`` (a directory or a
    zip file; '' is the working directory): it is not ours nor root's, or everybody can write
    it (sticky or not: a new name can be created). One that is not there counts: whoever makes
    it chooses what it holds."""
    try:
        st = os.stat(entry or os.curdir)
    except OSError:
        return True
    return st.st_uid not in (0, os.getuid()) or bool(st.st_mode & stat.S_IWOTH)


def decode_call(data: bytes, job_path: Sequence[str] = ()) -> Call:
    """The call in ``data`` (call.pkl's bytes), unpickled once ``sys.path`` is
    ``import_path`` of the submitter's path and ``job_path``."""
    outer = pickle.loads(data)
    sys.path[:] = import_path(list(sys.path), [*outer["sys_path"], *job_path],
                              open_to_others)
    call = pickle.loads(outer["call"])
    if not isinstance(call, Call):
        raise TypeError(f"a call file holds a {type(call).__name__}, not a Call")
    return call


def make_folder(path: Path) -> Path:
    """Create the call folder ``path`` (0700, parents as needed); refuse one that exists, or
    an executor folder (its parent) another user could put things in."""
    path.parent.mkdir(parents=True, exist_ok=True)
    check_executor_folder(path.parent)
    os.mkdir(path, FOLDER_MODE)
    os.chmod(path, FOLDER_MODE)  # whatever the umask
    return path


def check_folder(path: Path) -> None:
    """Refuse a folder that is a link, not ours, or open to others."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        raise NotFound(f"call folder {path} does not exist") from None
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolder(f"call folder {path} is not a directory (a link?)")
    if st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise UnsafeFolder(f"call folder {path} is not ours alone (owner uid {st.st_uid}, "
                           f"mode {stat.S_IMODE(st.st_mode):o}; want 0700)")


def check_executor_folder(path: Path) -> None:
    """Refuse an executor's folder (where the call folders go) that is not a directory, that
    another user owns (root excepted), or that others can write without the sticky bit
    (anybody could move a call folder away and put another in its place): the rule of
    dispatch.support.trusted_folders. A link is followed, and must be ours (or root's) too.
    Nothing is refused when it does not exist yet (``make_folder`` creates it as ours)."""
    try:
        check_folder_rule(path)
    except Untrusted as err:
        raise UnsafeFolder(f"executor folder {path} {err.problem}: its call folders could be "
                           f"taken over; {FIX}") from None


def write_file(path: Path, data: bytes) -> None:
    write_atomic(path, data, mode=FILE_MODE)


def _open_ours(path: Path, *, private: bool) -> int | None:
    """A descriptor of ``path`` opened without following a link (None when absent), after
    checking it is a regular file of ours (``private``: and closed to others); UnsafeFolder
    otherwise. The caller closes it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == 40:  # ELOOP
            raise UnsafeFolder(f"{path} is a symbolic link") from None
        raise
    try:
        st = os.fstat(fd)
        if (not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid()
                or (private and st.st_mode & 0o077)):
            raise UnsafeFolder(f"{path} is not a file of ours{' alone' if private else ''} "
                               f"(mode {stat.S_IMODE(st.st_mode):o}, owner uid {st.st_uid})")
    except BaseException:
        os.close(fd)
        raise
    return fd


def read_file(path: Path, most: int) -> bytes | None:
    """The bytes of ``path`` (None when absent), read without following a link; UnsafeFolder
    for a link, another owner, a mode open to others; DamagedFile past ``most``."""
    fd = _open_ours(path, private=True)
    if fd is None:
        return None
    try:
        size = os.fstat(fd).st_size  # before a byte is read: a huge file costs nothing
        if size > most:
            raise DamagedFile(f"{path} holds {size} bytes, more than the {most} it may")
        data = read_at_most(fd, most + 1)
    finally:
        os.close(fd)
    if len(data) > most:  # it grew after the check
        raise DamagedFile(f"{path} holds more than the {most} bytes it may")
    return data


def read_tail(path: Path, most: int) -> bytes | None:
    """The last ``most`` bytes of ``path`` (None when absent), read as ``read_file`` reads
    (a file of ours, not necessarily closed to others: a node's output)."""
    fd = _open_ours(path, private=False)
    if fd is None:
        return None
    try:
        os.lseek(fd, max(0, os.fstat(fd).st_size - most), os.SEEK_SET)
        return read_at_most(fd, most)
    finally:
        os.close(fd)


def read_pickle(path: Path, most: int) -> tuple[bool, Any]:
    """(True, the unpickled value) or (False, None) when there is no such file; DamagedFile,
    naming it, for one that cannot be read back."""
    check_folder(path.parent)
    data = read_file(path, most)
    if data is None:
        return False, None
    try:
        return True, pickle.loads(data)
    except Exception as err:  # unpickling raises whatever a damaged stream makes it raise
        raise DamagedFile(f"{path} cannot be read back ({_why(err)}): "
                          f"{type(err).__name__}: {err}") from err


def _why(err: Exception) -> str:
    if isinstance(err, (ImportError, AttributeError)):
        return "it refers to code this process cannot import"
    if isinstance(err, EOFError) or "truncated" in str(err):
        return "it is cut short"
    return "it is not a pickle dispatch wrote"


@dataclass(frozen=True)
class Names:
    """The file names of one job's submission in a call folder (``task``: a map_array item
    run as one task of a Slurm array)."""

    folder: Path
    job: str
    task: int | None = None

    def _t(self) -> str:
        return "" if self.task is None else f".t{self.task}"

    def call(self) -> Path:
        return self.folder / (CALL if self.task is None else f"call.t{self.task}.pkl")

    def checkpoint(self) -> Path:
        return self.folder / f"{self.job}{self._t()}.checkpoint.pkl"

    def result(self, submission: int, rank: int = 0) -> Path:
        """Rank 0's return value; another rank's (``DISPATCH_FN_RESULTS=every``) beside it."""
        at = "" if rank == 0 else f".r{rank}"
        return self.folder / f"{self.job}{self._t()}.s{submission}{at}.result.pkl"

    def error(self, submission: int, rank: int) -> Path:
        return self.folder / f"{self.job}{self._t()}.s{submission}.r{rank}.error.pkl"

    def errors(self, submission: int) -> list[Path]:
        """The error files of a submission, lowest rank first."""
        prefix = f"{self.job}{self._t()}.s{submission}.r"
        found = []
        for entry in os.listdir(self.folder):
            if entry.startswith(prefix) and entry.endswith(".error.pkl"):
                rank = entry[len(prefix):-len(".error.pkl")]
                if rank.isdigit():
                    found.append((int(rank), self.folder / entry))
        return [p for _, p in sorted(found)]

    def output(self, submission: int, rank: int, stream: str) -> Path:
        return self.folder / f"{self.job}{self._t()}.s{submission}.r{rank}.{stream}"
