"""A node's output on its way to its log file: the node writes into a pipe and the runner
copies what comes out of it into ``node<i>.log``.

Copying, rather than handing the node the file itself, is what lets the runner

- stop writing past the job's ``max_output_bytes``: the rest is still read (so the node never
  blocks on a full pipe) and dropped, one line in the log says where it was cut, and the job
  is not killed for it;
- outlive a full disk: output that cannot be written is counted and dropped, the node goes
  on, and once writing works again one line says how many bytes were lost and why.

The file is opened without following a symlink (the object directory is the job's to write
in). A log that cannot be opened (a full disk at start) is opened again at the next write.
"""

from __future__ import annotations

import fcntl
import os
import select
import time
from collections.abc import Sequence
from pathlib import Path

from dispatch.backends.local.log_checkpoints import LogCheckpoints

PIPE_BYTES = 1 << 20  # the pipe's capacity asked for (Linux allows up to 1 MiB to anyone)
READ_BYTES = 1 << 20
# A node whose lines are matched (log_checkpoints.py) is read in smaller bites: matching runs
# on the runner's main thread, and one bite's matching is what a signal, a cancel or the time
# limit may wait for (measured on a loaded 2-core machine: at most ~0.13 s, for 16 KiB of
# two-byte lines that all match; the cost bound of core/progress.py keeps long lines below).
MATCH_READ_BYTES = 16 * 1024
# ... and its pipe holds one bite, not 1 MiB: at the end every byte left in it is matched
# before the object may end (the last words), and a node that writes faster than its lines
# are matched keeps its pipe full. 1 MiB of costly lines took 22 s to match after a cancel;
# 64 KiB of the costliest lines within the bound still ~2 s on the loaded machine.
MATCH_PIPE_BYTES = MATCH_READ_BYTES


def cut_note(limit: int) -> bytes:
    return (f"== dispatch: output cut at {limit} bytes (max_output_bytes); the rest is "
            "discarded, the job goes on\n").encode()


def lost_note(count: int, why: str) -> bytes:
    return f"== dispatch: {count} bytes of output lost: {why}\n".encode()


class NodeOutput:
    """One node's pipe and log file, on the runner's side."""

    def __init__(self, path: Path, limit: int | None,
                 checkpoints: LogCheckpoints | None = None) -> None:
        self.path = path
        self.limit = limit
        self.checkpoints = checkpoints  # the spec's log pattern, fed every byte taken
        self.read_fd, self.write_fd = os.pipe()  # both close-on-exec; Popen dup2s the child's
        os.set_blocking(self.read_fd, False)
        try:
            fcntl.fcntl(self.read_fd, fcntl.F_SETPIPE_SZ,
                        PIPE_BYTES if checkpoints is None else MATCH_PIPE_BYTES)
        except OSError:
            pass  # a smaller pipe only means more reads
        # What the pipe can hold: the most the end's drain reads.
        try:
            self.capacity: int = fcntl.fcntl(self.read_fd, fcntl.F_GETPIPE_SZ)
        except OSError:
            self.capacity = PIPE_BYTES
        self.file_fd: int | None = None
        self.taken = 0  # bytes the node wrote, kept or not
        self.cut = False
        self.lost = 0  # bytes dropped because they could not be written
        self.lost_why = ""
        self.line_open = False  # the last byte written did not end a line
        self.open = True
        self._open_file()

    def started(self) -> None:
        """The node has its end of the pipe: the runner keeps only the read end, so the pipe
        ends when the node and every process it left holding it are gone."""
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def pump(self) -> int:
        """Copy what the pipe holds now (one read); the bytes read, 0 when none."""
        if not self.open:
            return 0
        try:
            data = os.read(self.read_fd,
                           READ_BYTES if self.checkpoints is None else MATCH_READ_BYTES)
        except BlockingIOError:
            return 0
        except OSError:
            data = b""
        if not data:  # every writer is gone
            self.close()
            return 0
        self.take(data)
        return len(data)

    def drain(self) -> None:
        """Copy everything the pipe still holds (for the object's end: its writers are gone,
        or could not be killed and are left behind): at most what it can hold, so that a
        writer left behind cannot keep the end waiting."""
        left = self.capacity
        while left > 0 and (taken := self.pump()):
            left -= taken

    def take(self, data: bytes) -> None:
        if self.checkpoints is not None:  # all of it: a cut log still says checkpoints
            self.checkpoints.feed(data)
        keep = data
        if self.limit is not None:
            keep = data[:max(self.limit - self.taken, 0)]
        self.taken += len(data)
        if keep:
            self._write(keep)
        if self.limit is not None and self.taken > self.limit and not self.cut:
            self.cut = True
            self._write((b"\n" if self.line_open else b"") + cut_note(self.limit))

    def close(self) -> None:
        if not self.open:
            return
        self.open = False
        if self.checkpoints is not None:
            self.checkpoints.flush()
        if self.lost:
            self._write(b"")  # one last try at saying what was lost
        for fd in (self.read_fd, self.write_fd, self.file_fd):
            if fd is not None and fd >= 0:
                os.close(fd)
        self.file_fd = None

    def _open_file(self) -> bool:
        try:
            self.file_fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                   | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as err:
            self._lose(0, f"cannot open {self.path.name}: {err.strerror or err}")
            return False
        return True

    def _write(self, data: bytes) -> None:
        if self.file_fd is None and not self._open_file():
            self._lose(len(data), self.lost_why)
            return
        if self.lost:
            note = (b"\n" if self.line_open else b"") + lost_note(self.lost, self.lost_why)
            if self._put(note):  # not written: the note waits, the data is lost too
                self._lose(len(data), self.lost_why)
                return
            self.lost = 0
        left = self._put(data)
        if left:
            self._lose(left, self.lost_why)

    def _put(self, data: bytes) -> int:
        """Write ``data``; the number of bytes that could not be written (0: all were)."""
        assert self.file_fd is not None
        view = memoryview(data)
        try:
            while view:
                view = view[os.write(self.file_fd, view):]
        except OSError as err:
            self.lost_why = err.strerror or str(err)
            if len(view) < len(data):
                self.line_open = True  # a part went out: whatever follows starts anew
            return len(view)
        if data:
            self.line_open = not data.endswith(b"\n")
        return 0

    def _lose(self, count: int, why: str) -> None:
        self.lost += count
        self.lost_why = why


def copy_until(wake_fd: int, outputs: Sequence[NodeOutput], timeout: float) -> None:
    """Copy the nodes' output for up to ``timeout`` seconds; return early when ``wake_fd``
    is readable (a signal, a request) or at once when ``timeout`` is 0."""
    deadline = time.monotonic() + timeout
    while True:
        by_fd = {o.read_fd: o for o in outputs if o.open}
        left = max(deadline - time.monotonic(), 0.0)
        ready, _, _ = select.select([wake_fd, *by_fd], [], [], left)
        # The node that has sent the least goes first: a call may end after one bite, and
        # no node waits behind a chattier one.
        for output in sorted((by_fd[fd] for fd in ready if fd in by_fd),
                             key=lambda o: o.taken):
            output.pump()
            # A signal came (or was there), or the time is up (a time limit, a kill's
            # grace): the runner acts before the other nodes' bites are copied, at least
            # one bite a call, so copying goes on.
            if _readable(wake_fd) or time.monotonic() >= deadline:
                return
        if wake_fd in ready or not ready or left <= 0:
            return


def _readable(fd: int) -> bool:
    return bool(select.select([fd], [], [], 0)[0])
