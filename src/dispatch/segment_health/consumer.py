"""The segment health consumer (docs/semantics.md#h2): the launcher side.

Contract, sentence by sentence:
- Installed only where ``SLURM_PROCID=0``; any other launcher installs nothing, checks
  nothing and logs nothing.
- The unit: ``SLURM_ARRAY_JOB_ID`` / ``SLURM_ARRAY_TASK_ID`` for an array task, else
  ``SLURM_JOB_ID`` for both (as NVRx derives them).
- One metadata check of ``<dir>/segment_health_check.<job_id>.<task_id>``; the content is
  never opened or read.
- A non-empty regular file excludes the unit. A missing or zero-byte file proceeds quietly.
- An unreadable path or an unexpected file type (directory, FIFO, socket, device,
  permission denied) logs a warning and proceeds: fail open.
- An installed check logs ``Segment health check installed directory=<dir> job_id=<id>
  task_id=<id>`` once, at installation.

One metadata call, exactly (issue 12 item 9): ``os.stat(path)`` and nothing else, not even
on "not found"; the decision is made from its result alone.

Symlinks: ``os.stat`` follows links, as NVRx's ft_launcher does (``Path.stat()``), so every
consumer of one directory reaches the same decision: a link to a non-empty regular file
excludes the unit, a link to a zero-byte file proceeds, a link to a directory or device
fails open with a warning, and a dangling link is "not found" like a missing file and
proceeds quietly (one call cannot tell them apart: Path.stat() raises the same
FileNotFoundError for both). Following is safe here: the consumer only stats; it never
opens, creates or writes anything.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from dispatch.segment_health.artifact import (
    DirectoryNotAbsolute,
    absolute_directory,
    unit_filename,
)

__all__ = [
    "CheckResult",
    "DirectoryNotAbsolute",
    "Outcome",
    "SegmentCheck",
    "check",
    "classify",
    "install",
    "unit_from_environ",
]

INSTALLED_MESSAGE = "Segment health check installed directory=%s job_id=%s task_id=%s"


class Outcome(StrEnum):
    NOT_INSTALLED = "not-installed"  # not process 0 of the unit, or no directory given
    PROCEED = "proceed"  # missing or zero-byte decision: join quietly
    EXCLUDED = "excluded"  # non-empty regular file: this unit must not rejoin
    FAIL_OPEN = "fail-open"  # unreadable or unexpected: warned, join anyway

    @property
    def excluded(self) -> bool:
        return self is Outcome.EXCLUDED


@dataclass(frozen=True)
class CheckResult:
    outcome: Outcome
    reason: str  # one line a person can act on
    directory: Path | None = None
    job_id: str | None = None
    task_id: str | None = None
    path: Path | None = None

    @property
    def excluded(self) -> bool:
        return self.outcome is Outcome.EXCLUDED


def unit_from_environ(environ: Mapping[str, str]) -> tuple[str, str] | None:
    """(job_id, task_id) of this allocation unit, or None without a job identity. Pure."""
    job = environ.get("SLURM_ARRAY_JOB_ID") or environ.get("SLURM_JOB_ID")
    if not job:
        return None
    return job, environ.get("SLURM_ARRAY_TASK_ID") or job


def is_unit_process_zero(environ: Mapping[str, str]) -> bool:
    return environ.get("SLURM_PROCID") == "0"


def classify(mode: int, size: int) -> tuple[Outcome, str]:
    """The decision for one stat result. Pure."""
    if not stat.S_ISREG(mode):
        return Outcome.FAIL_OPEN, f"not a regular file ({_kind(mode)})"
    if size == 0:
        return Outcome.PROCEED, "zero-byte decision file"
    return Outcome.EXCLUDED, f"non-empty decision file ({size} bytes)"


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symlink"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return f"mode {stat.S_IFMT(mode):o}"


@dataclass(frozen=True)
class SegmentCheck:
    """An installed check for one allocation unit; ``run`` once per rendezvous round."""

    directory: Path
    job_id: str
    task_id: str

    @property
    def path(self) -> Path:
        return self.directory / unit_filename(self.job_id, self.task_id)

    def run(self, log: logging.Logger) -> CheckResult:
        path = self.path
        try:
            # The one metadata call: never open(), never read(), never a second stat.
            info = os.stat(path)
        except FileNotFoundError:  # missing, or a dangling link: the same to NVRx
            return self._result(Outcome.PROCEED, "no decision file")
        except OSError as exc:  # permission denied, not a directory, I/O error, ...
            return self._fail_open(log, f"{type(exc).__name__}: {exc.strerror or exc}")
        outcome, why = classify(info.st_mode, info.st_size)
        if outcome is Outcome.FAIL_OPEN:
            return self._fail_open(log, why)
        return self._result(outcome, why)

    def _result(self, outcome: Outcome, why: str) -> CheckResult:
        if outcome is Outcome.EXCLUDED:
            reason = (
                f"allocation unit job_id={self.job_id} task_id={self.task_id} is excluded "
                f"by segment health decision {self.path}: {why}"
            )
        else:
            reason = f"proceed: {why} at {self.path}"
        return CheckResult(outcome, reason, self.directory, self.job_id, self.task_id, self.path)

    def _fail_open(self, log: logging.Logger, why: str) -> CheckResult:
        log.warning("Ignoring segment health decision %s: %s; proceeding", self.path, why)
        return CheckResult(
            Outcome.FAIL_OPEN,
            f"proceed (fail open): {why} at {self.path}",
            self.directory,
            self.job_id,
            self.task_id,
            self.path,
        )


def install(
    directory: str | os.PathLike[str] | None,
    environ: Mapping[str, str],
    log: logging.Logger,
) -> SegmentCheck | None:
    """The check for this launcher, or None where it is not installed.

    Not installed (silently) without a directory (omitting it disables consumption) or where
    SLURM_PROCID is not "0". Process 0 without a job identity warns and installs nothing.
    Raises DirectoryNotAbsolute for a relative directory: a configuration error, refused
    at once rather than failed open on every round.
    """
    if directory is None or os.fspath(directory) == "":
        return None
    root = absolute_directory(directory)
    if not is_unit_process_zero(environ):
        return None
    unit = unit_from_environ(environ)
    if unit is None:
        log.warning(
            "Segment health check not installed: SLURM_PROCID=0 but neither "
            "SLURM_ARRAY_JOB_ID nor SLURM_JOB_ID is set"
        )
        return None
    job_id, task_id = unit
    try:
        unit_filename(job_id, task_id)
    except ValueError as exc:
        log.warning("Segment health check not installed: %s", exc)
        return None
    log.info(INSTALLED_MESSAGE, root, job_id, task_id)
    return SegmentCheck(root, job_id, task_id)


def check(
    directory: str | os.PathLike[str] | None,
    environ: Mapping[str, str],
    log: logging.Logger,
) -> CheckResult:
    """Install and run the check once (for a launcher that rendezvous once, or a script)."""
    installed = install(directory, environ, log)
    if installed is None:
        if directory is None or os.fspath(directory) == "":
            why = "no segment health directory configured"
        elif not is_unit_process_zero(environ):
            procid = environ.get("SLURM_PROCID")
            why = f"not process 0 of the allocation unit (SLURM_PROCID={procid!r})"
        else:
            why = "no usable Slurm job identity"
        return CheckResult(Outcome.NOT_INSTALLED, f"segment health check not installed: {why}")
    return installed.run(log)
