"""A local root on disk: its marker, its objects, and strict, cached reads of their files.

The marker (``root.json``, with an id) is written once, at the first submit. It is what makes
an absent object a positive answer: a root that is missing, unreadable, not a directory, or
present without its marker (an unmounted mount point, a wrong path) is unreachable, and
nothing missing from it may be read as ended.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Callable
from pathlib import Path

import msgspec

from dispatch.backends.local.wire import (
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
from dispatch.files import create_exclusive, fsync_dir


def _read(path: Path) -> bytes:
    """Every file the backend reads goes through here (tests count the reads)."""
    return path.read_bytes()


def _unreachable(reason: str) -> SchedulerUnreachable:
    return SchedulerUnreachable("local", reason)


def marker_id(root: Path) -> str | None:
    """The id in ``root``'s marker, or None when it cannot be read (for the runner)."""
    try:
        return msgspec.json.decode(_read(root / ROOT_MARKER), type=RootMarker).id
    except (OSError, msgspec.DecodeError):
        return None


def wait_published(objdir: Path, wait_s: float) -> bool:
    """For a starting runner: submit starts it, then publishes the object directory; a submit
    that crashed in between never publishes it, and the runner leaves."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if (objdir / META).exists() and (objdir / RUNNER).exists():
            return True
        time.sleep(0.005)
    return False


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

    def marker(self) -> RootMarker:
        """The root's marker; SchedulerUnreachable when the root is not there to be asked."""
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

    def claim(self) -> RootMarker:
        """For a submit: the root's marker, making the root (and its marker) at first use."""
        try:
            return self.marker()
        except SchedulerUnreachable:
            pass
        try:
            self.objects_dir.mkdir(parents=True, exist_ok=True)
            self.staging_dir.mkdir(parents=True, exist_ok=True)
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
