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
pidfds) is *unwatched*. At every look the pids listed in /proc are compared with the
unwatched runners' pids (one listing, one set difference): a runner whose pid is gone is
dead at the next look. A dead runner's pid can still be listed, as a zombie not yet reaped
by its parent (LocalBackend reaps its own children at each look, so only another parent's
zombie) or reused by a new process; so ``SWEEP`` unwatched runners a look are also checked
whole (``process_alive``: start time and state), in turn: such a death waits at most
(unwatched / SWEEP) looks.
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
# Unwatched runners checked whole at each look, in turn.
SWEEP = 1000


class RunnerWatch:
    """The live runners a backend watches for their deaths, by ref."""

    def __init__(self, boot_id: str) -> None:
        self.boot_id = boot_id
        self._epoll: select.epoll | None = None
        self._ref_of: dict[int, str] = {}
        self._fd_of: dict[str, int] = {}
        self.unwatched: dict[str, RunnerInfo] = {}
        self._by_pid: dict[int, set[str]] = {}  # the unwatched, by pid
        self._turn: list[str] = []  # the unwatched still to be checked whole, this round
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
            if not process_alive(info.pid, info.start_ticks):
                self._dead.add(ref)
            else:
                self.unwatched[ref] = info
                self._by_pid.setdefault(info.pid, set()).add(ref)
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
        if self.unwatched:
            out |= self._unwatched_dead()
        return out

    def _unwatched_dead(self) -> set[str]:
        try:
            listed = {int(n) for n in os.listdir("/proc") if n.isdigit()}
        except OSError:
            listed = set(self._by_pid)  # cannot list: the whole checks alone
        out = {ref for pid in self._by_pid.keys() - listed for ref in self._by_pid[pid]}
        if not self._turn:
            self._turn = list(self.unwatched)
        for ref in self._turn[-SWEEP:]:
            info = self.unwatched.get(ref)
            if info is not None and not process_alive(info.pid, info.start_ticks):
                out.add(ref)
        del self._turn[-SWEEP:]
        for ref in out:
            self.forget(ref)
        return out

    def forget(self, ref: str) -> None:
        info = self.unwatched.pop(ref, None)
        if info is not None:
            refs = self._by_pid.get(info.pid, set())
            refs.discard(ref)
            if not refs:
                self._by_pid.pop(info.pid, None)
        self._dead.discard(ref)
        self._close(ref)

    def close(self) -> None:
        for ref in list(self._fd_of):
            self._close(ref)
        if self._epoll is not None:
            self._epoll.close()
            self._epoll = None
        self.unwatched.clear()
        self._by_pid.clear()
        self._turn.clear()

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
