"""Reading a job's output streams in bounded pieces: files from the offset reached so far (or
from their last lines, found by reading backwards from the end), readers of logs kept
elsewhere (``LogReader``) from their cursors. Whatever a log's size, a read holds a few MiB.
The follower (``api.follow_log_text``) keeps one ``LogTail`` for a whole follow."""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import BinaryIO

from dispatch.backends.base import LogSource

# A file is read this much at a time, so a log of any size takes this much memory.
READ_CHUNK = 1 << 20
# A line longer than this (a log without line ends) is given in pieces of about this size.
MOST_LINE = 1 << 20


def text_of(data: bytes, prefix: str) -> str:
    """Whole lines of output as text, each ended by ``\n`` and led by ``prefix``."""
    lines = data.decode(errors="replace").splitlines()
    if not lines:
        return ""
    if prefix:
        return "".join(f"{prefix}{line}\n" for line in lines)
    return "\n".join(lines) + "\n"


def utf8_cut(data: bytes) -> int:
    """Where to cut ``data`` without splitting a UTF-8 character (before a trailing
    incomplete one)."""
    end = len(data)
    for back in range(1, min(4, end) + 1):
        byte = data[end - back]
        if byte & 0xC0 != 0x80:  # a character's first byte: cut before it unless complete
            width = 1 if byte < 0x80 else 2 if byte >> 5 == 0b110 else \
                3 if byte >> 4 == 0b1110 else 4 if byte >> 3 == 0b11110 else 1
            return end if back >= width else end - back
    return end


def last_lines_start(fh: BinaryIO, count: int) -> int:
    """The offset where the last ``count`` lines of an open file begin, found by reading
    backwards from its end in pieces (a last line without its end counts as a line)."""
    end = fh.seek(0, os.SEEK_END)
    if count == 0 or end == 0:
        return end
    fh.seek(end - 1)
    limit = end - 1 if fh.read(1) == b"\n" else end  # the last line's own end
    found = 0
    pos = limit
    while pos > 0:
        size = min(READ_CHUNK, pos)
        pos -= size
        fh.seek(pos)
        block = fh.read(size)
        here = block.count(b"\n")
        if found + here < count:
            found += here
            continue
        i = len(block)
        while True:
            i = block.rfind(b"\n", 0, i)
            found += 1
            if found == count:
                return pos + i + 1
    return 0


def last_lines(data: bytes, count: int) -> bytes:
    """The last ``count`` lines of ``data`` (as ``last_lines_start`` counts them)."""
    return data[last_lines_start(io.BytesIO(data), count):]


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
