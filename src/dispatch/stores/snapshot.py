"""Snapshots: a job's folded state kept beside its events, so a reader folds only the
events after it (issue 27). A cache, never the truth:

- written every ``EVERY`` events and at the outcome, by whoever folded the job, in a
  transaction of its own after the events are committed: a snapshot that cannot be written
  is logged and skipped, never an append's failure;
- read strictly: its FORMAT must be this build's, its body must decode as a Job of this job
  at the snapshot's version, and its digest must match the body *and* the stored body of
  the event at that seq. Anything else (an older format, a torn or edited body, events
  rewritten under it, a version beyond the record's) means the snapshot disagrees with the
  events: it is discarded, the record is folded whole, and a new snapshot is written;
- never trusted, nor written, for a job whose stored events were updated or deleted since
  it was created (``jobs.edited``, set by the database's triggers: stores/schema.py,
  version 5). The digest covers one event; two bodies swapped in place below it would
  leave it matching, and a reader would show a record that ``history`` refuses (S13). Such
  a job is folded whole by every reader, which refuses what ``history`` refuses;
- its past (the earlier submissions, the history, the escalations) is kept compressed and
  decoded, as strictly, the first time a reader uses it (``_Body``, core/deferred.py).
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import TypeVar

import msgspec
from msgspec.structs import force_setattr

from dispatch.core.deferred import Deferred
from dispatch.core.events import Event
from dispatch.core.model import Escalation, Transition
from dispatch.core.record import (
    DeferredSubmissions,
    Job,
    RecordError,
    Submission,
    advance,
)
from dispatch.errors import DispatchError
from dispatch.stores.base import RecordStore, StoreError
from dispatch.stores.reading import RECORD_ERRORS, fold_own, read_records
from dispatch.stores.snapshot_sql import Stored

log = logging.getLogger("dispatch.snapshot")
T = TypeVar("T")

FORMAT = 3
"""The encoding of the body: msgspec JSON of ``_Body``. A change to Job's fields that an
older body cannot be decoded into strictly, or would decode into another value than a fold
of the same events gives, bumps it; older snapshots are dropped.
(1: the whole Job; 2: its past kept apart, compressed, decoded when first used; 3: each
submission's attempt holders, which a body of format 2 lacks where a fold says "none
named", and the time of each duplicate's latest stop, which it lacks too.)"""
EVERY = 32
"""A snapshot is written once this many events are past the last one (and at the outcome)."""


class _Body(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A snapshot's body. ``head`` is the Job without its three growing sequences. Those
    are kept apart as zlib-compressed JSON (``past``: the submissions before ``current``)
    with their counts, and decoded by core/deferred.py when a reader first uses them:
    a reader that never does (a list, the state of a finished job) pays neither their
    bytes (a third of them, compressed) nor their decoding. ``refs``: every bound ref, which
    list views show without the past submissions."""

    head: Job
    current: Submission | None
    past: bytes
    past_count: int
    refs: tuple[str, ...]
    history: bytes
    history_count: int
    escalations: bytes
    escalations_count: int


# Built once: a per-call type costs 10x.
_DECODER = msgspec.json.Decoder(_Body, strict=True)
_ENCODER = msgspec.json.Encoder()
_SUBMISSIONS = msgspec.json.Decoder(tuple[Submission, ...], strict=True)
_HISTORY = msgspec.json.Decoder(tuple[Transition, ...], strict=True)
_ESCALATIONS = msgspec.json.Decoder(tuple[Escalation, ...], strict=True)


def digest_of(body: bytes, event_body: bytes) -> str:
    return hashlib.sha256(hashlib.sha256(body).digest() + event_body).hexdigest()


def encode(job: Job, event_body: bytes) -> tuple[bytes, str]:
    """(body, digest) of ``job``'s snapshot; ``event_body``: its last event as stored."""
    subs = tuple(job.submissions)
    head = msgspec.structs.replace(job, submissions=(), history=(), escalations=())
    body = _ENCODER.encode(_Body(
        head=head, current=subs[-1] if subs else None,
        past=_packed(subs[:-1]), past_count=max(len(subs) - 1, 0), refs=job.refs,
        history=_packed(tuple(job.history)), history_count=len(job.history),
        escalations=_packed(tuple(job.escalations)), escalations_count=len(job.escalations)))
    return body, digest_of(body, event_body)


def _packed(items: tuple[object, ...]) -> bytes:
    return zlib.compress(_ENCODER.encode(items), 1)  # written rarely, read often: fast


_MAX_RATIO = 200  # JSON of these types inflates ~5-20x; a larger ratio is not ours


def _inflated(raw: bytes) -> bytes:
    inflate = zlib.decompressobj()
    out = inflate.decompress(raw, _MAX_RATIO * len(raw) + 65536)
    if not inflate.eof:
        raise ValueError("the compressed bytes are cut short or inflate beyond "
                         f"{_MAX_RATIO}x")
    return out


def _decoded(what: str, decoder: msgspec.json.Decoder[tuple[T, ...]], raw: bytes,
             count: int, job_id: str) -> tuple[T, ...]:
    """One deferred part, decoded strictly; it must hold the count recorded. The digest
    already tied these bytes to what was written, so a failure here is a snapshot this
    build cannot read: a RecordError naming the job (never a guess)."""
    try:
        items = decoder.decode(_inflated(raw))
    except (msgspec.DecodeError, ValueError, TypeError, zlib.error) as err:
        raise RecordError(f"its snapshot's {what} cannot be decoded ({err}); snapshots "
                          "are a cache: deleting this job's row from the snapshots table "
                          "is safe, and the record is then folded whole",
                          job_id=job_id) from None
    if len(items) != count:
        raise RecordError(f"its snapshot holds {len(items)} {what}, not {count}",
                          job_id=job_id)
    return items


# The three parts' decoders, made once (a Deferred holds one, allocating nothing for it).
_past = partial(_decoded, "submissions", _SUBMISSIONS)
_history = partial(_decoded, "history", _HISTORY)
_escalations = partial(_decoded, "escalations", _ESCALATIONS)


def decode(s: Stored) -> Job | None:
    """The snapshot's Job, or None when it disagrees with the events (see the module)."""
    if s.format != FORMAT or s.event_body is None or s.edited:
        return None
    if digest_of(s.body, s.event_body) != s.digest:
        return None
    try:
        b = _DECODER.decode(s.body)
    except (msgspec.DecodeError, ValueError, TypeError):
        return None
    head = b.head
    if head.id != s.job_id or head.version != s.version or head.submissions or \
            head.history or head.escalations or \
            min(b.past_count, b.history_count, b.escalations_count) < 0 or \
            (b.current is None and (b.past_count or b.refs)):
        return None
    j = s.job_id
    subs: Sequence[Submission] = () if b.current is None else DeferredSubmissions(
        b.past, b.past_count, _past, j, b.current, b.refs)
    # The head was made by this decode and nobody else holds it: filled in place rather
    # than copied (one Job less per job read).
    force_setattr(head, "submissions", subs)
    force_setattr(head, "history", Deferred(b.history, b.history_count, _history, j))
    force_setattr(head, "escalations",
                  Deferred(b.escalations, b.escalations_count, _escalations, j))
    return head


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
            if s.format != FORMAT:  # written by another build: expected after an upgrade
                log.info("job %s: its snapshot is format %d, not %d; rewritten", job_id,
                         s.format, FORMAT)
            elif s.edited:  # a snapshot written as its events were edited (the trigger
                # dropped the older one): the record is read whole from now on
                log.warning("job %s: its stored events were edited in place; its snapshot "
                            "is not used, the record is folded whole", job_id)
            else:
                log.warning("job %s: its snapshot at seq %d disagrees with its events; "
                            "discarded, the record is folded whole", job_id, s.version)
            _drop(store, job_id)
        else:
            base[job_id] = job
    errors: dict[str, DispatchError] = {}
    tails: dict[str, list[Event]] = {}
    # Only a job whose version moved past its snapshot (as the snapshots' statement read
    # it) has events to read; a missing job or one behind its snapshot is asked too, so
    # that read_after names what is wrong.
    after = {j: base[j].version for j in job_ids
             if j in base and stored[j].job_version != base[j].version}
    try:
        tails = store.read_after(after)
    except RECORD_ERRORS:
        for j in after:
            try:
                tails.update(store.read_after({j: base[j].version}))
            except RECORD_ERRORS:
                del base[j]  # a record behind its snapshot: fold it whole (and say why)
    whole, errors = read_records(store, [j for j in job_ids if j not in base])
    jobs: list[Job] = []
    for job_id in job_ids:
        try:
            if job_id in base:
                tail = tails.get(job_id)
                job = advance(base[job_id], tail) if tail else base[job_id]
            elif job_id in whole:
                job = fold_own(whole[job_id], now, job_id)
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
