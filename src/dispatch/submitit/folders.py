"""submitit's folder patterns: ``%j`` (the job id), ``%A`` / ``%a`` (an array's id and the
task's index), ``%t`` (the task: 0, the job's first) in the executor's ``folder``.

A call is pickled before its job exists, so before it has an id: its files go in a call
folder of their own under ``<first folder without a pattern>/.calls/``, and once the job
has its id, ``folder`` with the id put in (``log_test/%j`` -> ``log_test/1234``) is made a
link to that call folder. ``expand`` is pure; ``link`` makes the link.

Every folder dispatch writes into here (the base folder, the folders a pattern makes, the
``.calls`` folder) follows dispatch.support.trusted_folders' rule: ours, and nobody else can
write it unless it is sticky (``UnsafeFolder`` otherwise). A ``%j`` path that is there
already is used only when it is the very link dispatch makes, made by us: one planted by
another user (in a sticky folder, before the job had its id) is refused, never followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from dispatch.errors import BadInput
from dispatch.fn.calls import UnsafeFolder
from dispatch.support.trusted_folders import FIX, Untrusted, check_folder, make_folders

PATTERNS = ("%j", "%A", "%a", "%t")
CALLS = ".calls"
# The longest file name most file systems take (NAME_MAX), and the room a job id may take in
# one (a Slurm array task's id, 1234567_1234, with room to spare).
MOST_NAME_BYTES = 255
ID_ROOM = 24


class FolderPatternError(BadInput, ValueError):
    """A folder pattern the job's id does not fit (submitit's ``ValueError``)."""


class BadFolder(BadInput, ValueError):
    """An executor ``folder`` that cannot be used (a name too long, a place no folder can be
    made): names the parameter and why."""


def check_name(folder: Path) -> None:
    """Refuse (``BadFolder``) a folder whose name no file system takes: a NUL byte, or a
    component over ``MOST_NAME_BYTES`` once a job id is put in. Pure."""
    if "\0" in str(folder):
        raise BadFolder(f"folder={str(folder)!r}: a path has no NUL byte")
    for part in folder.parts:
        size = len(part.encode("utf-8", "surrogateescape"))
        size += sum(part.count(p) * (ID_ROOM - len(p)) for p in PATTERNS)
        if size > MOST_NAME_BYTES:
            raise BadFolder(f"folder={str(folder)!r}: its component {part[:40]!r}... is "
                            f"{size} bytes with a job id put in, more than the "
                            f"{MOST_NAME_BYTES} a file name may have")


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
    call folder ``target`` when it has a pattern; ``target`` itself otherwise. The folders
    between the base folder and the link are made as ours and checked; a link there already
    must be the one this makes, made by us (``UnsafeFolder`` otherwise, naming it)."""
    if not has_pattern(folder):
        return target
    path = expand(folder, job_id)
    wanted = os.path.relpath(target, path.parent)
    base = base_folder(folder)
    try:
        check_folder(base)  # as at the executor's start: it may have changed hands since
        make_folders(base, path.parent)
        try:
            os.symlink(wanted, path, target_is_directory=True)
        except FileExistsError:
            pass  # made meanwhile (another waiter on the same job), or planted: see below
        st = os.lstat(path)
        ours = (stat.S_ISLNK(st.st_mode) and st.st_uid == os.getuid()
                and os.readlink(path) == wanted)
    except Untrusted as err:
        raise UnsafeFolder(f"job folder {path}: {err.path} {err.problem}: {FIX}") from None
    except OSError as err:
        raise BadFolder(f"folder={str(folder)!r}: cannot make the job's folder {path}: "
                        f"{err.strerror or err}") from None
    if not ours:
        raise UnsafeFolder(f"job folder {path} is there already and is not the link dispatch "
                           f"makes to {target} (owner uid {st.st_uid}): remove it, and {FIX}")
    return path
