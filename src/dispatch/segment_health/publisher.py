"""Publish and clear segment health decisions (DESIGN.md H1, H4): the supervisor side.

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
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
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
    lock_filename,
    numeric_key,
    parse_unit_filename,
    state_filename,
    unit_filename,
    unit_ids,
)
from dispatch.segment_health.state import (
    MAX_STATE_LINE_BYTES,
    StateFormatError,
    StateTooLarge,
    decode_state,
    encode_state,
)

__all__ = [
    "DirectoryNotAbsolute",
    "InvalidDecision",
    "InvalidUnitId",
    "MAX_STATE_LINE_BYTES",
    "PublishedDecision",
    "SegmentHealthError",
    "StateFormatError",
    "StateTooLarge",
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
    Publishing again replaces the diagnostics. Raises DirectoryNotAbsolute, InvalidUnitId,
    InvalidDecision, or StateTooLarge (nothing is written then); OSError from the disk.
    The directory is created if missing.
    """
    root = absolute_directory(directory)
    job = checked_id("job_id", job_id)
    task = checked_id("task_id", task_id)
    content = encode_decision(job, task, decision)
    root.mkdir(parents=True, exist_ok=True)
    target = root / unit_filename(job, task)
    with _job_lock(root, job):
        excluded = _excluded_tasks(root, job)
        excluded.add(task)
        state = encode_state(excluded, job_id=job)  # refuse before writing anything
        _write_atomically(root, target.name, content)
        _write_atomically(root, state_filename(job), state)
    return target


def clear(directory: str | os.PathLike[str], job_id: str | int, task_id: str | int) -> bool:
    """Remove the unit's decision; True if there was a file to remove.

    The state file is rewritten without the task, or removed when no unit is left.
    Clearing also repairs a state file left behind by a killed publisher.
    """
    root = absolute_directory(directory)
    job = checked_id("job_id", job_id)
    task = checked_id("task_id", task_id)
    if not root.is_dir():
        return False
    target = root / unit_filename(job, task)
    with _job_lock(root, job):
        try:
            target.unlink()
            removed = True
        except FileNotFoundError:
            removed = False
        if removed:
            _fsync_directory(root)
        _sync_state(root, job)
    return removed


def read_state(directory: str | os.PathLike[str], job_id: str | int) -> list[str] | None:
    """The excluded task ids in the job's state file; None if there is none.

    Raises StateFormatError when its first line is not a complete compact array.
    """
    root = absolute_directory(directory)
    path = root / state_filename(checked_id("job_id", job_id))
    try:
        with path.open("rb") as stream:
            head = stream.read(MAX_STATE_LINE_BYTES + 1)
    except FileNotFoundError:
        return None
    return decode_state(head)


def list_decisions(
    directory: str | os.PathLike[str], job_id: str | int | None = None
) -> list[PublishedDecision]:
    """Every per-unit decision in the directory (of one job, if given), in id order.

    Only files that exclude their unit are listed (non-empty regular files); zero-byte or
    other entries under a decision name are not decisions.
    """
    root = absolute_directory(directory)
    only = None if job_id is None else checked_id("job_id", job_id)
    found: list[PublishedDecision] = []
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return []
    for name in names:
        ids = parse_unit_filename(name)
        if ids is None or (only is not None and ids[0] != only):
            continue
        path = root / name
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode) or info.st_size == 0:
                continue
            raw = path.read_bytes()
        except FileNotFoundError:
            continue  # cleared while we listed
        found.append(
            PublishedDecision(
                job_id=ids[0],
                task_id=ids[1],
                path=path,
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


def _excluded_tasks(root: Path, job: str) -> set[str]:
    """Task ids of the job's per-unit files that exclude their unit, as the consumer sees them."""
    tasks: set[str] = set()
    for name in os.listdir(root):
        ids = parse_unit_filename(name)
        if ids is None or ids[0] != job:
            continue
        try:
            info = os.stat(root / name)
        except FileNotFoundError:
            continue
        if stat.S_ISREG(info.st_mode) and info.st_size > 0:
            tasks.add(ids[1])
    return tasks


def _sync_state(root: Path, job: str) -> None:
    """Rewrite (or remove) the job's state file from its per-unit files. Hold the lock."""
    excluded = _excluded_tasks(root, job)
    name = state_filename(job)
    if excluded:
        # Cannot exceed the limit unless someone wrote unit files by hand; then refuse
        # loudly rather than publish a line NVRx would reject.
        _write_atomically(root, name, encode_state(excluded, job_id=job))
    else:
        with contextlib.suppress(FileNotFoundError):
            (root / name).unlink()
            _fsync_directory(root)


@contextlib.contextmanager
def _job_lock(root: Path, job: str) -> Iterator[None]:
    fd = os.open(root / lock_filename(job), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing the last descriptor releases the flock


def _write_atomically(root: Path, name: str, content: bytes) -> None:
    """temp file in ``root`` -> write -> fsync -> rename over ``name`` -> fsync ``root``."""
    fd, temp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=root)
    try:
        # Launchers may run as other users; the H4 state is read by NVRx, so world-readable.
        os.fchmod(fd, 0o644)
        view = memoryview(content)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
        os.close(fd)
        fd = -1
        os.replace(temp, root / name)
        _fsync_directory(root)  # make the rename itself durable
    except BaseException:
        if fd >= 0:
            os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise


def _fsync_directory(root: Path) -> None:
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
