"""A tick's decisions written together (issue 49): the events of up to BATCH_JOBS jobs in
one transaction of the store (stores/batch.py: one commit, one fsync), each job's append
checked against its own expected version, then each job acted on in turn.

Intent before action holds per job as before: nothing is acted on before the transaction
that records it committed. A crash after that commit and before a job's action leaves that
job exactly as a crash after its own single append did (its intent recorded, not carried
out), which the next supervisor recovers as it always did. A job whose append conflicted is
re-read and decided again alone (Supervisor._retry), as a conflict always was; the other
jobs' events are kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from dispatch.backends.base import Backend
from dispatch.core import decide as dc
from dispatch.core import events as ev
from dispatch.core.model import Discovery
from dispatch.core.record import Job
from dispatch.errors import DispatchError
from dispatch.stores.base import Fence, Fenced, RecordStore
from dispatch.stores.batch import Append, Outcome
from dispatch.supervise.quiet import Quiet

BATCH_JOBS = 100
"""The most jobs whose decisions share one transaction. Their actions follow its commit one
job after another, so an intent is recorded at most this many jobs' actions before it is
carried out (a submit's attempt is timed from its intent: core/waits.py)."""


@dataclass(frozen=True, slots=True)
class Decided:
    """One job's decisions of this tick, made on ``job`` at ``now``; ``events`` is what
    records them (written before any of them is carried out)."""

    job: Job
    decisions: Sequence[dc.Decision]
    events: Sequence[ev.Event]
    now: datetime
    backend: Backend | None
    discovery: Discovery | None
    gone: dc.Gone


@dataclass(slots=True)
class Visit:
    """A job visited by a tick, finished (acted on, its segment files and its visit noted)
    once its batch is written: ``before`` is its quiet answer when the tick began."""

    job: Job
    before: Quiet | None
    decided: Decided | None = None


def write(store: RecordStore, decided: Sequence[Decided], fence: Fence | None
          ) -> dict[str, Outcome]:
    """Each job's events of ``decided`` in one transaction: by job id, its new version or
    what refused its append (its version unchanged when it has no events). A fault of the
    store is every job's outcome (nothing was written); Fenced is raised."""
    out: dict[str, Outcome] = {d.job.id: d.job.version for d in decided}
    appends = [Append(d.job.id, d.events, d.job.version) for d in decided if d.events]
    if not appends:
        return out
    try:
        outcomes = store.append_many(appends, fence=fence)
    except Fenced:
        raise  # the scope is not ours any more: no job of it is (leases.py)
    except DispatchError as err:  # as each job's own append would have failed
        return {**out, **{a.job_id: err for a in appends}}
    out.update((a.job_id, o) for a, o in zip(appends, outcomes, strict=True))
    return out
