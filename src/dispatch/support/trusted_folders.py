"""The one rule for a folder dispatch writes into (an Executor's folder, submitit's base and
``%j`` folders, a local root and its folders): it is ours (or root's, like ``/tmp``), and
nobody else can write it unless it is sticky.

Another user who can write a folder can rename what dispatch put there and put a link in its
place: a log line appended through it to a file of theirs choosing, a job's folder pointing
into theirs, a local root's objects moved away (their job read as ended). With the sticky bit
(``/tmp``) they cannot move or remove what is ours, and whatever they make there first is
theirs, which this rule refuses in turn. A folder that its group can write counts as one
others can write, unless that group is the user's own private group (a group of their name
with no other members: what ``umask 002`` systems give every user).

Only the folder itself is checked (and the link, when it is one), never the folders above
it: a folder of ours inside ``/tmp`` or a shared project directory is fine. Files are
opened inside a checked folder through its descriptor, never following a link.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
from pathlib import Path

from dispatch.errors import BadInput

FIX = ("use a folder of your own that nobody else can write (chmod go-w it), or one with "
       "the sticky bit, like /tmp")


class Untrusted(BadInput):
    """A folder (or a file in one) another user could change under dispatch: ``problem``
    says why. Each caller says it in its own words (and error family) with ``FIX``."""

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(f"{path} {problem}: {FIX}")
        self.path = path
        self.problem = problem


def _trusted_uid(uid: int) -> bool:
    return uid in (0, os.getuid())


def private_group(gid: int) -> bool:
    """Whether ``gid`` is this user's own group: the user's primary group, named after the
    user, with no other member."""
    if gid != os.getgid():
        return False
    try:
        group = grp.getgrgid(gid)
        user = pwd.getpwuid(os.getuid())
    except KeyError:
        return False
    return group.gr_name == user.pw_name and set(group.gr_mem) <= {user.pw_name}


def stat_problem(st: os.stat_result) -> str | None:
    """Why a folder with this status is not ours alone to write (None: it is)."""
    if not _trusted_uid(st.st_uid):
        return f"is owned by another user (uid {st.st_uid})"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a directory"
    if st.st_mode & stat.S_ISVTX:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if st.st_mode & stat.S_IWOTH:
        return f"can be written by everybody and is not sticky (mode {mode:o})"
    if st.st_mode & stat.S_IWGRP and not private_group(st.st_gid):
        return f"can be written by its group (gid {st.st_gid}) and is not sticky (mode {mode:o})"
    return None


def check_folder(path: Path) -> None:
    """Refuse (``Untrusted``) a folder that another user owns, that others can write without
    the sticky bit, or that is not a directory. A link is followed, and must itself be ours
    (or root's). Nothing is refused when there is nothing there."""
    try:
        link = os.lstat(path)
        st = os.stat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise Untrusted(path, f"cannot be looked at ({err.strerror or err})") from None
    if stat.S_ISLNK(link.st_mode) and not _trusted_uid(link.st_uid):
        raise Untrusted(path, f"is a link owned by another user (uid {link.st_uid})")
    problem = stat_problem(st)
    if problem is not None:
        raise Untrusted(path, problem)


def make_folders(top: Path, path: Path) -> None:
    """``path`` and every folder between ``top`` (checked by the caller) and it, made where
    missing (as ours) and each checked (``Untrusted``). ``path`` must be under ``top``."""
    here = top
    for part in path.relative_to(top).parts:
        here = here / part
        try:
            os.mkdir(here)
        except FileExistsError:
            pass
        check_folder(here)


def open_folder(path: Path) -> int:
    """A descriptor of the folder ``path`` (a link of ours followed), checked on the
    descriptor itself: what it names cannot be swapped between the check and the use. The
    caller closes it."""
    check_folder(path)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        problem = stat_problem(os.fstat(fd))
        if problem is not None:
            raise Untrusted(path, problem)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_appending(folder: Path, name: str, mode: int = 0o600) -> int:
    """A descriptor to append to ``folder/name`` (made ``mode`` when missing): the folder
    checked (``open_folder``), the file opened in it without following a link, and refused
    unless it is a regular file of ours with no other name (a hard link). The caller closes
    it."""
    dir_fd = open_folder(folder)
    path = folder / name
    try:
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                     | os.O_NONBLOCK | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise Untrusted(path, "is a symbolic link") from None
        if err.errno == errno.ENXIO:  # a FIFO nobody reads
            raise Untrusted(path, "is not a regular file") from None
        raise OSError(err.errno, err.strerror, str(path)) from None  # named in full
    finally:
        os.close(dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted(path, "is not a regular file")
        if st.st_uid != os.getuid():
            raise Untrusted(path, f"is owned by another user (uid {st.st_uid})")
        if st.st_nlink != 1:
            raise Untrusted(path, f"has {st.st_nlink} names (a hard link)")
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd
