"""Values a spec takes from the submitter's environment (``env_from_host``), kept beside the
record and never in it.

At submission the values are read from the submitting process's environment (a missing one is
a ``SpecError``, nothing recorded) and written to ``<state home>/secrets/<job id>/env.json``:
the file 0600, both directories 0700, written without following links. The record keeps the
names only. Every later submission of the job (a resubmit, made by whichever supervisor holds
the scope, maybe much later) reads them again from that file, so the supervisor must run as
the same user on the same machine (the same state home); where it cannot read them the
submission is rejected (``launch-failed``) and says why. The file is removed when the job's
outcome is committed.
"""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

from dispatch.core.spec import SpecError
from dispatch.errors import BadInput
from dispatch.support.files import write_atomic
from dispatch.support.paths import state_home

SECRETS = "secrets"
ENV_FILE = "env.json"
# What a dry run shows in place of a value it never reads.
PLACEHOLDER = "<from the submitting environment>"


class HostEnvUnavailable(BadInput):
    """The values kept for a job cannot be read or written here: names the file and why."""


def secrets_root() -> Path:
    return state_home() / SECRETS


def job_dir(job_id: str) -> Path:
    if not job_id or "/" in job_id or job_id in (".", ".."):
        raise HostEnvUnavailable(f"not a job id for a secrets directory: {job_id!r}")
    return secrets_root() / job_id


def read_from(environ: Mapping[str, str], names: Sequence[str],
              source: str = "<spec>") -> dict[str, str]:
    """The values of ``names`` in ``environ``; SpecError naming the first that is not set."""
    values: dict[str, str] = {}
    for i, name in enumerate(names):
        value = environ.get(name)
        if value is None:
            raise SpecError(source, f"env_from_host[{i}]", f"{name} is not set in the "
                            "submitting environment")
        if "\x00" in value:
            raise SpecError(source, f"env_from_host[{i}]", f"{name} holds a NUL byte")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise SpecError(source, f"env_from_host[{i}]", f"{name} is not UTF-8 text in the "
                            "submitting environment") from None
        values[name] = value
    return values


def _private_dir(path: Path) -> None:
    """Make ``path`` a directory only its owner (this user) can enter: made 0700, or, when it
    exists, a real directory (never a link) owned by this user, tightened to 0700."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise HostEnvUnavailable(f"{path} is not a directory (a link or a file is never "
                                 "followed for secrets)")
    if info.st_uid != os.getuid():
        raise HostEnvUnavailable(f"{path} belongs to uid {info.st_uid}, not to this user")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)


def save(job_id: str, values: Mapping[str, str]) -> Path:
    """Keep ``values`` for the job's submissions: ``<state home>/secrets/<job>/env.json``."""
    directory = job_dir(job_id)
    try:
        directory.parent.parent.mkdir(parents=True, exist_ok=True)
        _private_dir(directory.parent)
        _private_dir(directory)
        path = directory / ENV_FILE
        write_atomic(path, msgspec.json.encode(dict(values)), mode=0o600)
    except OSError as err:
        raise HostEnvUnavailable(f"cannot keep the env_from_host values in {directory}: "
                                 f"{err.strerror}") from None
    return path


def load(job_id: str, names: Sequence[str]) -> dict[str, str]:
    """The values kept for the job; HostEnvUnavailable when they cannot be read here."""
    path = job_dir(job_id) / ENV_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        why = "not kept on this machine (submitted from another host or state home?)" \
            if err.errno == errno.ENOENT else err.strerror
        raise HostEnvUnavailable(f"the env_from_host values of job {job_id} cannot be read "
                                 f"from {path}: {why}") from None
    try:
        with os.fdopen(fd, "rb") as f:
            raw = f.read()
        values = msgspec.json.decode(raw, type=dict[str, str])
    except (OSError, msgspec.DecodeError) as err:
        raise HostEnvUnavailable(f"{path} is unreadable: {err}") from None
    missing = [n for n in names if n not in values]
    if missing:
        raise HostEnvUnavailable(f"{path} has no value for {', '.join(missing)}")
    return {n: values[n] for n in names}


def forget(job_id: str) -> None:
    """Remove what was kept for the job (its outcome is committed); nothing there is fine."""
    try:
        shutil.rmtree(job_dir(job_id))
    except FileNotFoundError:
        pass
