"""Reading the application's own error off disk (the shell around core/app_error.py).

Two places hold it: torchelastic's error file, which dispatch points each node's launcher
at (``TORCHELASTIC_ERROR_FILE``: a file of dispatch's own, per submission and node, under
the job's state or output directory), and the end of the failing node's output. Both are
read bounded, and the error file only when it is plainly the one dispatch named: a regular
file opened without following a link, with one link, owned by this user, written after the
execution started and not over the size bound. Anything else is ignored with a note (the
cause is never touched: DESIGN "Three voices, never mixed").
"""

from __future__ import annotations

import os
import stat
from datetime import datetime
from pathlib import Path

from dispatch.core.app_error import (
    MOST_ERROR_FILE_BYTES,
    AppError,
    ErrorSource,
    NotAnErrorFile,
    from_error_file,
    from_output,
    parse_error_file,
    reduce_output,
)
from dispatch.errors import BadInput
from dispatch.support.files import read_at_most
from dispatch.support.tails import last_lines_start

ERROR_FILE_VAR = "TORCHELASTIC_ERROR_FILE"
# The end of a node's output read for its error: at most this many lines and bytes.
TAIL_LINES = 200
TAIL_BYTES = 64 * 1024


class Ignored(BadInput):
    """An error file dispatch does not trust (the job's to write, so input like any other);
    the message says why (dispatch's note)."""


def read_error_file(path: Path, *, started_at: datetime | None,
                    uid: int | None = None) -> bytes | None:
    """The bytes of the error file at ``path``; None when there is none (the launcher wrote
    none: no ``@record``, a signal). Raises Ignored for one that is not plainly ours."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as err:
        if err.errno == 40:  # ELOOP: the name is a symbolic link
            raise Ignored(f"{path} is a symbolic link") from None
        raise Ignored(f"{path} cannot be opened: {err.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Ignored(f"{path} is not a regular file")
        if st.st_nlink != 1:
            raise Ignored(f"{path} has {st.st_nlink} links: another job's file")
        if st.st_uid != (os.getuid() if uid is None else uid):
            raise Ignored(f"{path} belongs to uid {st.st_uid}, not to dispatch's user")
        if started_at is not None and st.st_mtime < started_at.timestamp() - 1.0:
            raise Ignored(f"{path} was written before this execution started: another "
                          "execution's file")
        if st.st_size > MOST_ERROR_FILE_BYTES:
            raise Ignored(f"{path} holds {st.st_size} bytes, more than the "
                          f"{MOST_ERROR_FILE_BYTES} an error file may")
        return read_at_most(fd, MOST_ERROR_FILE_BYTES + 1)
    finally:
        os.close(fd)


def output_tail(path: Path) -> str | None:
    """The last lines of one node's output (bounded); None when there is no such file.
    Opened without following a link: a node log is a file of dispatch's own."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
            return None
        end = fh.seek(0, os.SEEK_END)
        start = max(last_lines_start(fh, TAIL_LINES), end - TAIL_BYTES)
        fh.seek(start)
        return fh.read(TAIL_BYTES).decode(errors="replace")


def capture(*, node: str, error_file: Path | None, output: Path | None,
            started_at: datetime | None, rank: int | None = None,
            exit_code: int | None = None, signum: int | None = None,
            at: datetime | None = None) -> AppError | None:
    """The failing node's error: from its error file when one is there and trusted, else
    from the end of its output. None when neither holds anything."""
    note = ""
    text = output_tail(output) if output is not None else None
    if error_file is not None:
        try:
            data = read_error_file(error_file, started_at=started_at)
            if data is not None:
                # The error file names no rank; torchrun's "Root Cause" block in the
                # output does.
                told = reduce_output(text) if text else None
                return from_error_file(
                    parse_error_file(data), node=node,
                    rank=told.rank if told is not None and told.rank is not None else rank,
                    local_rank=told.local_rank if told is not None else None,
                    exit_code=exit_code, signum=signum, at=at)
        except Ignored as err:
            note = f"the error file was ignored: {err}"
        except NotAnErrorFile as err:
            note = f"the error file was ignored: {error_file}: {err}"
    if not text and not note and signum is None and exit_code is None:
        return None
    return from_output(text or "", node=node, source=ErrorSource.OUTPUT_TAIL, rank=rank,
                       exit_code=exit_code, signum=signum, at=at, note=note)
