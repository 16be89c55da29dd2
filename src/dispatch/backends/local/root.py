"""A local root on disk: its marker, its objects, and strict, cached reads of their files.

The marker (``root.json``, with an id) is written once, at the first submit, and every ref
made in the root names it (``l-<root id>-<object id>``). Together they make an absent object
a positive answer: a root that is missing, unreadable, not a directory, or present without
its marker (an unmounted mount point, a wrong path) is unreachable, and a ref made in another
root is not answered for; only a ref of this very root with no object here is ended.

The root and its folders (objects/, staging/, claims/) must be ours and closed to other
writers (dispatch.support.trusted_folders): another user who can write them could move a
running job's object away (read as ended) or lay out a claims/ folder of theirs. Such a root
is unreachable, never read (``check_trusted``), naming the root and the fix.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from dispatch.backends.local.wire import (
    CLAIMS,
    META,
    OBJECTS,
    ROOT_MARKER,
    RUNNER,
    STAGING,
    STATUS,
    ObjectMeta,
    ObjectStatus,
    RootMarker,
    RunnerInfo,
    utcnow,
)
from dispatch.core.model import SchedulerUnreachable
from dispatch.support.files import create_exclusive, fsync_dir, write_atomic
from dispatch.support.paths import LOCAL_ROOT, state_home
from dispatch.support.trusted_folders import FIX, Untrusted, check_folder


def default_root() -> Path:
    """``<state home>/local``: ``$XDG_STATE_HOME/dispatch/local``, else
    ``~/.local/state/dispatch/local``."""
    return state_home() / "local"


def _read(path: Path) -> bytes:
    """Every file the backend reads goes through here (tests count the reads)."""
    return path.read_bytes()


def _unreachable(reason: str) -> SchedulerUnreachable:
    return SchedulerUnreachable("local", reason)


def check_trusted_folder(root: Path, folder: Path) -> None:
    """Refuse (SchedulerUnreachable, exit 4) a folder of the local root ``root`` that another
    user owns or that others can write without the sticky bit; nothing there is fine."""
    try:
        check_folder(folder)
    except Untrusted as err:
        raise _unreachable(
            f"the local root {root} is not safe to use: {err.path} {err.problem}; {FIX} "
            f"(set {LOCAL_ROOT} to it)") from None


_REF_ROOT = re.compile(r"l-([0-9a-f]{8})-[0-9a-f]{8}")


def new_ref(root_id: str) -> str:
    """A fresh ref, naming the root it is made in."""
    return f"l-{root_id[:8]}-{secrets.token_hex(4)}"


def ref_root(ref: str) -> str | None:
    """The root a ref was made in (the first 8 hex digits of its id); None for refs made
    before roots had markers."""
    m = _REF_ROOT.fullmatch(ref)
    return m.group(1) if m else None


def marker_id(root: Path) -> str | None:
    """The id in ``root``'s marker, or None when it cannot be read (for the runner)."""
    try:
        return msgspec.json.decode(_read(root / ROOT_MARKER), type=RootMarker).id
    except (OSError, msgspec.DecodeError):
        return None


