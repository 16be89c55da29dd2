"""A supervisor's writer paused (SIGSTOP) inside a fenced append, for test_paused_append.py
(argv only; a real process, so that what pauses is what a stopped supervisor pauses).

    paused_writer.py URL JOB SCOPE
        takes SCOPE's lease as "paused" for LEASE_S s and prints "leased EPOCH EXPIRES" (the
        expiry in seconds since the epoch); appends two events to JOB at version 1 under that
        lease, and inside that append, right after the fence check (holding whatever the
        check took), prints "inside" and stops itself with SIGSTOP. Once continued it prints
        what the append did: "committed VERSION" or "refused TYPE". Then it waits for a line
        on stdin and makes one more fenced append with the same lease, printing the same.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import dispatch.stores.postgres as pg_store
import dispatch.stores.sqlite as sqlite_store
from dispatch.core.events import EscalationRaised, Event
from dispatch.errors import DispatchError
from dispatch.stores.base import Fence, RecordStore
from dispatch.stores.select import open_store

LEASE_S = 1.0
NOW = datetime(2026, 1, 1, tzinfo=UTC)


def say(*words: object) -> None:
    print(*words, flush=True)


def pausing_once(real: Callable[..., None]) -> Callable[..., None]:
    paused = {"done": False}

    def check(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        if not paused["done"]:
            paused["done"] = True
            say("inside")
            # to this thread, so it is this one that stops before going on (paused_submit)
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)

    return check


def append(store: RecordStore, job: str, version: int, fence: Fence, tag: str) -> int:
    events: list[Event] = [EscalationRaised(seq=version + 1 + i, at=NOW, message=f"{tag} {i}")
                           for i in range(2)]
    try:
        version = store.append(job, events, version, fence=fence)
    except DispatchError as err:
        say("refused", type(err).__name__, " ".join(str(err).split()))
        return version
    say("committed", version)
    return version


def main(argv: list[str]) -> int:
    url, job, scope = argv
    # The stores call the check by these module names: pause right after it returns.
    for module, name in ((sqlite_store, "check_fence_sqlite"), (pg_store, "check_fence_pg")):
        setattr(module, name, pausing_once(getattr(module, name)))
    with open_store(url) as store:
        lease = store.leases().acquire(scope, "paused", LEASE_S)
        if lease is None:
            raise SystemExit(f"scope {scope} is held")
        say("leased", lease.epoch, lease.expires_at.timestamp())
        version = append(store, job, 1, lease.fence, "paused")
        sys.stdin.readline()
        append(store, job, version, lease.fence, "resumed")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
