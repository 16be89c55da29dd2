"""Snapshots: a job's folded state kept beside its events, so a reader folds only the
events after it (issue 27). A cache, never the truth:

- written every ``EVERY`` events and at the outcome, by whoever folded the job, in a
  transaction of its own after the events are committed: a snapshot that cannot be written
  is logged and skipped, never an append's failure;
- read strictly: its FORMAT must be this build's, its body must decode as a Job of this job
  at the snapshot's version, and its digest must match the body *and* the stored body of
  the event at that seq. Anything else (an older format, a torn or edited body, events
  rewritten under it, a version beyond the record's) means the snapshot disagrees with the
  events: it is discarded, the record is folded whole, and a new snapshot is written.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from datetime import datetime

import msgspec

from dispatch.core.events import Event
from dispatch.core.record import Job, advance, check_record, fold
from dispatch.errors import DispatchError
from dispatch.stores.base import RecordStore, StoreError
from dispatch.stores.reading import RECORD_ERRORS, read_records
from dispatch.stores.snapshot_sql import Stored

log = logging.getLogger("dispatch.snapshot")

FORMAT = 1
"""The encoding of the body (msgspec JSON of core.record.Job). A change to Job's fields
that an older body cannot be decoded into strictly bumps it; older snapshots are dropped."""
_DECODER = msgspec.json.Decoder(Job, strict=True)  # built once: a per-call type costs 10x
_ENCODER = msgspec.json.Encoder()
EVERY = 32
"""A snapshot is written once this many events are past the last one (and at the outcome)."""


def digest_of(body: bytes, event_body: bytes) -> str:
    return hashlib.sha256(hashlib.sha256(body).digest() + event_body).hexdigest()


def encode(job: Job, event_body: bytes) -> tuple[bytes, str]:
    """(body, digest) of ``job``'s snapshot; ``event_body``: its last event as stored."""
    body = _ENCODER.encode(job)
    return body, digest_of(body, event_body)


def decode(s: Stored) -> Job | None:
    """The snapshot's Job, or None when it disagrees with the events (see the module)."""
    if s.format != FORMAT or s.event_body is None:
        return None
    if digest_of(s.body, s.event_body) != s.digest:
        return None
    try:
        job = _DECODER.decode(s.body)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None
    if job.id != s.job_id or job.version != s.version:
        return None
    return job


def due(job: Job, snapshot_version: int) -> bool:
    """Whether a reader that folded ``job`` should store a snapshot of it."""
    if job.version <= snapshot_version:
        return False
    return job.terminal or job.version - snapshot_version >= EVERY


def fold_with_snapshots(store: RecordStore, job_ids: Sequence[str], now: datetime
                        ) -> tuple[list[Job], dict[str, DispatchError]]:
    """``reading.fold_records``, reading only the events after each job's snapshot (two
    queries for all of them), and storing a snapshot where one is due."""
    stored = {s.job_id: s for s in store.read_snapshots(job_ids)}
    base: dict[str, Job] = {}
    for job_id, s in stored.items():
        job = decode(s)
        if job is None:
            log.warning("job %s: its snapshot at seq %d disagrees with its events; "
                        "discarded, the record is folded whole", job_id, s.version)
            _drop(store, job_id)
        else:
            base[job_id] = job
    errors: dict[str, DispatchError] = {}
    tails: dict[str, list[Event]] = {}
    try:
        tails = store.read_after({j: base[j].version for j in job_ids if j in base})
    except RECORD_ERRORS:
        for j in [j for j in job_ids if j in base]:
            try:
                tails.update(store.read_after({j: base[j].version}))
            except RECORD_ERRORS:
                del base[j]  # a record behind its snapshot: fold it whole (and say why)
    whole, errors = read_records(store, [j for j in job_ids if j not in base])
    jobs: list[Job] = []
    for job_id in job_ids:
        try:
            if job_id in base:
                job = advance(base[job_id], tails.get(job_id, []))
            elif job_id in whole:
                check_record(whole[job_id], job_id)
                job = fold(whole[job_id], now, job_id=job_id)
            else:
                continue
        except RECORD_ERRORS as err:
            errors[job_id] = err
            continue
        jobs.append(job)
        if due(job, base[job_id].version if job_id in base else 0):
            write(store, job)
    return jobs, errors


def write(store: RecordStore, job: Job) -> None:
    """Store ``job``'s snapshot; a failure is logged, never raised (it is a cache)."""
    try:
        store.write_snapshot(job, FORMAT, encode)
    except Exception as err:  # noqa: BLE001 - a cache: never the reader's failure
        log.warning("job %s: snapshot not written: %s", job.id, err)


def _drop(store: RecordStore, job_id: str) -> None:
    try:
        store.drop_snapshot(job_id)
    except StoreError as err:
        log.warning("job %s: snapshot not dropped: %s", job_id, err)
