"""Reading many records so that one bad record never hides the others.

``read_many`` is one query for a whole tick; when it fails because one stored record cannot
be decoded or trusted, each job is read on its own and only the bad ones are set aside, each
with its error (naming the job and the seq). A store that cannot be used at all still raises.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dispatch.core.codec import DecodeError
from dispatch.core.events import Event
from dispatch.core.record import Job, RecordError, check_record, fold
from dispatch.errors import DispatchError
from dispatch.stores.base import JobRow, RecordDamaged, RecordStore
from dispatch.stores.bulk_decode import record_events

# A record that cannot be decoded or folded: that job's problem, not the store's.
RECORD_ERRORS = (DecodeError, RecordError, RecordDamaged)


def fold_own(record: Sequence[Event], now: datetime, job_id: str) -> Job:
    """``record.check_record`` and then ``record.fold``: the same job, or the same refusal
    in the same words. ``fold`` refuses every record that ``check_record`` refuses, so the
    check runs only to word a refusal (issue 49: a first look folds 100,000 records, and
    checking each first cost a pass over its events)."""
    try:
        return fold(record, now, job_id=job_id)
    except RecordError:
        check_record(record, job_id)
        raise


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
    folded, errors = fold_with_records(store, job_ids, now)
    return [job for job, _ in folded], errors


def fold_with_records(store: RecordStore, job_ids: Sequence[str], now: datetime
                      ) -> tuple[list[tuple[Job, list[Event]]], dict[str, DispatchError]]:
    """``fold_records``, each folded job with the record it was folded from (for readers
    that need the events too, e.g. goodput)."""
    records, errors = read_records(store, job_ids)
    folded: list[tuple[Job, list[Event]]] = []
    for job_id in job_ids:
        events = records.get(job_id)
        if events is None:
            continue
        try:
            folded.append((fold(events, now, job_id=job_id), events))
        except RECORD_ERRORS as err:
            errors[job_id] = err
    return folded, errors


def decode_rows(where: str, rows: Sequence[tuple[Any, ...]], out: dict[str, list[Event]]
                ) -> None:
    """Check and decode a store's ``(job_id, version, seq, body)`` rows (seq order per job;
    a job without events has one row with seq NULL) into ``out``."""
    by_job: dict[str, tuple[Any, list[tuple[Any, Any]]]] = {}
    for job_id, version, seq, body in rows:
        entry = by_job.get(job_id)
        if entry is None:  # a job's first row (the default is not built for every row)
            entry = by_job[job_id] = (version, [])
        if seq is not None:
            entry[1].append((seq, body))
    for job_id, (version, stored) in by_job.items():
        out[job_id] = record_events(where, job_id, version, stored)


def job_row(where: str, r: tuple[object, ...]) -> JobRow:
    job_id, name, backend, terminal, version, created_at, scope = r
    if isinstance(version, bool) or not isinstance(version, int):
        raise RecordDamaged(where, str(job_id), None, f"the job's version is {version!r}")
    if not isinstance(scope, str) or not scope:
        raise RecordDamaged(where, str(job_id), None, f"the job's scope is {scope!r}")
    try:
        at = datetime.fromisoformat(str(created_at))
    except ValueError:
        raise RecordDamaged(where, str(job_id), 1,
                            f"created_at {created_at!r} is not a time") from None
    return JobRow(job_id=str(job_id), name=str(name), backend=str(backend),
                  terminal=bool(terminal), version=version, created_at=at, scope=scope)
