"""Bounded pieces of a stream's bytes: whole lines as text, a cut that never splits a UTF-8
character, and the start of a file's last lines found by reading backwards from the end.
Whatever a log's size, a read holds a few MiB. ``LogTail`` (dispatch/service/logs.py) reads
a job's streams with these; the app-error capture reads a traceback's tail."""

from __future__ import annotations

import io
import os
from typing import BinaryIO

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
