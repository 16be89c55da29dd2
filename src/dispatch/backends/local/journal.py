"""The local root's change journal (issue 49): one line per object whose report may have
changed, so a backend's look reads only those objects instead of every object's files.

Who appends (``note_change``): a runner after each status it writes and after a node's
progress file changed (runner.py), and a submit after it publishes an object. Each append
opens the file with O_APPEND, writes one whole line (``<ref>\\n``, far below a page: one
write, never interleaved with another writer's) and closes it. A change is always made
before its line is appended, so a reader that read the line reads the change.

What no file says, a runner's death (SIGKILL, the OOM killer), is not in the journal: the
backend learns it from the runner's process (deaths.py).

A reader (``JournalReader``) keeps where it stopped, by the file's identity (device, inode)
and offset. It starts at the journal's end before a full look, so nothing appended during
that look is missed. When the journal grows past ``ROTATE_BYTES`` the reader that sees it
renames it to ``changes.log.old`` (a writer that opened it before still appends there, and
a reader that stopped in it reads on there first); a reader that cannot say what it missed
(the journal rotated twice, truncated, unreadable, or replaced by another file) answers
None: its backend looks at every object again.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

JOURNAL = "changes.log"
ROTATED = "changes.log.old"
ROTATE_BYTES = 8 << 20
_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC
_LINE = re.compile(rb"[A-Za-z0-9][A-Za-z0-9_.-]{0,199}")
# A read takes at most this much at once (a journal is read often, so it stays small).
_CHUNK = 1 << 20


def note_change(root: Path, ref: str) -> bool:
    """Append ``ref`` to ``root``'s journal; False when it cannot be written now (a full
    disk, the root away): the caller tries again at its next step."""
    try:
        fd = os.open(root / JOURNAL, _FLAGS, 0o600)
    except OSError:
        return False
    try:
        return os.write(fd, ref.encode() + b"\n") == len(ref) + 1
    except OSError:
        return False
    finally:
        os.close(fd)


def _identity(path: Path) -> tuple[int, int, int] | None:
    """(device, inode, size) of ``path``, None when it is not there."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except FileNotFoundError:
        return None
    return st.st_dev, st.st_ino, st.st_size


class JournalReader:
    """Where one backend stopped reading its root's journal."""

    def __init__(self, root: Path) -> None:
        self.path = root / JOURNAL
        self.rotated = root / ROTATED
        self._at: tuple[int, int] | None = None  # (device, inode) read; None: none yet
        self._offset = 0
        self._started = False
        self._rotated_at_start: tuple[int, int] | None = None

    def start(self) -> None:
        """From the journal's end as it is now (before a full look)."""
        now, old = _identity(self.path), _identity(self.rotated)
        self._at = now[:2] if now else None
        self._offset = now[2] if now else 0
        self._rotated_at_start = old[:2] if old else None
        self._started = True

    def read(self) -> set[str] | None:
        """The refs appended since the last read (or ``start``); None when what was appended
        cannot be known (never started, rotated twice, truncated, unreadable)."""
        if not self._started:
            return None
        try:
            return self._read()
        except OSError:
            self._started = False
            return None

    def _read(self) -> set[str] | None:
        now = _identity(self.path)
        refs: set[str] = set()
        if now is None and self._at is None:
            return refs  # no journal yet, and none before
        if now is None or now[:2] != self._at:
            # Rotated since: read on in the old file when it is the one we stopped in.
            old = _identity(self.rotated)
            if self._at is not None:
                if old is None or old[:2] != self._at:
                    return self._lose()
                if self._take(self.rotated, old, refs) is None:
                    return self._lose()
                self._rotated_at_start = self._at
            elif old is not None and old[:2] != self._rotated_at_start:
                return self._lose()  # made and rotated away since start: not all seen
            if now is None:
                self._at, self._offset = None, 0
                return refs
            self._at, self._offset = now[:2], 0
        if self._take(self.path, now, refs) is None:
            return self._lose()
        if self._offset >= ROTATE_BYTES:
            try:
                os.replace(self.path, self.rotated)
            except OSError:
                pass  # another reader rotated it, or cannot: read on where we are
        return refs

    def _take(self, path: Path, ident: tuple[int, int, int], refs: set[str]) -> int | None:
        """Read ``path`` from the offset on into ``refs`` (whole lines only); None when it is
        shorter than the offset (truncated) or another file than the one named."""
        if ident[2] < self._offset:
            return None
        fd = os.open(path, _READ)
        try:
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != ident[:2]:
                return None
            os.lseek(fd, self._offset, os.SEEK_SET)
            while True:
                data = os.read(fd, _CHUNK)
                if not data:
                    break
                end = data.rfind(b"\n")
                if end < 0:
                    if len(data) < _CHUNK:
                        break  # a line still being written: read it next time
                    return None  # no line is this long: not a journal
                for line in data[:end].split(b"\n"):
                    if _LINE.fullmatch(line):
                        refs.add(line.decode())
                self._offset += end + 1
                if end + 1 < len(data):
                    os.lseek(fd, self._offset, os.SEEK_SET)
        finally:
            os.close(fd)
        return self._offset

    def _lose(self) -> set[str] | None:
        """What was appended cannot be known: a full look, and ``start`` before it."""
        self._started = False
        return None


def _signature(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns


class RunnerNotes:
    """A runner's side of the journal: a line owed after each status that says something
    new (never a heartbeat's), and after a node's progress file changed (its training
    writes it: the runner looks at its size and time at each step). A line that cannot be
    appended now is appended at a later step."""

    def __init__(self, objdir: Path, progress: list[Path]) -> None:
        self.root = objdir.parent.parent
        self.ref = objdir.name
        self.progress = progress
        self.seen: tuple[tuple[int, int, int] | None, ...] | None = None
        self.owed = False

    def changed(self) -> None:
        self.owed = True

    def step(self) -> None:
        now = tuple(_signature(p) for p in self.progress)
        if now != self.seen:
            self.seen, self.owed = now, True
        if self.owed:
            self.owed = not note_change(self.root, self.ref)
