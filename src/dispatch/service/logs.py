"""Following a job's output: what one look at the record and the job's streams gives.

A ``Follow`` keeps where a reader of one job's output has got to (the submission it is at,
each stream's offset or cursor) and never waits itself: ``look`` reads whatever was written
since the last look, in bounded pieces of whole lines, and returns. The caller waits
between looks as suits it: ``api.follow_log_text`` sleeps in its own thread; ``dispatch
serve`` awaits, so an open stream holds no thread between looks (http/follow.py).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Generator, Iterator, Sequence
from pathlib import Path

from dispatch.backends.base import LogSource
from dispatch.core.model import SchedulerUnreachable
from dispatch.core.record import Job
from dispatch.errors import BadInput
from dispatch.service.operations import Service
from dispatch.service.views import cause_text
from dispatch.support.tails import (
    MOST_LINE,
    READ_CHUNK,
    last_lines,
    last_lines_start,
    text_of,
    utf8_cut,
)

# (submission, stream or None for dispatch's own line, whole lines, one of several streams)
Piece = tuple[int, str | None, bytes, bool]


class LogTail:
    """What each stream wrote since it was last read, in whole lines: a line still being
    written waits for its end (or for ``final``). A file is read from the offset reached so
    far, in pieces; a reader (``LogReader``: a pod's log) from the cursor it last gave, kept
    by its key. ``tail``: a stream read for the first time gives only its last lines."""

    def __init__(self) -> None:
        self.tail: int | None = None
        self.offsets: dict[Path, int] = {}
        self.partial: dict[Path, bytes] = {}
        self.cursors: dict[str, str | None] = {}

    def read(self, sources: Sequence[LogSource], *, final: bool) -> Iterator[str]:
        """Whole lines as text; with several streams each line led by ``[stream] ``."""
        many = len(sources) > 1
        for name, data in self.pieces(sources, final=final):
            yield text_of(data, f"[{name}] " if many else "")

    def pieces(self, sources: Sequence[LogSource], *,
               final: bool) -> Iterator[tuple[str, bytes]]:
        """(stream name, whole lines as bytes) in pieces of at most a few MiB: a file's name
        (a node's log), or a reader's label (a pod)."""
        for src in sources:
            name = src.name if isinstance(src, Path) else src.label
            if isinstance(src, Path):
                for data in self._file(src, final=final):
                    yield name, data
                continue
            cut = src.key not in self.cursors and self.tail is not None
            kept = b""  # with tail: the last lines so far, never more
            more = True
            while more:
                got = src.read(self.cursors.get(src.key), final=final)
                self.cursors[src.key] = got.cursor
                more = got.more
                if cut:
                    assert self.tail is not None
                    kept = last_lines(kept + got.data, self.tail)
                elif got.data:
                    yield name, got.data
            if kept:
                yield name, kept

    def _file(self, f: Path, *, final: bool) -> Iterator[bytes]:
        try:
            # Never through a symlink: the object directory is the job's to write in.
            fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return
        with os.fdopen(fd, "rb", buffering=0) as fh:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return  # a FIFO or a device is nobody's log
            if f not in self.offsets:
                self.offsets[f] = 0 if self.tail is None else last_lines_start(fh, self.tail)
            fh.seek(self.offsets[f])
            while True:
                chunk = fh.read(READ_CHUNK)
                if not chunk:
                    break
                self.offsets[f] += len(chunk)
                data = self.partial.pop(f, b"") + chunk
                cut = data.rfind(b"\n") + 1
                if cut == 0 and len(data) >= MOST_LINE:
                    cut = utf8_cut(data)
                if cut < len(data):
                    self.partial[f] = data[cut:]
                if cut:
                    yield data[:cut]
        rest = self.partial.pop(f, b"") if final else b""
        if rest:
            yield rest


class Follow:
    """One reader's place in a job's output. ``follow``: keep going across submissions
    until the outcome is committed (else one look is all); ``submission``: that one only;
    ``from_first``: start at the first submission, not the newest; ``tail``: the first
    submission read gives only the last ``tail`` lines of each stream; ``on_poll``: given
    the job as the record says it at each look."""

    def __init__(self, job_id: str, *, submission: int | None = None, follow: bool = False,
                 from_first: bool = False, tail: int | None = None,
                 on_poll: Callable[[Job], None] | None = None) -> None:
        check_count("submission", submission, least=1)
        check_count("tail", tail, least=0)
        self.job_id = job_id
        self.submission = submission
        self.follow = follow
        self.from_first = from_first
        self.on_poll = on_poll
        self.reader = LogTail()
        self.reader.tail = tail
        self.current: int | None = None
        self.done = False  # the last look has been read: nothing more will come
        self._id: str | None = None  # job_id resolved (a name or prefix), at the first look
        self._job: Job | None = None
        self._version: int | None = None

    def _folded(self, service: Service) -> Job:
        """The job as its record says, folded again only when its record changed (a quiet
        job followed by many readers costs one small query a look each)."""
        if self._id is None:
            self._id = service.resolve(self.job_id)
        version = service.store.version(self._id)
        if self._job is None or version != self._version:
            self._job = service.job(self._id)
            self._version = version
        return self._job

    def look(self, service: Service) -> Generator[Piece, None, None]:
        """Everything written since the last look, in pieces of at most a few MiB; at its
        end ``done`` says whether this was the last (not following, or the outcome is
        committed). A scheduler that cannot be asked now is asked again at the next look
        (each stream keeps its place, so no line is lost or repeated); at the last look its
        ``SchedulerUnreachable`` is raised. ``NotFound`` when not following and there is
        nothing to read yet.

        A look may be closed after any piece: the next one goes on from there (each stream's
        place moves as its pieces are given, never ahead of them)."""
        j = self._folded(service)
        if self.on_poll is not None:
            self.on_poll(j)
        last = not self.follow or j.outcome is not None
        numbers = [s.number for s in j.submissions if s.ref is not None]
        if self.submission is not None:
            numbers = [n for n in numbers if n == self.submission]
        try:
            if self.current is None and numbers:
                self.current = numbers[0] if self.from_first else numbers[-1]
            for n in numbers:
                if self.current is None or n <= self.current:
                    continue
                yield from self._read(self._sources(service, j, self.current), True)
                self.current = n  # before the marker: a look closed after it goes on from n
                sub = j.submission(n)
                why = f" after {cause_text(sub.cause)}" if sub and sub.cause else ""
                yield n, None, f"== dispatch: submission {n}{why}\n".encode(), False
            if self.current is not None:
                yield from self._read(self._sources(service, j, self.current), last)
            elif not self.follow:
                service.logs(self.job_id, self.submission)  # NotFound: nothing to read yet
        except SchedulerUnreachable:
            if last:
                raise
        self.done = last

    @staticmethod
    def _sources(service: Service, j: Job, number: int) -> Sequence[LogSource]:
        sub = j.submission(number)
        assert sub is not None and sub.ref is not None
        return service.backends(j.spec.backend).logs(sub.ref)

    def _read(self, sources: Sequence[LogSource], final: bool) -> Iterator[Piece]:
        assert self.current is not None
        number = self.current
        many = len(sources) > 1  # the text then marks each line with its stream
        for name, data in self.reader.pieces(sources, final=final):
            yield number, name, data, many
        self.reader.tail = None  # only the first submission read is cut


def check_count(name: str, value: object, *, least: int) -> None:
    """``submission`` and ``tail`` are whole numbers (a bool or a string is refused)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise BadInput(f"logs: {name} must be a whole number of at least {least}, "
                       f"not {value!r}")


__all__ = ["Follow", "Piece", "check_count"]
