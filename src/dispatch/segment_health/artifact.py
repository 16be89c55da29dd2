"""The artifact contract shared by publisher and consumer: names, ids, typed errors.

docs/semantics.md#h1 and #h4: in an absolute directory,
``segment_health_check.<job_id>.<task_id>`` is the per-unit decision and
``segment_health_check.<job_id>.state`` the per-job list of excluded task ids.
Arrays use the array job id and the array task id; a regular job uses its job id for both.

Pure: no I/O here.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from dispatch.errors import BadInput

PREFIX = "segment_health_check"
STATE_SUFFIX = "state"

# Slurm job, array job and array task ids are decimal integers. Requiring digits keeps a
# name from escaping the directory (no "/" or ".."), keeps "<job>.<task>" parseable, keeps a
# task id from ever colliding with the ".state" name, and matches the H4 state format
# (NVRx validates the state line against ["<digits>",...]).
# Canonical, as Slurm prints them and as the consumer derives names: no leading zero (a
# file for task "007" would never be found by the consumer of task 7, so it is never
# written, and a name spelled so is not a decision file).
_ID = re.compile(r"0|[1-9][0-9]*")
_UNIT_NAME = re.compile(r"segment_health_check\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)")


class SegmentHealthError(BadInput):
    """Base of every error the segment health package raises on purpose."""


class DirectoryNotAbsolute(SegmentHealthError, ValueError):
    """The decision directory is not an absolute path (seed: "The path must be absolute")."""

    def __init__(self, directory: object) -> None:
        super().__init__(f"segment health directory must be an absolute path, got {directory!r}")
        self.directory = directory


class InvalidUnitId(SegmentHealthError, ValueError):
    """A job or task id that is not a canonical Slurm id (decimal digits, no leading zero)."""

    def __init__(self, what: str, value: object) -> None:
        hint = ""
        if isinstance(value, str) and value.isascii() and value.isdigit():
            hint = f" (write {value.lstrip('0') or '0'}: no leading zero)"
        super().__init__(f"{what} must be a Slurm id (decimal digits), got {value!r}{hint}")
        self.what = what
        self.value = value


def absolute_directory(directory: str | os.PathLike[str]) -> Path:
    """The directory as a Path, or DirectoryNotAbsolute. Does not touch the disk."""
    text = os.fspath(directory)
    if not isinstance(text, str) or not text or not os.path.isabs(text):
        raise DirectoryNotAbsolute(directory)
    return Path(text)


def checked_id(what: str, value: object) -> str:
    """A Slurm id as a string (ints accepted), or InvalidUnitId naming ``what``."""
    if isinstance(value, bool):
        raise InvalidUnitId(what, value)
    if isinstance(value, int):
        if value < 0:
            raise InvalidUnitId(what, value)
        return str(value)
    if isinstance(value, str) and _ID.fullmatch(value):
        return value
    raise InvalidUnitId(what, value)


def is_slurm_id(value: str) -> bool:
    """Whether ``value`` is a canonical Slurm id (what checked_id accepts as a string)."""
    return _ID.fullmatch(value) is not None


def numeric_key(digits: str) -> tuple[int, str, str]:
    """Sort key putting decimal id strings in numeric order, without int() (no size limit)."""
    significant = digits.lstrip("0")
    return len(significant), significant, digits


def unit_ids(
    slurm_job_id: str | int,
    array_job_id: str | int | None = None,
    array_task_id: str | int | None = None,
) -> tuple[str, str]:
    """(job_id, task_id) naming an allocation unit in the artifact.

    An array task is named by its array job id and array task id (SLURM_ARRAY_JOB_ID,
    SLURM_ARRAY_TASK_ID); a regular job by its own job id, twice. Giving one of the two
    array ids without the other is an error: it would name the wrong unit.
    """
    job = checked_id("slurm_job_id", slurm_job_id)
    if array_job_id is None and array_task_id is None:
        return job, job
    if array_job_id is None or array_task_id is None:
        raise InvalidUnitId(
            "array_job_id and array_task_id (give both or neither)",
            (array_job_id, array_task_id),
        )
    return checked_id("array_job_id", array_job_id), checked_id("array_task_id", array_task_id)


def unit_filename(job_id: str, task_id: str) -> str:
    return f"{PREFIX}.{checked_id('job_id', job_id)}.{checked_id('task_id', task_id)}"


def state_filename(job_id: str) -> str:
    return f"{PREFIX}.{checked_id('job_id', job_id)}.{STATE_SUFFIX}"


def lock_filename(job_id: str) -> str:
    # Hidden, and never a name a consumer derives.
    return f".{PREFIX}.{checked_id('job_id', job_id)}.lock"


def parse_unit_filename(name: str) -> tuple[str, str] | None:
    """(job_id, task_id) if ``name`` is a per-unit decision file name, else None."""
    match = _UNIT_NAME.fullmatch(name)
    if match is None:
        return None
    return match.group(1), match.group(2)
