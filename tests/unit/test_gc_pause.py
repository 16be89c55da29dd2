"""support/gc_pause.py: the cyclic collector is off inside every pause and runs again once
the last one ends, however pauses nest or overlap across threads; a collector that was off
before stays off."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from dispatch.support.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def collector_restored() -> Iterator[None]:
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_a_pause_turns_the_collector_off_and_back_on() -> None:
    gc.enable()
    with gc_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


def test_nested_pauses_resume_at_the_outermost_end() -> None:
    gc.enable()
    with gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # the outer pause still holds
    assert gc.isenabled()


def test_overlapping_pauses_of_two_threads_resume_when_both_ended() -> None:
    gc.enable()
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            inside.set()
            leave.wait()

    thread = threading.Thread(target=other)
    with gc_paused():
        thread.start()
        inside.wait()
    assert not gc.isenabled()  # this thread's pause ended; the other's holds
    leave.set()
    thread.join()
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()
    with gc_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


def test_an_error_inside_still_ends_the_pause() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_what_is_alive_when_the_last_pause_ends_is_frozen() -> None:
    """Kept objects are moved out of the collector's sight (gc.freeze) so that its next
    collections do not scan what the build kept; they are still freed when dropped."""
    gc.enable()
    gc.unfreeze()
    with gc_paused():
        kept = [[i] for i in range(1000)]
        with gc_paused():
            pass
        assert gc.get_freeze_count() == 0  # the outer pause still holds
    assert gc.get_freeze_count() >= len(kept)
    assert gc.is_tracked(kept[0])
    gc.unfreeze()
