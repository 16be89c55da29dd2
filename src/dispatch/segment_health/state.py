"""The H4 per-job state line: a compact JSON array of excluded task ids, as strings.

``segment_health_check.<job_id>.state`` holds one line, e.g. ``["7","12"]\\n``: no spaces,
each id a quoted decimal string, newline-terminated, at most 8 KiB. The NVRx revision that
reads it checks the line against exactly this shape and matches a task by its quoted token,
so "7" never matches "17".

Pure: bytes in, bytes out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from dispatch.segment_health.artifact import SegmentHealthError, checked_id, numeric_key

# The whole first line, newline included. NVRx reads at most 8 KiB + 1 bytes and accepts
# a line that ends in a newline within them; staying at <= 8192 with the newline is
# inside that on any reading of "at most 8 KiB".
MAX_STATE_LINE_BYTES = 8 * 1024

_COMPACT_ARRAY = re.compile(rb'\[(?:"[0-9]+"(?:,"[0-9]+")*)?\]')


class StateTooLarge(SegmentHealthError):
    """The excluded-task list would not fit in one 8 KiB state line."""

    def __init__(self, job_id: str, size: int, count: int) -> None:
        super().__init__(
            f"segment health state for job {job_id} would be {size} bytes for {count} excluded "
            f"tasks; the state line is limited to {MAX_STATE_LINE_BYTES} bytes"
        )
        self.job_id = job_id
        self.size = size
        self.count = count


class StateFormatError(SegmentHealthError, ValueError):
    """A state file whose first line is not a complete compact array of task ids."""


def encode_state(task_ids: Iterable[str], *, job_id: str = "?") -> bytes:
    """The state line for these excluded tasks: deduplicated, in numeric order.

    Raises StateTooLarge beyond MAX_STATE_LINE_BYTES (newline included).
    """
    ids = sorted({checked_id("task_id", t) for t in task_ids}, key=numeric_key)
    line = ("[" + ",".join(f'"{t}"' for t in ids) + "]\n").encode("ascii")
    if len(line) > MAX_STATE_LINE_BYTES:
        raise StateTooLarge(job_id, len(line), len(ids))
    return line


def decode_state(data: bytes) -> list[str]:
    """The task ids of a state file's first line; StateFormatError if it is not complete."""
    newline = data.find(b"\n")
    if newline < 0:
        raise StateFormatError("segment health state line is not newline-terminated")
    if newline + 1 > MAX_STATE_LINE_BYTES:
        raise StateFormatError(
            f"segment health state line is {newline + 1} bytes, over {MAX_STATE_LINE_BYTES}"
        )
    line = data[:newline]
    if _COMPACT_ARRAY.fullmatch(line) is None:
        raise StateFormatError(f"segment health state line is not a compact id array: {line!r}")
    inner = line[1:-1]
    return [token[1:-1].decode("ascii") for token in inner.split(b",")] if inner else []


def is_excluded(line: bytes, task_id: str) -> bool:
    """Whether a decoded-valid state line names ``task_id`` (exact quoted-token match)."""
    return b'"' + checked_id("task_id", task_id).encode("ascii") + b'"' in line


def encode_state_within_limit(
    task_ids: Iterable[str], *, job_id: str = "?"
) -> tuple[bytes, StateTooLarge | None]:
    """The state line, or when the full one would pass the limit, the longest one that fits.

    The shortened line lists the first tasks in numeric order: every task it names is
    excluded (nothing false is said), the ones left out are still excluded by their per-unit
    files, and the returned StateTooLarge says so for an escalation. Never raises it.
    """
    ids = sorted({checked_id("task_id", t) for t in task_ids}, key=numeric_key)
    try:
        return encode_state(ids, job_id=job_id), None
    except StateTooLarge as overflow:
        kept: list[str] = []
        size = len(b"[]\n")
        for task in ids:
            grow = len(task) + 2 + (1 if kept else 0)  # quotes, and a comma after the first
            if size + grow > MAX_STATE_LINE_BYTES:
                break
            kept.append(task)
            size += grow
        return encode_state(kept, job_id=job_id), overflow
