"""Reading many records so that one bad record never hides the others.

``read_many`` is one query for a whole tick; when it fails because one stored record cannot
be decoded or trusted, each job is read on its own and only the bad ones are set aside, each
with its error (naming the job and the seq). A store that cannot be used at all still raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from dispatch.core.codec import DecodeError
from dispatch.core.events import Event
from dispatch.core.record import Job, RecordError, fold
from dispatch.errors import DispatchError
from dispatch.stores.base import RecordDamaged, RecordStore

# A record that cannot be decoded or folded: that job's problem, not the store's.
RECORD_ERRORS = (DecodeError, RecordError, RecordDamaged)


def read_records(store: RecordStore, job_ids: Sequence[str]
                 ) -> tuple[dict[str, list[Event]], dict[str, DispatchError]]:
    """(records by job id, errors by job id) for ``job_ids``."""
    try:
        return store.read_many(job_ids), {}
    except RECORD_ERRORS:
        pass
    records: dict[str, list[Event]] = {}
    errors: dict[str, DispatchError] = {}
    for job_id in job_ids:
        try:
            records[job_id] = store.read(job_id)
        except RECORD_ERRORS as err:
            errors[job_id] = err
    return records, errors


def fold_records(store: RecordStore, job_ids: Sequence[str], now: datetime
                 ) -> tuple[list[Job], dict[str, DispatchError]]:
    """The folded jobs (in ``job_ids`` order) and, set aside, the ones that cannot be
    trusted."""
    records, errors = read_records(store, job_ids)
    jobs: list[Job] = []
    for job_id in job_ids:
        events = records.get(job_id)
        if events is None:
            continue
        try:
            jobs.append(fold(events, now, job_id=job_id))
        except RECORD_ERRORS as err:
            errors[job_id] = err
    return jobs, errors
