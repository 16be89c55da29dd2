"""Who makes a submit attempt, and whether that process is gone (R1, issue 45).

Each attempt names its holder in the record (events.Holder: host, boot id, pid, start
time). A supervisor judges a holder gone only when it is sure: the holder was on this very
host in this very boot, and its pid is now absent, a zombie, or another process (its start
time differs). A holder elsewhere (another host, an earlier boot) cannot be judged from here
and is never called gone: its attempt waits the attempt lease, as before holders existed.
A holder is judged alive on the same terms: this host and boot, and its pid still that
process (running or stopped); a finished job is watched while one of its attempts' holders
lives (core/waits.watch_until).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable
from functools import cache

from dispatch.backends.local.procs import boot_id, read_proc_stat
from dispatch.core.events import Holder
from dispatch.core.record import Job


@cache
def this_process() -> Holder | None:
    """This process as a holder (None when /proc cannot say its start time: no attempt of
    it is then ever judged gone by anyone)."""
    pid = os.getpid()
    st = read_proc_stat(pid)
    boot = boot_id()
    if st is None or not boot:
        return None
    return Holder(host=socket.gethostname(), boot_id=boot, pid=pid, start_ticks=st.start_ticks)


def holder() -> Holder | None:
    """The holder to record with this process's attempts (a forked child is another
    process: its own holder, never its parent's)."""
    me = this_process()
    if me is not None and me.pid != os.getpid():
        this_process.cache_clear()
        me = this_process()
    return me


def is_gone(h: Holder, *, host: str | None = None, boot: str | None = None) -> bool:
    """True only when ``h`` ran on this host in this boot and its pid is no longer it."""
    return _fate(h, host, boot) == GONE


def is_alive(h: Holder, *, host: str | None = None, boot: str | None = None) -> bool:
    """True only when ``h`` ran on this host in this boot, its pid is still that process
    (running or stopped: a paused supervisor is alive) and it is not this very process (whose
    own submit calls have returned by the time it looks: its attempts are judged as one
    elsewhere, WATCH_UNRESOLVED)."""
    return _fate(h, host, boot) == ALIVE


GONE, ALIVE, UNSEEN = "gone", "alive", "unseen"


def _fate(h: Holder, host: str | None, boot: str | None) -> str:
    if h.host != (host if host is not None else socket.gethostname()):
        return UNSEEN
    if not h.boot_id or h.boot_id != (boot if boot is not None else boot_id()):
        return UNSEEN
    st = read_proc_stat(h.pid)
    if st is None or st.start_ticks != h.start_ticks or st.state in ("Z", "X"):
        return GONE
    return UNSEEN if h == this_process() else ALIVE


def look_at_holders(jobs: Iterable[Job]) -> tuple[frozenset[Holder], frozenset[Holder]]:
    """(gone, alive): the holders of the jobs' unresolved submit attempts that are gone, and
    those alive (one /proc read per distinct holder; none for jobs whose submissions are all
    resolved). A holder in neither cannot be judged from here."""
    wanted = {h for job in jobs for s in job.submissions if s.unresolved
              for h in s.holders if h is not None}
    if not wanted:
        return frozenset(), frozenset()
    host, boot = socket.gethostname(), boot_id()
    fates = {h: _fate(h, host, boot) for h in wanted}
    return (frozenset(h for h, f in fates.items() if f == GONE),
            frozenset(h for h, f in fates.items() if f == ALIVE))


def gone_holders(jobs: Iterable[Job]) -> frozenset[Holder]:
    """The holders of the jobs' unresolved submit attempts that are gone."""
    return look_at_holders(jobs)[0]
