"""PostgreSQL: a supervisor stopped inside a fenced append (SIGSTOP, a frozen VM) holds the
lease row it read FOR SHARE, so a standby could not take the scope over until it was
continued. Wherever the writer stops inside the transaction, the server must end its session
(IDLE_IN_TXN_TIMEOUT_MS) and a standby must take the scope; the stopped append then writes
nothing.

The writer is a thread blocked at a chosen point with its own connection, which is what the
server sees of a stopped process: no more messages. "While encoding an event" is where the
append stopped in a CI run, when the events were sent as a pipeline (executemany) encoded
lazily: the server waited for the rest of the pipeline with no timeout armed, and the test
of SIGSTOP at random moments (test_supervision_processes.py) timed out waiting for the
standby.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from tests.integration.supervision.test_lease_book import created

import dispatch.stores.postgres as pg_store
from dispatch.core.events import EscalationRaised
from dispatch.errors import DispatchError
from dispatch.stores.select import open_store

pytestmark = pytest.mark.postgres

SCOPE = "local:stopped"


def _blocking_once(real: Callable[..., Any], on_call: int, gate: threading.Event,
                   inside: threading.Event) -> Callable[..., Any]:
    calls = {"n": 0}

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if threading.current_thread().name == "stopped-writer":
            calls["n"] += 1
            if calls["n"] == on_call:  # once: later calls count past it
                inside.set()
                gate.wait(120)
        return real(*args, **kwargs)

    return wrapper


@pytest.mark.parametrize("where", ["after the fence check", "while encoding an event"])
def test_a_writer_stopped_inside_a_fenced_append_keeps_no_standby_out(
        postgres_url: str, monkeypatch: pytest.MonkeyPatch, where: str) -> None:
    gate, inside = threading.Event(), threading.Event()
    if where == "after the fence check":
        monkeypatch.setattr(pg_store, "check_fence_pg", _blocking_once(
            pg_store.check_fence_pg, 1, gate, inside))
    else:
        monkeypatch.setattr(pg_store, "encode_event", _blocking_once(
            pg_store.encode_event, 2, gate, inside))
    with open_store(postgres_url) as a, open_store(postgres_url) as b:
        a.create(created("j", SCOPE))
        lease = a.leases().acquire(SCOPE, "A", 1.0)
        assert lease is not None
        events = [EscalationRaised(seq=2, at=lease.acquired_at, message="stopped 1"),
                  EscalationRaised(seq=3, at=lease.acquired_at, message="stopped 2")]
        outcome: dict[str, Any] = {}

        def append() -> None:
            try:
                outcome["version"] = a.append("j", events, 1, fence=lease.fence)
            except DispatchError as err:
                outcome["error"] = err

        writer = threading.Thread(target=append, name="stopped-writer", daemon=True)
        writer.start()
        try:
            assert inside.wait(30), "the append never reached the point it stops at"
            # The standby polls as a supervisor does. The wait is for the lease itself.
            deadline = time.monotonic() + 60
            taken = None
            while taken is None and time.monotonic() < deadline:
                taken = b.leases().acquire(SCOPE, "B", 1.0)
                if taken is None:
                    time.sleep(0.1)
            assert taken is not None, (
                f"{where}: no standby could take the scope while the writer was stopped")
            assert taken.holder == "B" and taken.epoch == lease.epoch + 1
        finally:
            gate.set()
            writer.join(30)
        assert "version" not in outcome, outcome  # the stopped append wrote nothing
        assert [e.seq for e in b.read("j")] == [1]
