"""Several jobs' appends in one transaction: a supervision tick's decisions cost one commit
(one fsync), not one per job (issue 49: the tick in which 1 % of 100,000 jobs ended).

Each job's append is still checked on its own (RecordStore.append_many): its seqs before any
I/O, then its expected version (SQLite: in a savepoint of its own; PostgreSQL: in one UPDATE
for the batch, and job by job in savepoints when a statement fails, stores/pg_append.py),
so one job's conflict or bad record never keeps another job's events out, and nothing of
the refused job is written. A
fence that is not current refuses the whole transaction (no job of the scope is the caller's
any more), as does a fault of the store itself (nothing is written).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dispatch.core.events import Event
from dispatch.stores.base import check_batch


@dataclass(frozen=True, slots=True)
class Append:
    """One job's part of an ``append_many``: its events at seq expected_version+1, +2, ..."""

    job_id: str
    events: Sequence[Event]
    expected_version: int


# Per append, in the order given: the job's new version, or what refused its append.
Outcome = int | Exception


def checked(appends: Sequence[Append]) -> list[bool | Exception]:
    """check_batch of each append before any I/O: whether it commits an outcome, or the
    ValueError / TypeError refusing that job's batch (that job only). The same job twice is
    the caller's error: ValueError, nothing written."""
    ids = [a.job_id for a in appends]
    if len(set(ids)) != len(ids):
        raise ValueError("append_many: the same job appears twice; nothing was written")
    out: list[bool | Exception] = []
    for a in appends:
        try:
            out.append(check_batch(a.job_id, a.events, a.expected_version))
        except (TypeError, ValueError) as err:
            out.append(err)
    return out


def in_lock_order(appends: Sequence[Append], ok: Sequence[bool | Exception]) -> list[int]:
    """The indexes of the appends to write, by job id: two writers of overlapping batches
    take the jobs' row locks in one order (PostgreSQL), so neither waits on the other's."""
    return sorted((i for i, r in enumerate(ok) if not isinstance(r, Exception)),
                  key=lambda i: appends[i].job_id)
