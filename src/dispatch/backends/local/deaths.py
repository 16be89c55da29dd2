"""Runners' deaths, learnt without looking at every runner (issue 49).

A runner that is killed (SIGKILL, the OOM killer) or vanishes writes nothing: its object's
report changes (to the vanished verdict) with no line in the change journal (journal.py).
So the backend holds a pidfd (pidfd_open(2), Linux 5.3) of each live runner it reported,
all in one epoll: the kernel marks a runner's pidfd readable when it exits, however it
exits, and one ``epoll_wait`` per look returns only the runners that died. A pidfd names
one process, never a later one that reuses its pid; the runner's start time is checked
once, right after the pidfd is opened.

Each pidfd is a file descriptor. The soft limit on them is raised to the hard one when it
is reached; a runner that still gets none (the hard limit reached, a kernel without
pidfds) is *unwatched*: its liveness is read from /proc at every look (``process_alive``),
a few microseconds a runner. A death is seen at the next look either way.
"""

from __future__ import annotations

import errno
import os
import resource
import select

from dispatch.backends.local.procs import process_alive
from dispatch.backends.local.wire import RunnerInfo

# Descriptors left free for everything else the process opens (files, sockets, pipes).
SPARE_FDS = 512


class RunnerWatch:
    """The live runners a backend watches for their deaths, by ref."""

    def __init__(self, boot_id: str) -> None:
        self.boot_id = boot_id
        self._epoll: select.epoll | None = None
        self._ref_of: dict[int, str] = {}
        self._fd_of: dict[str, int] = {}
        self.unwatched: dict[str, RunnerInfo] = {}
        self._dead: set[str] = set()
        self._no_more_fds = False

    @property
    def watched(self) -> int:
        return len(self._fd_of)

    def watch(self, ref: str, info: RunnerInfo) -> None:
        """Watch ``ref``'s runner, found alive by the caller; one that is gone already (or is
        of another boot) is among the next ``dead()``."""
        if ref in self._fd_of or ref in self.unwatched:
            return
        if info.boot_id != self.boot_id:
            self._dead.add(ref)
            return
        fd = self._open(info.pid)
        if fd is None:
            self.unwatched[ref] = info
            if not process_alive(info.pid, info.start_ticks):
                self._dead.add(ref)
            return
        if not process_alive(info.pid, info.start_ticks):  # gone, or its pid reused
            os.close(fd)
            self._dead.add(ref)
            return
        if self._epoll is None:
            self._epoll = select.epoll()
        self._epoll.register(fd, select.EPOLLIN)
        self._ref_of[fd] = ref
        self._fd_of[ref] = fd

    def dead(self) -> set[str]:
        """The refs whose runner died since the last call (each said once; no longer
        watched): the pidfds that became readable, and the unwatched runners not alive."""
        out, self._dead = self._dead, set()
        if self._epoll is not None:
            while True:
                events = self._epoll.poll(0, 1024)
                for fd, _ in events:
                    out.add(self._ref_of[fd])
                    self._close(self._ref_of[fd])
                if len(events) < 1024:
                    break
        for ref, info in list(self.unwatched.items()):
            if not process_alive(info.pid, info.start_ticks):
                out.add(ref)
                del self.unwatched[ref]
        return out

    def forget(self, ref: str) -> None:
        self.unwatched.pop(ref, None)
        self._dead.discard(ref)
        self._close(ref)

    def close(self) -> None:
        for ref in list(self._fd_of):
            self._close(ref)
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        self.unwatched.clear()

    def _close(self, ref: str) -> None:
        fd = self._fd_of.pop(ref, None)
        if fd is None:
            return
        del self._ref_of[fd]
        if self._epoll is not None:
            self._epoll.unregister(fd)
        os.close(fd)

    def _open(self, pid: int) -> int | None:
        """A pidfd of ``pid``, keeping SPARE_FDS free; None when none can be had."""
        if self._no_more_fds or not hasattr(os, "pidfd_open"):
            return None
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        if len(self._fd_of) + SPARE_FDS >= soft:
            most = 1 << 20 if hard == resource.RLIM_INFINITY else hard
            if most > soft:
                try:
                    resource.setrlimit(resource.RLIMIT_NOFILE, (most, hard))
                    soft = most
                except (ValueError, OSError):
                    pass
            if len(self._fd_of) + SPARE_FDS >= soft:
                self._no_more_fds = True
                return None
        try:
            return os.pidfd_open(pid)
        except OSError as err:
            if err.errno in (errno.EMFILE, errno.ENFILE, errno.ENOSYS, errno.EPERM):
                self._no_more_fds = True
            return None
