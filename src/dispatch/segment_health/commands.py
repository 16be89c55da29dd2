"""Operator segment-health decisions (``dispatch segment mark|clear|list``, whose commands live
in ``dispatch.cli.segment``), recorded in the job's record. ``mark`` and ``unmark`` are plain
functions over a store; for each the order is:

1. validate everything, touching nothing: the job has a decision directory and a Slurm
   unit; ``--task`` is a canonical id (``7``, never ``007``: the consumer looks for
   ``.7``); the reason is one line (no newline or other control character, which would forge
   lines in ``segment list`` and ``history``) and, for ``mark``, not blank; the directory is
   absolute, a directory (or creatable as one) and writable;
2. under the job's directory lock: write the file durably (``mark``) or remove it and see
   it gone (``clear``);
3. still under the lock, append the record event. A failure before it records nothing; a
   ``mark`` whose append fails removes the file it created. The supervisor's reconcile
   takes the same lock and re-reads the record under it, so it never writes back a file a
   ``clear`` has just removed.

A refused request records nothing. ``clear`` of a unit the record does not hold and the
directory has no file for records nothing either (there is nothing to tell).
"""

from __future__ import annotations

import contextlib
import logging
import unicodedata
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

from dispatch.core import events as ev
from dispatch.core.decide import allocation_unit
from dispatch.core.record import Job, fold
from dispatch.segment_health.artifact import (
    SegmentHealthError,
    absolute_directory,
    checked_id,
    unit_filename,
)
from dispatch.segment_health.directory import DirectoryUnusable, check_usable, open_directory
from dispatch.segment_health.publisher import (
    encode_decision,
    list_decisions,
    make_decision,
    remove_unit,
    write_unit,
)
from dispatch.stores.base import RecordStore, append_fact

log = logging.getLogger("dispatch.segment_health")

# Categories that break a line or hide text: controls (newline, CR, ESC...), format
# characters (bidi overrides, zero-width), line/paragraph separators, lone surrogates.
_UNPRINTABLE = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})
MAX_REASON_CHARS = 1000


class SegmentCommandError(SegmentHealthError, ValueError):
    """A segment mark/clear request that cannot be carried out (refused before any write)."""


def canonical_task_id(text: str) -> str:
    """A task id as the consumer spells it: decimal digits, no leading zero (but ``0``)."""
    if not isinstance(text, str) or not text.isascii() or not text.isdigit():
        raise SegmentCommandError(f"--task must be a Slurm array task id (decimal digits), "
                                  f"got {text!r}")
    canonical = text.lstrip("0") or "0"
    if canonical != text:
        raise SegmentCommandError(
            f"--task {text!r} is not canonical: write {canonical} (the consumer looks for "
            f"the file ending in .{canonical}, never .{text})")
    return text


def checked_reason(reason: str, *, required: bool) -> str:
    """The reason, verbatim, if it is one line of printable text (and not blank if required)."""
    if not isinstance(reason, str):
        raise SegmentCommandError(f"--reason must be text, got {reason!r}")
    if required and not reason.strip():
        raise SegmentCommandError("--reason must say why the unit is unavailable (it is blank)")
    for char in reason:
        if unicodedata.category(char) in _UNPRINTABLE:
            raise SegmentCommandError(
                f"--reason must be one line of printable text: it contains U+{ord(char):04X} "
                f"({unicodedata.name(char, 'a control character')}), which could forge lines "
                "in `segment list` and `history`")
    if len(reason) > MAX_REASON_CHARS:
        raise SegmentCommandError(f"--reason is {len(reason)} characters; at most "
                                  f"{MAX_REASON_CHARS}")
    return reason


def one_line(text: str) -> str:
    """Text for one line of output: a control character in an old record shows escaped."""
    return "".join(f"\\u{ord(c):04x}" if unicodedata.category(c) in _UNPRINTABLE else c
                   for c in text)


def _unit(job: Job, task: str | None) -> tuple[str, str]:
    cur = job.current
    if cur is None or cur.ref is None:
        raise SegmentCommandError(f"job {job.id} has no scheduler object yet: no allocation "
                                  "unit to mark")
    unit_job, unit_task = allocation_unit(cur.ref)
    checked_id(f"the allocation unit of job {job.id} (scheduler ref {cur.ref!r})", unit_job)
    if task is not None:
        return unit_job, canonical_task_id(task)
    return unit_job, unit_task


def _directory(job: Job) -> Path:
    if job.spec.segment_health is None:
        raise SegmentCommandError(f"job {job.id} has no segment_health.dir in its spec")
    return absolute_directory(job.spec.segment_health.dir)


