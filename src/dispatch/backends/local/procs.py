"""Process control for the local backend: finding every process of an object, and stopping it.

An object's processes are found three ways, each covering what the others miss:

- parent links: everything under a node (the runner is a child subreaper, so what a node
  leaves behind is re-parented to the runner and stays under it);
- sessions: each node leads its own session, and its children keep it unless they setsid;
- the mark: every node process gets ``DISPATCH_LOCAL_MARK=<ref>:<nonce>`` in its environment,
  inherited by all its descendants, whatever they do to their session, group or parent. It is
  read from ``/proc/<pid>/environ`` through psutil (as root any process can be read; a process
  we may not read is skipped). This is what finds a ``setsid`` grandchild after a
  ``kill -9`` of the runner, when parent links lead to init and the session is its own.

Why not a cgroup per object: it would also catch a process that clears its environment
(``env -i``), but it needs a writable, delegated cgroup tree. Where dispatch runs (a container
with the hybrid v1/v2 layout mounted by the host, shared with the Slurm testbed, or a user
session without delegation) creating and cleaning up cgroups is neither simple nor reliable,
and a half-made cgroup is worse than none; the mark needs nothing from the system.

The /proc parsing below (sessions, parent links, RSS) is ours because psutil does not expose a
session id, and the memory sampling reads every process ten times a second.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterable
from pathlib import Path

import msgspec
import psutil

from dispatch.backends.local.wire import MARK_VAR, NodeStatus

PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PR_SET_CHILD_SUBREAPER = 36


class ProcStat(msgspec.Struct, frozen=True):
    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    start_ticks: int
    rss_pages: int


def read_proc_stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return parse_proc_stat(pid, raw)


def parse_proc_stat(pid: int, raw: bytes) -> ProcStat | None:
    """One /proc/<pid>/stat line; None when it is not one (proc(5) field numbers)."""
    # The command name is in parentheses and may itself hold spaces and parentheses.
    close = raw.rfind(b")")
    if close < 0:
        return None
    fields = raw[close + 2:].split()
    try:
        return ProcStat(pid=pid, state=fields[0].decode(), ppid=int(fields[1]),
                        pgid=int(fields[2]), sid=int(fields[3]), start_ticks=int(fields[19]),
                        rss_pages=int(fields[21]))
    except (IndexError, ValueError):
        return None


def scan_procs() -> dict[int, ProcStat]:
    """Every process on the machine (one pass over /proc)."""
    out: dict[int, ProcStat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = read_proc_stat(int(name))
            if st is not None:
                out[st.pid] = st
    return out


def descendants(procs: dict[int, ProcStat], roots: Iterable[int]) -> set[int]:
    """The processes under ``roots`` (not the roots themselves), by parent links."""
    children: dict[int, list[int]] = {}
    for st in procs.values():
        children.setdefault(st.ppid, []).append(st.pid)
    out: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def pid_max() -> int | None:
    """This machine's kernel.pid_max: no more processes than that can live at once (None
    when it cannot be read)."""
    try:
        value = Path("/proc/sys/kernel/pid_max").read_bytes().strip()
    except OSError:
        return None
    return int(value) if value.isdigit() and len(value) <= 12 else None


def process_alive(pid: int, start_ticks: int) -> bool:
    """True when ``pid`` is still the very process that had ``start_ticks`` (not a zombie,
    not a reused pid). Compare boot ids first: start times only order one boot."""
    st = read_proc_stat(pid)
    return st is not None and st.start_ticks == start_ticks and st.state not in ("Z", "X")


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def kill_pids(pids: Iterable[int], signum: int) -> set[int]:
    """Send ``signum`` to each pid (never to this process); the pids it reached."""
    reached: set[int] = set()
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
        try:
            os.kill(pid, signum)
            reached.add(pid)
        except (ProcessLookupError, PermissionError):
            pass
    return reached


# ---------------------------------------------------------------- the mark


def marked(mark: str) -> list[psutil.Process]:
    """Every live process whose environment carries ``MARK_VAR=mark``. A process that ends,
    or that we may not read, while we look is skipped (never an error)."""
    if not mark:
        return []
    found = []
    for proc in psutil.process_iter(["environ", "status"], ad_value=None):
        env = proc.info.get("environ")
        if env and env.get(MARK_VAR) == mark and proc.info.get("status") != \
                psutil.STATUS_ZOMBIE:
            found.append(proc)
    return found


def kill_marked(mark: str, signum: int = signal.SIGKILL) -> set[int]:
    """Send ``signum`` to every process carrying ``mark`` (never this process). psutil checks
    that a pid was not reused since it was found; the pids reached are returned."""
    reached: set[int] = set()
    me = os.getpid()
    for proc in marked(mark):
        if proc.pid == me:
            continue
        try:
            proc.send_signal(signum)
            reached.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return reached


def kill_leftovers(nodes: Iterable[NodeStatus], mark: str) -> set[int]:
    """SIGKILL what is left of the nodes of a vanished runner: the sessions the nodes led
    (only while its leader, if still there, is the very process the runner started) and every
    process carrying the object's mark. The pids killed."""
    sessions: set[int] = set()
    for node in nodes:
        if node.pid is None or node.start_ticks is None:
            continue
        leader = read_proc_stat(node.pid)
        if leader is not None and leader.start_ticks != node.start_ticks:
            continue  # the pid now belongs to someone else
        sessions.add(node.pid)
    killed: set[int] = set()
    if sessions:
        in_sessions = [st.pid for st in scan_procs().values()
                       if st.sid in sessions and st.state not in ("Z", "X")]
        killed |= kill_pids(in_sessions, signal.SIGKILL)
    killed |= kill_marked(mark, signal.SIGKILL)
    return killed
