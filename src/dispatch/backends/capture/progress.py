"""Reading the training's progress file (G3; the shell around core/progress.py).

dispatch names one file per submission and node (``DISPATCH_PROGRESS_FILE``) and reads only
its end, bounded, and only when it is plainly the one dispatch named: a regular file opened
without following a link, with one link, owned by this user, not over the size bound.
Anything else is ignored with a note; an end and its cause are never touched.
"""

from __future__ import annotations

import errno
import os
import stat
from datetime import datetime
from pathlib import Path

from dispatch.core.progress import (
    MOST_PROGRESS_FILE_BYTES,
    TAIL_BYTES,
    NotAProgressFile,
    Progress,
    latest_checkpoint,
)
from dispatch.support.files import read_at_most


def read_progress(path: Path, *, started: datetime | None, now: datetime,
                  uid: int | None = None) -> Progress:
    """The latest checkpoint in the progress file at ``path``; an empty Progress when there
    is none yet, one with a note (and no checkpoint) when the file is not trusted."""
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return Progress()
    except OSError as err:
        if err.errno == errno.ELOOP:
            return Progress(note=f"progress file {path} ignored: it is a symbolic link")
        return Progress(note=f"progress file {path} ignored: {err.strerror}")
    try:
        st = os.fstat(fd)
        why = _untrusted(st, uid)
        if why:
            return Progress(note=f"progress file {path} ignored: {why}")
        start = max(0, st.st_size - TAIL_BYTES)
        os.lseek(fd, start, os.SEEK_SET)
        tail = read_at_most(fd, TAIL_BYTES)
        try:
            found = latest_checkpoint(tail, whole=start == 0, seen_at=now, started=started)
        except NotAProgressFile as err:
            return Progress(note=f"progress file {path} ignored: {err}")
        return Progress(checkpoint=found)
    except OSError as err:
        return Progress(note=f"progress file {path} ignored: {err.strerror}")
    finally:
        os.close(fd)


def _untrusted(st: os.stat_result, uid: int | None) -> str:
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if st.st_nlink != 1:
        return f"it has {st.st_nlink} links: another job's file"
    if st.st_uid != (os.getuid() if uid is None else uid):
        return f"it belongs to uid {st.st_uid}, not to dispatch's user"
    if st.st_size > MOST_PROGRESS_FILE_BYTES:
        return (f"it holds {st.st_size} bytes, more than the {MOST_PROGRESS_FILE_BYTES} a "
                "progress file may")
    return ""