def mark(store: RecordStore, job_id: str, task: str | None, reason: str, actor: str,
         now: datetime) -> str:
    """Publish an operator's decision for the job's unit (or ``task``); returns its path."""
    job = fold(store.read(job_id), now)
    directory = _directory(job)
    unit_job, unit_task = _unit(job, task)
    checked_reason(reason, required=True)
    check_usable(directory)
    content = encode_decision(unit_job, unit_task, make_decision(
        job_id=unit_job, task_id=unit_task, nodes=[], cause="operator", who=actor,
        why=reason, when=now, extra={"dispatch_job": job.id, "dispatch_name": job.name}))
    name = unit_filename(unit_job, unit_task)
    path = directory / name
    with _disk_errors(directory), open_directory(directory, create=True) as found:
        assert found is not None  # create=True
        with found.lock(unit_job):
            existed = found.existing_regular(name)  # a planted link refuses here
            overflow = write_unit(found, unit_job, unit_task, content)
            try:
                append_fact(store, job_id, lambda seq: ev.SegmentPublished(
                    seq=seq, at=now, unit_job_id=unit_job, task_id=unit_task, reason=reason,
                    actor=actor, path=str(path), source="operator"))
            except BaseException:
                if not existed:  # no record of it: take back the file we made
                    with contextlib.suppress(Exception):
                        remove_unit(found, unit_job, unit_task)
                raise
    if overflow is not None:  # the supervisor's reconcile escalates it
        log.warning("%s; the per-unit file %s is written", overflow, path)
    return str(path)


def unmark(store: RecordStore, job_id: str, task: str | None, reason: str, actor: str,
           now: datetime) -> bool:
    """Clear the unit's decision; True if a file was removed. Records "cleared" only once the
    file is gone, and only if there was something to clear (a file, or a recorded decision).
    """
    job = fold(store.read(job_id), now)
    directory = _directory(job)
    unit_job, unit_task = _unit(job, task)
    checked_reason(reason, required=False)
    recorded = _holds(job, unit_job, unit_task)
    name = unit_filename(unit_job, unit_task)
    # With a recorded decision, take the lock even if the directory is gone (re-creating
    # it): the supervisor's reconcile must see "cleared" before it could write the file back.
    with _disk_errors(directory), open_directory(directory, create=recorded) as found:
        if found is None:  # no directory, and nothing recorded: nothing to clear
            return False
        with found.lock(unit_job):
            # The record as it is now, under the lock (the supervisor may have published
            # since the read above).
            recorded = _holds(fold(store.read(job_id), now), unit_job, unit_task)
            removed = remove_unit(found, unit_job, unit_task)  # a planted link refuses here
            if found.lstat(name) is not None:
                raise DirectoryUnusable(directory, f"{name} is still there after removing it")
            if removed or recorded:
                _record_cleared(store, job_id, unit_job, unit_task, reason, actor, now)
    return removed


def _holds(job: Job, unit_job: str, unit_task: str) -> bool:
    return any((d.unit_job_id, d.task_id) == (unit_job, unit_task) for d in job.segments)


def _record_cleared(store: RecordStore, job_id: str, unit_job: str, unit_task: str,
                    reason: str, actor: str, now: datetime) -> None:
    append_fact(store, job_id, lambda seq: ev.SegmentCleared(
        seq=seq, at=now, unit_job_id=unit_job, task_id=unit_task, reason=reason, actor=actor))


@contextlib.contextmanager
def _disk_errors(directory: Path) -> Iterator[None]:
    """An OSError from the disk (full, read-only, gone) as a typed error naming the place."""
    try:
        yield
    except OSError as exc:
        where = exc.filename if isinstance(exc.filename, str) else directory
        raise DirectoryUnusable(directory, f"{where}: {exc.strerror or exc}") from exc


def listing(store: RecordStore, job_id: str | None, now: datetime) -> list[dict[str, Any]]:
    """Every decision published for ``job_id`` (or every job with a decision directory), with
    what the record says of it."""
    ids = [job_id] if job_id else [r.job_id for r in store.list_jobs()]
    records = store.read_many(ids)
    rows: list[dict[str, Any]] = []
    for jid in ids:
        j = fold(records[jid], now)
        if j.spec.segment_health is None:
            if job_id:
                raise SegmentCommandError(f"job {jid} has no segment_health.dir")
            continue
        recorded = {(d.unit_job_id, d.task_id): d for d in j.segments}
        units = {allocation_unit(s.ref)[0] for s in j.submissions if s.ref}
        for unit_job in sorted(units | {u for u, _ in recorded}):
            for found in list_decisions(j.spec.segment_health.dir, unit_job):
                rec = recorded.get((found.job_id, found.task_id))
                rows.append({"job": jid, "unit_job_id": found.job_id,
                             "task_id": found.task_id, "path": str(found.path),
                             "recorded": rec is not None,
                             "reason": rec.reason if rec else None,
                             "by": rec.actor if rec else None,
                             "at": rec.at.isoformat() if rec else None})
    return rows
