"""The cyclic garbage collector paused while a bulk build allocates (issue 49).

Folding 100,000 live records allocates millions of objects that all stay alive (frozen
structs, their tuples). CPython's cyclic collector runs every few hundred allocations and
its older generations rescan what was kept, so about half of such a build's CPU was the
collector finding nothing to collect (5.7 s of CPU against 3.3 s paused, at 100,000 live
jobs). What a build keeps holds no cycles, and whatever it drops is freed by reference
counting at once. Pauses nest and may overlap across threads: the collector runs again (if it was
running when the first began) once every pause has ended.

Pausing alone only defers that cost: what the build allocated is still young when the
collector runs again, and the next collections scan all of it (at 100,000 live jobs the
first /metrics scrape after serve's builds took 0.85 s of CPU: bench/RESULTS.md). So when
the last pause ends, everything alive is moved out of the collector's sight
(``gc.freeze``): what a build keeps is never scanned again, and it is still freed by
reference counting when it is dropped (a job replaced, a job ended). The price: a
reference cycle that is garbage at that moment (made by any thread during the pause) is
never collected. serve pauses for its two builds at start, and when /metrics reads the
jobs table whole again (after a prune).
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_lock = threading.Lock()
_pauses = 0
_resume = False  # whether the collector ran when the first open pause began


@contextmanager
def gc_paused() -> Iterator[None]:
    """The cyclic collector is off inside (reference counting still frees memory)."""
    global _pauses, _resume
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0:
                gc.freeze()
                if _resume:
                    gc.enable()


__all__ = ["gc_paused"]
