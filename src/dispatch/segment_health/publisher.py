"""Publish and clear segment health decisions (docs/semantics.md#h1, #h4): the supervisor side.

Each write is atomic: a temp file in the same directory, written, fsynced, renamed over the
name, then the directory fsynced. A reader stat-ing or reading the name sees the old file,
no file, or the complete new one; never a partial one.

Per job, the per-unit files and the H4 state file change together under an exclusive
``fcntl.flock`` on ``.segment_health_check.<job_id>.lock`` in the same directory. flock
rather than the filelock package: it is the stdlib call filelock wraps on Unix, it blocks
without polling, and the kernel releases it when the holder dies, so a killed publisher
never leaves a stale lock. The lock file is left in place: unlinking a lock file others may
hold or be opening is a race.

The state file is derived from the per-unit files under the lock (not read-modify-written),
so a publisher killed between the two writes is repaired by the next publish or clear.
When the last unit of a job is cleared the state file is removed rather than left as ``[]``:
"no decision" then looks the same in both forms (no file), the directory does not collect
one empty state file per job, and readers fail open on either.

Every file is opened, written and removed through directory.DecisionDirectory: relative to
one directory descriptor, never following a symlink (the directory is shared with every
launcher; dispatch often runs as root). See directory.py.
"""

from __future__ import annotations

import json
import logging
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from dispatch.segment_health.artifact import (
    DirectoryNotAbsolute,
    InvalidUnitId,
    SegmentHealthError,
    absolute_directory,
    checked_id,
    numeric_key,
    parse_unit_filename,
    state_filename,
    unit_filename,
    unit_ids,
)
from dispatch.segment_health.directory import (
    DecisionDirectory,
    DirectoryUnusable,
    NotARegularFile,
    SymlinkRefused,
    open_directory,
)
from dispatch.segment_health.state import (
    MAX_STATE_LINE_BYTES,
    StateFormatError,
    StateTooLarge,
    decode_state,
    encode_state_within_limit,
)

log = logging.getLogger("dispatch.segment_health")

# The diagnostic document is a few hundred bytes; `list` reads at most this much of one.
MAX_DECISION_BYTES = 64 * 1024

__all__ = [
    "DirectoryNotAbsolute",
    "DirectoryUnusable",
    "InvalidDecision",
    "InvalidUnitId",
    "MAX_STATE_LINE_BYTES",
    "NotARegularFile",
    "PublishedDecision",
    "SegmentHealthError",
    "StateFormatError",
    "StateTooLarge",
    "SymlinkRefused",
    "clear",
    "list_decisions",
    "make_decision",
    "publish",
    "read_state",
    "unit_ids",
]


class InvalidDecision(SegmentHealthError, ValueError):
    """A decision that cannot be written as the diagnostic JSON object."""


@dataclass(frozen=True)
class PublishedDecision:
    """One per-unit decision found in the directory (a non-empty regular file)."""

    job_id: str
    task_id: str
    path: Path
    size: int
    # The diagnostic JSON object, or None when the content is not a JSON object (a file
    # someone else wrote; it still excludes the unit, the consumer never reads it).
    decision: dict[str, Any] | None


