"""submitit's folder patterns: ``%j`` (the job id), ``%A`` / ``%a`` (an array's id and the
task's index), ``%t`` (the task: 0, the job's first) in the executor's ``folder``.

A call is pickled before its job exists, so before it has an id: its files go in a call
folder of their own under ``<first folder without a pattern>/.calls/``, and once the job
has its id, ``folder`` with the id put in (``log_test/%j`` -> ``log_test/1234``) is made a
link to that call folder. ``expand`` is pure; ``link`` makes the link."""

from __future__ import annotations

import os
from pathlib import Path

from dispatch.errors import BadInput

PATTERNS = ("%j", "%A", "%a", "%t")
CALLS = ".calls"


class FolderPatternError(BadInput, ValueError):
    """A folder pattern the job's id does not fit (submitit's ``ValueError``)."""


def has_pattern(folder: Path) -> bool:
    return any(p in str(folder) for p in PATTERNS)


def base_folder(folder: str | os.PathLike[str]) -> Path:
    """``folder`` up to its first component with a pattern (``log/%j`` -> ``log``), as
    submitit's ``get_first_id_independent_folder``."""
    kept: list[str] = []
    for part in Path(os.fspath(folder)).parts:
        if any(p in part for p in PATTERNS):
            break
        kept.append(part)
    return Path(*kept) if kept else Path(".")


def calls_folder(folder: Path) -> Path:
    """Where the call folders go: ``folder`` itself without a pattern, else
    ``<base>/.calls`` (the patterned folders are links into it)."""
    return folder if not has_pattern(folder) else base_folder(folder) / CALLS


def expand(folder: Path, job_id: str) -> Path:
    """``folder`` with ``job_id`` put in, as submitit's ``JobPaths``: ``%j`` the id, ``%t``
    0, ``%A`` the id before ``_``, ``%a`` the task after it (``FolderPatternError``, a
    ``ValueError``, when the job is no array task)."""
    text = str(folder).replace("%j", job_id).replace("%t", "0")
    array, _, index = job_id.partition("_")
    if "%a" in text:
        if not index:
            raise FolderPatternError(
                f"%a is in the folder {folder} but job {job_id} is no task of a job array"
            )
        text = text.replace("%a", index)
    return Path(text.replace("%A", array))


def link(folder: Path, job_id: str, target: Path) -> Path:
    """The job's folder: ``folder`` expanded for ``job_id``, made a (relative) link to the
    call folder ``target`` when it has a pattern; ``target`` itself otherwise. An existing
    path there is left as it is."""
    if not has_pattern(folder):
        return target
    path = expand(folder, job_id)
    if not os.path.lexists(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.symlink_to(os.path.relpath(target, path.parent), target_is_directory=True)
        except FileExistsError:
            pass  # made meanwhile (another waiter on the same job)
    return path
