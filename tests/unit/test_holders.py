"""Issue 45 item 13: a submit attempt's holder is judged gone only when that is certain
(supervise/holders.py): this host, this boot, and its pid absent or another process."""

from __future__ import annotations

import signal
import subprocess
import sys

import msgspec
from tests.strategies_core import Sim

from dispatch.backends.local.procs import read_proc_stat
from dispatch.core import events as ev
from dispatch.core.events import Holder
from dispatch.supervise.holders import holder, is_alive, is_gone, look_at_holders


def test_this_process_is_not_gone() -> None:
    me = holder()
    assert me is not None
    assert not is_gone(me)


def test_a_process_that_ended_is_gone_and_a_reused_pid_is_not_it() -> None:
    me = holder()
    assert me is not None
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        st = read_proc_stat(child.pid)
        assert st is not None
        h = msgspec.structs.replace(me, pid=child.pid, start_ticks=st.start_ticks)
        assert not is_gone(h)
        assert is_gone(msgspec.structs.replace(h, start_ticks=st.start_ticks + 1)), \
            "another start time: the pid is not the holder any more"
    finally:
        child.kill()
        child.wait()
    assert is_gone(h)


def test_a_holder_elsewhere_is_never_judged_gone() -> None:
    me = holder()
    assert me is not None
    dead = msgspec.structs.replace(me, pid=2**22 + 7)  # beyond any pid_max: no such process
    assert is_gone(dead)
    assert not is_gone(msgspec.structs.replace(dead, host=me.host + "-other"))
    assert not is_gone(msgspec.structs.replace(dead, boot_id="another-boot"))
    assert not is_gone(Holder(host=me.host, boot_id="", pid=dead.pid, start_ticks=0))


def test_a_paused_process_is_alive_and_this_process_is_neither() -> None:
    """Issue 45 item 12: a finished job is watched while a holder of its unresolved attempt
    lives; a stopped (SIGSTOP) process is alive. This very process is neither alive nor
    gone: its own submit calls have returned when it looks (judged as one elsewhere)."""
    me = holder()
    assert me is not None
    assert not is_alive(me) and not is_gone(me)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        st = read_proc_stat(child.pid)
        assert st is not None
        h = msgspec.structs.replace(me, pid=child.pid, start_ticks=st.start_ticks)
        child.send_signal(signal.SIGSTOP)
        assert is_alive(h) and not is_gone(h)
        assert not is_alive(msgspec.structs.replace(h, host=me.host + "-other"))
        sim = Sim()
        sim.append([ev.SubmissionIntended(seq=2, at=sim.now, submission=1, token="t",
                                          holder=h)])
        sim.append([ev.SubmissionAttempted(seq=3, at=sim.now, submission=1, holder=me)])
        assert look_at_holders([sim.job]) == (frozenset(), frozenset({h}))
        child.kill()
        child.wait()
        assert look_at_holders([sim.job]) == (frozenset({h}), frozenset())
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