def make_decision(
    *,
    job_id: str,
    task_id: str,
    nodes: Sequence[str],
    cause: str,
    who: str,
    why: str,
    when: datetime,
    extra: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The diagnostic document for one unit. Pure: the caller passes ``when`` (now).

    ``cause`` is the short machine word (e.g. "node-drained", "node-lost-fence",
    "operator"); ``why`` the human sentence with the scheduler's own words; ``who`` the
    actor (the supervisor's id, or the operator's name).
    """
    if when.tzinfo is None or when.utcoffset() is None:
        raise InvalidDecision(f"decision time must be timezone-aware, got {when!r}")
    for name, value in (("cause", cause), ("who", who), ("why", why)):
        if not isinstance(value, str) or not value:
            raise InvalidDecision(f"decision {name} must be a non-empty string, got {value!r}")
    if isinstance(nodes, str) or not all(isinstance(n, str) and n for n in nodes):
        raise InvalidDecision(f"decision nodes must be a list of node names, got {nodes!r}")
    document: dict[str, Any] = dict(extra or {})
    document.update(
        job=checked_id("job_id", job_id),
        task=checked_id("task_id", task_id),
        nodes=list(nodes),
        cause=cause,
        who=who,
        why=why,
        when=when.isoformat(),
    )
    return document


def encode_decision(job_id: str, task_id: str, decision: Mapping[str, Any]) -> bytes:
    """The per-unit file content: one compact JSON object and a newline. Never empty."""
    if not isinstance(decision, Mapping):
        raise InvalidDecision(f"decision must be a JSON object (a dict), got {type(decision)}")
    for key, expected in (("job", job_id), ("task", task_id)):
        if key in decision and str(decision[key]) != expected:
            raise InvalidDecision(
                f"decision {key}={decision[key]!r} does not match the unit's {key} id {expected!r}"
            )
    try:
        text = json.dumps(
            dict(decision),
            sort_keys=True,
            separators=(",", ":"),
            allow_nan=False,
            ensure_ascii=True,
        )
    except (TypeError, ValueError) as exc:
        raise InvalidDecision(f"decision is not JSON-serialisable: {exc}") from exc
    return (text + "\n").encode("ascii")


def publish(
    directory: str | os.PathLike[str],
    job_id: str | int,
    task_id: str | int,
    *,
    decision: Mapping[str, Any],
) -> Path:
    """Mark the unit (job_id, task_id) unavailable; returns the per-unit file's path.

    Writes the per-unit file atomically, then the job's state file, under the job's lock.
    Publishing again replaces the diagnostics. Raises DirectoryNotAbsolute, InvalidUnitId or
    InvalidDecision (nothing is written then), SymlinkRefused / NotARegularFile for a planted
    entry under a name it writes (nothing is written then either), DirectoryUnusable, or
    OSError from the disk. The directory is created if missing.

    When the state line would pass its 8 KiB limit the per-unit file is still written and
    the state lists as many tasks as fit (see state.encode_state_within_limit); a warning is
    logged here, and the supervisor's reconcile turns it into an escalation.
    """
    root = absolute_directory(directory)
    job = checked_id("job_id", job_id)
    task = checked_id("task_id", task_id)
    content = encode_decision(job, task, decision)
    with open_directory(root, create=True) as found:
        assert found is not None  # create=True
        with found.lock(job):
            overflow = write_unit(found, job, task, content)
    path = root / unit_filename(job, task)
    if overflow is not None:
        log.warning("%s; the per-unit file %s is written", overflow, path)
    return path


def clear(directory: str | os.PathLike[str], job_id: str | int, task_id: str | int) -> bool:
    """Remove the unit's decision; True if there was a file to remove.

    The state file is rewritten without the task, or removed when no unit is left.
    Clearing also repairs a state file left behind by a killed publisher. A symlink under
    the unit's (or the state's) name is refused with SymlinkRefused: nothing is removed.
    """
    root = absolute_directory(directory)
    job = checked_id("job_id", job_id)
    task = checked_id("task_id", task_id)
    with open_directory(root, create=False) as found:
        if found is None:
            return False
        with found.lock(job):
            return remove_unit(found, job, task)


def write_unit(found: DecisionDirectory, job: str, task: str, content: bytes
               ) -> StateTooLarge | None:
    """Write one unit's file, then the job's state; the caller holds the job's lock.

    Every name it will write is checked first, so a planted link or directory refuses the
    whole write before anything changes. Returns the overflow when the state line was cut.
    """
    found.existing_regular(unit_filename(job, task))
    found.existing_regular(state_filename(job))
    found.write_atomic(unit_filename(job, task), content)
    return sync_state(found, job)


def remove_unit(found: DecisionDirectory, job: str, task: str) -> bool:
    """Remove one unit's file, then bring the state in step; the caller holds the lock."""
    found.existing_regular(state_filename(job))
    removed = found.remove(unit_filename(job, task))
    sync_state(found, job)
    return removed


def sync_state(found: DecisionDirectory, job: str) -> StateTooLarge | None:
    """Rewrite (or remove) the job's state file from its per-unit files. Hold the lock.

    The state is derived from the per-unit files (never read-modify-written), so a publisher
    killed between its two writes is repaired by the next publish, clear or reconcile.
    """
    excluded = excluded_tasks(found, job)
    name = state_filename(job)
    if not excluded:
        found.remove(name)
        return None
    line, overflow = encode_state_within_limit(excluded, job_id=job)
    if found.read(name, MAX_STATE_LINE_BYTES + 1) != line:
        found.write_atomic(name, line)
    return overflow


def read_state(directory: str | os.PathLike[str], job_id: str | int) -> list[str] | None:
    """The excluded task ids in the job's state file; None if there is none.

    Raises StateFormatError when its first line is not a complete compact array, and
    SymlinkRefused / NotARegularFile for a planted link or other entry under its name.
    """
    root = absolute_directory(directory)
    name = state_filename(checked_id("job_id", job_id))
    with open_directory(root, create=False) as found:
        head = None if found is None else found.read(name, MAX_STATE_LINE_BYTES + 1)
    return None if head is None else decode_state(head)


def list_decisions(
    directory: str | os.PathLike[str], job_id: str | int | None = None
) -> list[PublishedDecision]:
    """Every per-unit decision in the directory (of one job, if given), in id order.

    Only files that exclude their unit are listed: non-empty regular files, the entry
    itself (a symlink is not a decision dispatch lists, and its target is never read).
    """
    root = absolute_directory(directory)
    only = None if job_id is None else checked_id("job_id", job_id)
    found: list[PublishedDecision] = []
    with open_directory(root, create=False) as opened:
        if opened is None:
            return []
        for name in opened.names():
            ids = parse_unit_filename(name)
            if ids is None or (only is not None and ids[0] != only):
                continue
            info = opened.lstat(name)
            if info is None or not stat.S_ISREG(info.st_mode) or info.st_size == 0:
                continue
            try:
                raw = opened.read(name, MAX_DECISION_BYTES)
            except SegmentHealthError:
                continue  # replaced by a link or a FIFO since the lstat: not a decision
            if raw is None:
                continue  # cleared while we listed
            found.append(
                PublishedDecision(
                    job_id=ids[0],
                    task_id=ids[1],
                    path=root / name,
                    size=info.st_size,
                    decision=_parse_object(raw),
                )
            )
    found.sort(key=lambda d: (numeric_key(d.job_id), numeric_key(d.task_id)))
    return found


def _parse_object(raw: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def excluded_tasks(found: DecisionDirectory, job: str) -> set[str]:
    """Task ids of the job's per-unit files that exclude their unit: non-empty regular files
    (the entry itself; a link is not counted, as list_decisions does not list it)."""
    tasks: set[str] = set()
    for name in found.names():
        ids = parse_unit_filename(name)
        if ids is None or ids[0] != job:
            continue
        info = found.lstat(name)
        if info is not None and stat.S_ISREG(info.st_mode) and info.st_size > 0:
            tasks.add(ids[1])
    return tasks
