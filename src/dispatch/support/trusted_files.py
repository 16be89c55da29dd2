"""Files only this user (or root) could have written or chosen, opened for reading: what
dispatch acts on without asking (the server's token file; a kubeconfig, whose exec plugin runs
as this user and whose API server receives the job and its secrets).

A file is trusted when it, every symbolic link met on the way to it and every directory above
it belong to this user or root, and neither the file nor any of those directories can be
written by anybody else. Each directory is held to the one folder rule
(``trusted_folders.stat_problem``): one others can write is accepted when it is sticky, as
/tmp is (nobody else can rename or remove what is in it); a group that is the user's own
private group (``umask 002``) is nobody else, for the file too. The path is walked as the
kernel resolves it, one name at a time with ``lstat``; the file found is then opened without
following a link and must be the very file that was checked (device and inode), so what is
read is what was checked. Nobody else can change a checked directory afterwards.
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Callable

from dispatch.errors import BadInput
from dispatch.support.trusted_folders import private_group, stat_problem

MOST_LINKS = 40  # as Linux's own bound (ELOOP)

_Refuse = Callable[[str], BadInput]


class UntrustedFile(BadInput):
    """A file another user could have written, or chosen by a link or a directory another
    user controls: nothing is read from it. Names the file, the reason and the fix."""


def open_trusted(path: str | os.PathLike[str], what: str, *, follow_links: bool = True,
                 private: bool = False, error: type[BadInput] = UntrustedFile) -> int:
    """A read-only descriptor (O_NONBLOCK: a FIFO cannot hang the caller) of ``path``, a
    regular file no other user can have written or chosen (see the module's words). With
    ``private`` it must also be this user's own (not root's) and closed to group and others
    (a secret); without ``follow_links`` the last name may not be a link. ``error`` (raised
    with ``what path: why; fix``) otherwise; OSError (FileNotFoundError...) when a name on
    the way cannot be read. The caller closes the descriptor."""
    shown = os.fspath(path)

    def refuse(why: str) -> BadInput:
        return error(f"{what} {shown}: {why}")

    me = os.getuid()
    owners = (me,) if private else (0, me)
    full = shown if os.path.isabs(shown) else os.path.join(os.getcwd(), shown)
    todo = [part for part in reversed(full.split("/")) if part not in ("", ".")]
    here = "/"
    _check_directory(here, os.lstat(here), refuse)
    links = 0
    while todo:
        name = todo.pop()
        if name == "..":
            here = os.path.dirname(here)  # ``here`` holds no link: its parent is its parent
            continue
        at = os.path.join(here, name)
        st = os.lstat(at)
        if stat.S_ISLNK(st.st_mode):
            if not todo and not follow_links:
                raise refuse("cannot open: a symbolic link")
            if st.st_uid not in (0, me):
                raise refuse(f"the symbolic link {at} belongs to uid {st.st_uid}, not to "
                             f"{_us(me)}: its owner chooses which file is read; name the file "
                             "itself, or a link of your own")
            links += 1
            if links > MOST_LINKS:
                raise refuse(f"more than {MOST_LINKS} symbolic links on the way (a loop?)")
            target = os.readlink(at)
            if target.startswith("/"):
                here = "/"
            todo.extend(p for p in reversed(target.split("/")) if p not in ("", "."))
            continue
        if not todo:
            return _open_checked(at, st, me, owners, private, refuse)
        if not stat.S_ISDIR(st.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), at)
        _check_directory(at, st, refuse)
        here = at
    raise refuse("not a regular file")


def _us(me: int) -> str:
    return "this user (root)" if me == 0 else f"this user (uid {me}) or root"


def _check_directory(at: str, st: os.stat_result, refuse: _Refuse) -> None:
    problem = stat_problem(st)
    if problem is not None:
        raise refuse(f"the directory {at} {problem}: whoever else can change it can put "
                     f"another file in its place; chmod go-w {at}, or keep the file in a "
                     "directory of your own")


def _open_checked(at: str, seen: os.stat_result, me: int, owners: tuple[int, ...],
                  private: bool, refuse: _Refuse) -> int:
    fd = os.open(at, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if (st.st_dev, st.st_ino) != (seen.st_dev, seen.st_ino):
            raise refuse(f"{at} was replaced while it was checked")
        if not stat.S_ISREG(st.st_mode):
            raise refuse("not a regular file")
        if st.st_uid not in owners:
            whom = f"this user (uid {me})" if private else _us(me)
            raise refuse(f"owned by uid {st.st_uid}, not by {whom}: its owner chooses what it "
                         "says; use a file of your own")
        if private and st.st_mode & 0o077:
            raise refuse(f"readable by group or others (mode {stat.S_IMODE(st.st_mode):o}); "
                         "chmod 600 it")
        if st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP
                                         and not private_group(st.st_gid)):
            raise refuse(f"writable by group or others (mode {stat.S_IMODE(st.st_mode):o}): "
                         f"they choose what it says; chmod go-w {at}")
        return fd
    except BaseException:
        os.close(fd)
        raise
