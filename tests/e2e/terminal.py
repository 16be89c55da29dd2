"""Running the real CLI on a pseudo-terminal of a given width (issue 36: the CLI at 80-120
columns), as a person's shell would: stdout and stdin are the terminal, stderr apart."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import termios
from collections.abc import Mapping, Sequence


def on_terminal(argv: Sequence[str], env: Mapping[str, str], cwd: str, columns: int,
                timeout: float = 120) -> tuple[int, str, str]:
    """(exit code, what the terminal showed, stderr) of ``argv`` run on a ``columns``-wide
    pseudo-terminal (24 rows); the terminal's CR LF read back as LF."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, columns, 0, 0))
    clean = {k: v for k, v in env.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR",
                                                       "TTY_COMPATIBLE", "NO_COLOR")}
    clean.update({"TERM": "xterm-256color", "NO_COLOR": "1"})
    proc = subprocess.Popen(list(argv), stdin=slave, stdout=slave, stderr=subprocess.PIPE,
                            env=clean, cwd=cwd)
    os.close(slave)
    chunks: list[bytes] = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the last writer of the terminal closed it
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    _, err = proc.communicate(timeout=timeout)
    shown = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    return proc.returncode, shown, err.decode("utf-8", "replace")
