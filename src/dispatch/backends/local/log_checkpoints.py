"""A spec's log pattern on the local backend (G3): the runner matches each line of a node's
output as it copies it (output.py), so nothing is ever read twice, and writes each match as
a progress line ``{"step": N, "checkpoint": true, "time": T}`` to a file of dispatch's own,
``node<i>.logcheckpoints.jsonl``, read beside the node's progress file: a matching line
counts exactly as a checkpoint the training reported itself, at the time the runner saw it.

A line longer than the pattern's bound (MOST_LINE_BYTES, fewer for a costly pattern:
core/progress.py) is not matched (its start is dropped); a line is only matched once its
newline came (or the output ended). Writing is a courtesy: a file that cannot be written
drops the match, never the node's output.

Matching runs on the runner's main thread, the one that obeys signals and requests, so its
cost is bounded: the pattern is RE2 (linear in the line), a line's bytes times the pattern's
instructions are bounded (core/progress.py), output.py reads at most MATCH_READ_BYTES at a
time from a node whose output is matched and checks its deadline and signals between bites,
and the pipe of such a node holds one bite (MATCH_PIPE_BYTES) for the end's last drain.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import msgspec

from dispatch.core.progress import checkpoint_step, compile_pattern


class LogCheckpoints:
    """One node's matcher: the line being received, and how many lines matched so far."""

    def __init__(self, pattern: str, path: Path) -> None:
        # ValueError for a pattern RE2 refuses (a record older than RE2 validation): the
        # node cannot start, as for any spec that is refused.
        self.pattern = compile_pattern(pattern)
        self.most = self.pattern.most_line_bytes
        self.path = path
        self.partial = b""
        self.too_long = False  # the line being received is already over the bound
        self.count = 0

    def feed(self, data: bytes) -> None:
        lines = data.split(b"\n")
        found = [doc for raw in lines[:-1] if (doc := self._line(raw))]
        self._keep(lines[-1])
        self._write(found)

    def flush(self) -> None:
        """The output ended: a last line without its newline is matched too."""
        if self.partial or self.too_long:
            self._write([doc for doc in [self._line(b"")] if doc])

    def _keep(self, rest: bytes) -> None:
        if self.too_long or len(self.partial) + len(rest) > self.most:
            self.partial, self.too_long = b"", True
        else:
            self.partial += rest

    def _line(self, end: bytes) -> bytes:
        """The progress line a complete output line says ("" when it says none)."""
        raw = self.partial + end
        too_long = self.too_long or len(raw) > self.most
        self.partial, self.too_long = b"", False
        if too_long or not raw:  # an empty line: a pattern never matches it (validation)
            return b""
        step = checkpoint_step(self.pattern, raw.decode(errors="replace").rstrip("\r"),
                               self.count)
        if step is None:
            return b""
        self.count += 1
        return msgspec.json.encode({"step": step, "checkpoint": True, "time": time.time()})

    def _write(self, docs: list[bytes]) -> None:
        # One write for a bite's matches: a line per open, write and close was the runner's
        # main cost when every short line matched.
        if not docs:
            return
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
                         | os.O_CLOEXEC, 0o644)
        except OSError:
            return
        try:
            os.write(fd, b"".join(doc + b"\n" for doc in docs))
        except OSError:
            pass
        finally:
            os.close(fd)
