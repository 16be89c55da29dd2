"""Failpoints: named places in the supervisor's act path where a test makes the process die.

A test hook, the way FoundationDB's simulation, TiKV's fail-rs and etcd's gofail test their
crash windows (issue 39): a test starts a supervisor process with

    DISPATCH_FAILPOINTS=name[,name...]

in its environment, and the process ends itself with ``os._exit(EXIT_CODE)`` (no cleanup, no
lease released, no buffers flushed: as kill -9 would leave it) the first time it passes one
of those points. The variable is read once, at import; nothing else arms a point (no option,
no config file, no API), so a user's configuration can never reach one. Off, a point costs
one test of a module-level constant (``if failpoints.ARMED:`` at the call site). An unknown
name is an error naming the known ones, so a test never arms a point that does not exist:
the ``dispatch`` command checks the variable before anything else (cli/group.py), so every
command, ``--help`` included, exits 2 with that one line rather than a traceback here.

The points (what is in the record and on the scheduler when the process dies there):

- ``appended:<Event>``: the supervisor's batch of decision events holding an ``<Event>`` (or
  the fact ``<Event>`` learnt from the scheduler) is in the record; nothing of the batch is
  carried out yet (before its act).
- ``acted:<act>``: the act is done on the scheduler (submit, stop, cancel, open-gate,
  publish-segment); what it learnt is not yet appended, the next act not yet done.
- ``gate:opening``: the gate is about to be opened (OpenGate appends nothing before).
- ``local-submit:staged``: inside the local backend's submit, the object is staged and its
  runner started, and not yet published (renamed into objects/).
- ``lease:renewing`` / ``lease:renewed``: around the renewal of a scope's lease.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from dispatch.errors import BadInput

ENV = "DISPATCH_FAILPOINTS"
# The exit status of a process that died at a failpoint (a test tells it from a crash).
EXIT_CODE = 86

# The events a supervisor appends (the decision events, then the facts it learns after acts).
_APPENDED = (
    "SubmissionIntended", "SubmissionAttempted", "SubmissionBound", "SubmissionRejected",
    "RecoveryStarted", "StopRequested", "CancelSent", "DuplicateStopped", "GateOpened",
    "ExecutionEnded", "ExecutionStarted", "OutcomeCommitted", "HoldPlaced",
    "EscalationRaised", "SegmentPublished",
)
_ACTS = ("submit", "stop", "cancel", "open-gate", "publish-segment")

KNOWN: frozenset[str] = frozenset(
    [f"appended:{e}" for e in _APPENDED] + [f"acted:{a}" for a in _ACTS]
    + ["gate:opening", "local-submit:staged", "lease:renewing", "lease:renewed"])


class UnknownFailpoint(BadInput):
    """DISPATCH_FAILPOINTS names a point that does not exist."""

    def __init__(self, name: str) -> None:
        super().__init__(f"{ENV}: no failpoint {name!r}; the known ones are: "
                         + ", ".join(sorted(KNOWN)))
        self.name = name


def parse(text: str) -> frozenset[str]:
    """The names of ``text`` (comma-separated, blanks ignored); UnknownFailpoint for any
    name that is not a point."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    for name in sorted(names):
        if name not in KNOWN:
            raise UnknownFailpoint(name)
    return names


ARMED: frozenset[str] = parse(os.environ.get(ENV, ""))


def hit(name: str) -> None:
    """Die here when ``name`` is armed. Call sites test ``ARMED`` first (the cost when off);
    tests/unit/test_failpoints.py checks that every call site names a known point."""
    if name in ARMED:
        # One line for the test's log, then gone: no finally, no atexit, no lease handed back.
        os.write(2, f"failpoint {name}: exiting {EXIT_CODE}\n".encode())
        os._exit(EXIT_CODE)


def appended(events: Iterable[object]) -> None:
    """The ``appended:<Event>`` points of a batch just appended (one per event type)."""
    for e in events:
        hit(f"appended:{type(e).__name__}")


__all__ = ["ARMED", "ENV", "EXIT_CODE", "KNOWN", "UnknownFailpoint", "appended", "hit",
           "parse"]
