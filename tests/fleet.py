"""A fleet of jobs written straight into a record store (no process runs): what the tests of
finding jobs (issue 48: by name pattern, by a cause a job recovered from, from the CLI, the
API and the Python API) list. ``sweep-1`` .. ``sweep-12``, ``eval`` and ``sweep`` itself:
sweep-3 and sweep-10 succeeded after a preemption, sweep-5 failed, sweep-12 is unfinished,
the rest succeeded plainly."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dispatch.core.events import Event, JobCreated, OutcomeCommitted, RecoveryStarted
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Action, Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.base import RecordStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = [*(f"sweep-{i}" for i in range(1, 13)), "eval", "sweep"]
RECOVERED = {"sweep-3", "sweep-10"}
FAILED = {"sweep-5"}
LIVE = {"sweep-12"}


def job_id(name: str) -> str:
    return "j" + name.replace("-", "")


def created_at(name: str) -> datetime:
    return T0 + timedelta(minutes=NAMES.index(name))


def _events(name: str) -> list[Event]:
    at = created_at(name) + timedelta(seconds=30)
    if name in LIVE:
        return []
    if name in FAILED:
        return [OutcomeCommitted(seq=2, at=at, state=State.FAILED,
                                 cause=Cause(kind=CauseKind.NON_ZERO_EXIT, exit_code=1))]
    done: list[Event] = []
    if name in RECOVERED:
        done.append(RecoveryStarted(seq=2, at=at - timedelta(seconds=10), rule=0,
                                    action=Action.RESUBMIT,
                                    cause=Cause(kind=CauseKind.PREEMPTED)))
    done.append(OutcomeCommitted(seq=len(done) + 2, at=at, state=State.SUCCEEDED,
                                 cause=Cause(kind=CauseKind.NONE, exit_code=0)))
    return done


def fill(store: RecordStore) -> None:
    """The fleet, created in NAMES' order (a minute apart)."""
    store.create_many([
        JobCreated(seq=1, at=created_at(name), job_id=job_id(name),
                   spec=JobSpec(name=name, command=("true",), backend="local"),
                   declarations=Declarations(backend="local"))
        for name in NAMES])
    for name in NAMES:
        events = _events(name)
        if events:
            store.append(job_id(name), events, 1)