def wait_published(objdir: Path, wait_s: float,
                   stop: Callable[[], bool] = lambda: False) -> bool:
    """For a starting runner: submit starts it, then publishes the object directory; a submit
    that crashed in between never publishes it, and the runner leaves. So does a runner told
    to stop (``stop()``: a SIGTERM) before it was published."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not stop():
        if (objdir / META).exists() and (objdir / RUNNER).exists():
            return True
        time.sleep(0.005)
    return False


def write_request(control: Path, name: str, data: bytes) -> None:
    """Write a control request atomically. On a full disk, the request is still made by its
    name alone: an empty file needs no data block (the runner reads it as a request without
    its details), so a job filling the disk can still be stopped."""
    control.mkdir(exist_ok=True)
    try:
        write_atomic(control / name, data)
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        try:
            os.close(os.open(control / name, os.O_WRONLY | os.O_CREAT | os.O_EXCL
                             | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644))
        except FileExistsError:
            pass


class LocalRoot:
    """The files of one root. Caches hold only files that never change once written."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.objects_dir = path / OBJECTS
        self.staging_dir = path / STAGING
        self.marker_path = path / ROOT_MARKER
        self._meta: dict[str, ObjectMeta] = {}
        self._runner: dict[str, RunnerInfo] = {}

    # ------------------------------------------------------------ the root itself

    def check_trusted(self) -> None:
        """Refuse (SchedulerUnreachable) a root, or a folder of it, that another user owns or
        that others can write without the sticky bit. One that is not there, or is no
        directory, is left to ``marker`` and ``scan`` (unreachable, in their words)."""
        for folder in (self.path, self.objects_dir, self.staging_dir, self.path / CLAIMS):
            if folder.is_dir():
                check_trusted_folder(self.path, folder)

    def marker(self) -> RootMarker:
        """The root's marker; SchedulerUnreachable when the root is not there to be asked, or
        cannot be trusted (``check_trusted``)."""
        self.check_trusted()
        try:
            raw = _read(self.marker_path)
        except FileNotFoundError:
            if self.path.is_dir():
                raise _unreachable(
                    f"the local root {self.path} has no {ROOT_MARKER}: it is not mounted, "
                    "or not a dispatch root") from None
            raise _unreachable(f"the local root {self.path} is missing") from None
        except NotADirectoryError:
            raise _unreachable(f"the local root {self.path} is not a directory") from None
        except OSError as err:
            raise _unreachable(f"cannot read {self.marker_path}: {err}") from None
        try:
            return msgspec.json.decode(raw, type=RootMarker, strict=True)
        except msgspec.DecodeError as err:
            raise _unreachable(f"{self.marker_path} unreadable: {err}") from None

    def adopt_legacy(self) -> RootMarker | None:
        """Give its marker to a root made before markers existed: it has an objects directory
        and no object in it names a root. (An unmounted mount point has no objects directory;
        a root that lost its marker has objects that name it.) None when it is not one;
        SchedulerUnreachable for a root another user could change (``check_trusted``)."""
        self.check_trusted()
        if not self.objects_dir.is_dir() or self.marker_path.exists():
            return None
        try:
            refs = self.scan()
        except SchedulerUnreachable:
            return None
        for ref in refs:
            meta = self.load_meta(ref)
            if not isinstance(meta, ObjectMeta) or meta.root_id:
                return None
        mine = RootMarker(id=secrets.token_hex(8), created_at=utcnow())
        try:
            if create_exclusive(self.marker_path, msgspec.json.encode(mine)):
                return mine
        except OSError:
            return None
        return None

    def never_used(self) -> bool:
        """True when the root was never made: its path does not exist, or is an empty
        directory (a first submit that died before writing the marker)."""
        try:
            return not os.listdir(self.path)
        except FileNotFoundError:
            return True
        except OSError:
            return False

    def claim(self) -> RootMarker:
        """For a submit: the root's marker, making the root (and its marker) at first use.

        A directory without a marker gets a new one, even when it is an unmounted mount
        point: that is safe because every ref names the root it was made in (``ref_root``),
        so a ref of the other root is never read as ended here."""
        self.check_trusted()
        try:
            return self.marker()
        except SchedulerUnreachable:
            pass
        try:
            self.objects_dir.mkdir(parents=True, exist_ok=True)
            self.staging_dir.mkdir(parents=True, exist_ok=True)
            self.check_trusted()  # as made: no other user's folder among them
            fsync_dir(self.path)
            mine = RootMarker(id=secrets.token_hex(8), created_at=utcnow())
            if create_exclusive(self.marker_path, msgspec.json.encode(mine)):
                return mine
        except OSError as err:
            raise _unreachable(f"cannot make the local root {self.path}: {err}") from None
        return self.marker()  # another submit made it first

    def scan(self) -> list[str]:
        """The refs of every object (the root must have been checked with marker())."""
        try:
            with os.scandir(self.objects_dir) as it:
                return sorted(e.name for e in it if not e.name.startswith("."))
        except OSError as err:
            raise _unreachable(f"cannot read {self.objects_dir}: {err}") from None

    # ------------------------------------------------------------ one object

    def object_dir(self, ref: str) -> Path:
        return self.objects_dir / ref

    def find(self, match: Callable[[ObjectMeta], bool]) -> list[str]:
        out = []
        for ref in self.scan():
            meta = self.load_meta(ref)
            if isinstance(meta, ObjectMeta) and match(meta):
                out.append(ref)
        return out

    def load_meta(self, ref: str) -> ObjectMeta | str:
        """The object's meta (cached: it never changes), or why it cannot be read."""
        cached = self._meta.get(ref)
        if cached is not None:
            return cached
        try:
            meta = msgspec.json.decode(_read(self.objects_dir / ref / META), type=ObjectMeta,
                                       strict=True)
        except FileNotFoundError:
            return "missing"
        except (OSError, msgspec.DecodeError) as err:
            return str(err)
        self._meta[ref] = meta
        return meta

    def load_runner(self, ref: str) -> RunnerInfo | None:
        cached = self._runner.get(ref)
        if cached is not None:
            return cached
        try:
            info = msgspec.json.decode(_read(self.objects_dir / ref / RUNNER), type=RunnerInfo,
                                       strict=True)
        except (OSError, msgspec.DecodeError):
            return None
        self._runner[ref] = info
        return info

    def read_status(self, ref: str, name: str = STATUS) -> ObjectStatus | str | None:
        try:
            return msgspec.json.decode(_read(self.objects_dir / ref / name), type=ObjectStatus,
                                       strict=True)
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError) as err:
            return str(err)

    def remember(self, meta: ObjectMeta, info: RunnerInfo) -> None:
        self._meta[meta.ref] = meta
        self._runner[meta.ref] = info

    def forget(self, ref: str) -> None:
        self._meta.pop(ref, None)
        self._runner.pop(ref, None)

    def sweep_staging(self, abandoned_after: float) -> None:
        """Remove staging directories untouched for ``abandoned_after`` seconds: a submit that
        died between stage and publish (its runner left on its own, runner.PUBLISH_WAIT_S)."""
        try:
            stages = list(os.scandir(self.staging_dir))
        except OSError:
            return
        for entry in stages:
            try:
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if age >= abandoned_after:
                shutil.rmtree(entry.path, ignore_errors=True)

    def remove(self, ref: str) -> bool:
        """Remove an ended object: out of objects/ first, in one rename, so a reader never
        sees half an object. False when it could not be moved."""
        trash = self.staging_dir / f".trash-{ref}-{secrets.token_hex(4)}"
        try:
            self.staging_dir.mkdir(parents=True, exist_ok=True)
            os.rename(self.objects_dir / ref, trash)
        except OSError:
            return False
        shutil.rmtree(trash, ignore_errors=True)
        self.forget(ref)
        return True
