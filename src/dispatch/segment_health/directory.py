"""The shared decision directory, used only through one open descriptor and never followed.

Anyone who can write the decision directory (every launcher of the job may) can plant a
symbolic link under any name dispatch uses there. dispatch often runs as root, so it never
lets the directory's entries steer it elsewhere:

- the directory is opened once (``O_DIRECTORY``) and every name is opened relative to that
  descriptor (``dir_fd=``), so a directory swapped after the open changes nothing;
- every open adds ``O_NOFOLLOW`` (a symlink is refused with SymlinkRefused naming the path,
  never created through or written through), ``O_NONBLOCK`` (a planted FIFO never hangs a
  read) and ``O_NOCTTY``; an opened name that is not a regular file is refused;
- a file is only ever written as a fresh temp file (``O_CREAT | O_EXCL``: a planted name
  makes the create fail, it is never opened) that is renamed over the name; ``rename`` and
  ``unlink`` act on the directory entry itself, never on what a link names;
- a name that is a symlink where dispatch would replace or remove a file is refused rather
  than replaced: a planted link is a sign of tampering a person should look at.

The directory path itself is configuration (it may legitimately be a link to a mount) and
is followed once, when it is opened.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from dispatch.segment_health.artifact import SegmentHealthError, lock_filename
from dispatch.support.files import read_at_most

# Every open in the shared directory: never follow the name, never block on a FIFO, never
# take a terminal, never leak into a child.
_SAFE = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_TEMP_ATTEMPTS = 16


class SymlinkRefused(SegmentHealthError):
    """A name dispatch opens, replaces or removes in the decision directory is a symlink."""

    def __init__(self, path: Path) -> None:
        super().__init__(
            f"refusing {path}: it is a symbolic link; dispatch never follows a link in the "
            "shared segment health directory (check who planted it, then remove it)"
        )
        self.path = path


class NotARegularFile(SegmentHealthError):
    """A name dispatch opens, replaces or removes is a directory, FIFO, device or socket."""

    def __init__(self, path: Path, kind: str) -> None:
        super().__init__(f"refusing {path}: it is a {kind}, not a regular file")
        self.path = path
        self.kind = kind


class DirectoryUnusable(SegmentHealthError):
    """The decision directory cannot be created, opened or written."""

    def __init__(self, path: Path, why: str) -> None:
        super().__init__(f"segment health directory {path}: {why}")
        self.path = path
        self.why = why


def kind_of(mode: int) -> str:
    for test, name in (
        (stat.S_ISREG, "regular file"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
    ):
        if test(mode):
            return name
    return f"file of mode {stat.S_IFMT(mode):o}"


def check_usable(path: Path) -> None:
    """DirectoryUnusable unless ``path`` is a writable directory or could be created as one.

    Touches nothing: a validation before anything is written or recorded. The write itself
    may still fail (a full disk, a race); its OSError then names the file.
    """
    probe = path
    while True:
        try:
            info = os.stat(probe)
        except (FileNotFoundError, NotADirectoryError):  # walk up to what is there
            if probe.parent == probe:
                raise DirectoryUnusable(path, "no existing parent directory") from None
            probe = probe.parent
            continue
        except OSError as exc:
            raise DirectoryUnusable(path, f"cannot be examined: {exc.strerror or exc}") from exc
        break
    if not stat.S_ISDIR(info.st_mode):
        where = "it is" if probe == path else f"{probe} is"
        raise DirectoryUnusable(path, f"{where} a {kind_of(info.st_mode)}, not a directory")
    if not os.access(probe, os.W_OK | os.X_OK):
        what = "is not writable" if probe == path else f"cannot be created: {probe} is not writable"
        raise DirectoryUnusable(path, what)


class DecisionDirectory:
    """An open decision directory; every method works on names inside it, never following."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path = path
        self.fd = fd

    # ---- opening ---------------------------------------------------------------------
    def _open(self, name: str, flags: int, mode: int = 0o644) -> int:
        try:
            fd = os.open(name, flags | _SAFE, mode, dir_fd=self.fd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a symlink
                raise SymlinkRefused(self.path / name) from exc
            raise
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise NotARegularFile(self.path / name, kind_of(info.st_mode))
        except BaseException:
            os.close(fd)
            raise
        return fd

    # ---- metadata --------------------------------------------------------------------
    def names(self) -> list[str]:
        return os.listdir(self.fd)

    def lstat(self, name: str) -> os.stat_result | None:
        """The entry itself (a link is reported as a link), or None if there is none."""
        try:
            return os.stat(name, dir_fd=self.fd, follow_symlinks=False)
        except FileNotFoundError:
            return None

    # ---- the per-job lock --------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, job_id: str) -> Iterator[None]:
        """Exclusive flock on ``.segment_health_check.<job>.lock`` (created if missing).

        flock: the kernel releases it when the holder dies, so a killed publisher never
        leaves a stale lock. The file is left in place: unlinking a lock file others may hold
        or be opening is a race. Opening it never creates or follows a link.
        """
        # Read-only: flock needs no write access, and a hard link planted under the lock's
        # name (to a file dispatch must not touch) is never opened for writing.
        fd = self._open(lock_filename(job_id), os.O_RDONLY | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing the last descriptor releases the flock

    # ---- reading ---------------------------------------------------------------------
    def read(self, name: str, limit: int) -> bytes | None:
        """Up to ``limit`` bytes of the regular file ``name``; None if there is none."""
        try:
            fd = self._open(name, os.O_RDONLY)
        except FileNotFoundError:
            return None
        try:
            return read_at_most(fd, limit)
        finally:
            os.close(fd)

    # ---- writing ---------------------------------------------------------------------
    def existing_regular(self, name: str) -> bool:
        """Whether ``name`` exists; refuses a link or anything not a regular file."""
        info = self.lstat(name)
        if info is None:
            return False
        if stat.S_ISLNK(info.st_mode):
            raise SymlinkRefused(self.path / name)
        if not stat.S_ISREG(info.st_mode):
            raise NotARegularFile(self.path / name, kind_of(info.st_mode))
        return True

    def write_atomic(self, name: str, content: bytes) -> None:
        """A fresh temp file -> write -> fsync -> rename over ``name`` -> fsync the directory.

        A reader sees the old file, no file or the complete new one. The temp file is created
        with O_EXCL under a random name (a planted name fails the create, it is never opened)
        and mode 0644: launchers may run as other users and only need to stat or read it.
        """
        self.existing_regular(name)
        fd, temp = self._create_temp(name)
        try:
            os.fchmod(fd, 0o644)  # whatever the umask
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
            os.close(fd)
            fd = -1
            # rename acts on the entry: a link planted since the check above is replaced,
            # never written through.
            os.replace(temp, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)
            os.fsync(self.fd)  # make the rename itself durable
        except BaseException:
            if fd >= 0:
                os.close(fd)
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=self.fd)
            raise

    def _create_temp(self, name: str) -> tuple[int, str]:
        for _ in range(_TEMP_ATTEMPTS):
            temp = f".{name}.{secrets.token_hex(6)}.tmp"
            try:
                return self._open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), temp
            except (FileExistsError, SymlinkRefused):
                continue  # someone holds that name: pick another, never open theirs
        raise DirectoryUnusable(self.path, f"no free temp file name for {name}")

    def remove(self, name: str) -> bool:
        """Remove the regular file ``name``; False if there is none. A link is refused.

        ``unlink`` never follows a link, so removing a planted link would be harmless, but it
        is refused all the same: the link is evidence a person should see, and removing it
        would report a decision cleared that dispatch never wrote.
        """
        if not self.existing_regular(name):
            return False
        try:
            os.unlink(name, dir_fd=self.fd)
        except FileNotFoundError:
            return False
        os.fsync(self.fd)
        return True


@contextlib.contextmanager
def open_directory(directory: Path, *, create: bool) -> Iterator[DecisionDirectory | None]:
    """The open directory, or None when it does not exist and ``create`` is false.

    DirectoryUnusable when it cannot be created or opened, or is not a directory.
    """
    try:
        if create:
            directory.mkdir(parents=True, exist_ok=True)
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        if create:
            raise DirectoryUnusable(directory, "vanished while it was being created") from None
        yield None
        return
    except (NotADirectoryError, FileExistsError):
        raise DirectoryUnusable(directory, "not a directory") from None
    except OSError as exc:
        raise DirectoryUnusable(directory, exc.strerror or str(exc)) from exc
    try:
        yield DecisionDirectory(directory, fd)
    finally:
        os.close(fd)
