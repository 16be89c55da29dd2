"""Atomic file writes: a reader sees the old file or the whole new one, never a part, and what
was published survives a crash of the machine.

Every file is written to a fresh temp file in the same directory (so the rename stays on one
file system), opened with ``O_EXCL | O_NOFOLLOW``: a link planted at the temp name makes the
write fail instead of following it somewhere else.
"""

from __future__ import annotations

import os
import secrets
from pathlib import Path

_TEMP_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def fsync_dir(path: Path | str) -> None:
    """Make a rename or a new name in ``path`` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _temp_with(path: Path, data: bytes, mode: int) -> Path:
    """A fresh temp file beside ``path`` holding all of ``data``, synced; the caller publishes
    it (or removes it)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}")
    fd = os.open(tmp, _TEMP_FLAGS, mode)
    try:
        os.fchmod(fd, mode)  # the mode asked for, whatever the umask
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]  # os.write may take only part of it
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    return tmp


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def write_atomic(path: Path | str, data: bytes, *, mode: int = 0o644) -> None:
    """Replace ``path`` with ``data`` atomically and durably (temp file, fsync, rename, fsync
    of the directory)."""
    path = Path(path)
    tmp = _temp_with(path, data, mode)
    try:
        os.replace(tmp, path)
    except BaseException:
        _unlink_quietly(tmp)
        raise
    fsync_dir(path.parent)


def create_exclusive(path: Path | str, data: bytes, *, mode: int = 0o644) -> bool:
    """Publish ``path`` whole, only if no file of that name exists yet (a link, never a
    rename, so the first writer wins). False when another writer won."""
    path = Path(path)
    tmp = _temp_with(path, data, mode)
    try:
        os.link(tmp, path)
    except FileExistsError:
        return False
    finally:
        _unlink_quietly(tmp)
    fsync_dir(path.parent)
    return True


def read_at_most(fd: int, limit: int) -> bytes:
    """Up to ``limit`` bytes from ``fd``'s position, in pieces of at most 64 KiB: a file
    that grows, or lies about its size, costs no more than ``limit``."""
    chunks: list[bytes] = []
    left = limit
    while left > 0:
        chunk = os.read(fd, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)
