"""The SQLite store's file: where it is by default, making it (private), and what a
sqlite3 error means in words for the person reading the message."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Mapping
from pathlib import Path

from dispatch.stores.base import StoreError

# What a sqlite3 error code means for the person reading the message.
_HINTS = {
    "SQLITE_FULL": "the disk is full",
    "SQLITE_READONLY": "the file, its directory or its -wal/-shm files are read-only",
    "SQLITE_CORRUPT": "the file is damaged",
    "SQLITE_NOTADB": "the file is not a SQLite database",
    "SQLITE_CANTOPEN": "the file or its -wal/-shm files cannot be opened",
    "SQLITE_IOERR": "an I/O error",
    "SQLITE_PERM": "permission denied",
}


def words(err: sqlite3.Error, directory: Path | None = None) -> str:
    name = getattr(err, "sqlite_errorname", "") or ""
    hint = next((h for code, h in _HINTS.items() if name.startswith(code)), None)
    if (directory is not None and name.startswith(("SQLITE_CANTOPEN", "SQLITE_READONLY"))
            and not os.access(directory, os.W_OK)):
        # WAL keeps its -wal and -shm files beside the database: the directory must be
        # writable too (a read-only mount, a directory made immutable).
        hint = f"directory {directory} is not writable (read-only or immutable)"
    return f"{err} ({hint})" if hint else str(err)


def default_path(env: Mapping[str, str] = os.environ) -> Path:
    """$XDG_STATE_HOME/dispatch/record.sqlite3, else ~/.local/state/dispatch/record.sqlite3.

    A relative XDG_STATE_HOME is ignored, as the XDG spec says.
    """
    state = env.get("XDG_STATE_HOME", "")
    if state and os.path.isabs(state):
        base = Path(state)
    else:
        home = env.get("HOME") or os.path.expanduser("~")
        base = Path(home) / ".local" / "state"
    return base / "dispatch" / "record.sqlite3"


def prepare_file(path: Path, where: str, create_parent: bool) -> None:
    """Create the directory (0700, default location only) and the file (0600) when
    missing: records name commands, environments and hosts, which are nobody else's
    business. Existing ones are left as they are; anything but a file is refused."""
    parent = path.parent
    try:
        if not parent.exists():
            if not create_parent:
                raise StoreError(
                    f"{where}: directory {parent} does not exist "
                    "(dispatch creates only its default store's directory; create it, or "
                    "check the path)")
            os.makedirs(parent, mode=0o700, exist_ok=True)
        elif not parent.is_dir():
            raise StoreError(f"{where}: {parent} is not a directory")
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None and not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
            raise StoreError(f"{where} is {kind}")
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            return
        try:
            os.fchmod(fd, 0o600)
        finally:
            os.close(fd)
    except OSError as err:
        raise StoreError(f"cannot create record store {where}: "
                         f"{err.strerror or err}") from None
