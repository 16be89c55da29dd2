"""What wakes the local runner: SIGCHLD (a node ended), SIGUSR1 (a request or the gate was
written) and the ending signals (SIGTERM, SIGINT, SIGHUP), through one wake-up pipe
(``signal.set_wakeup_fd``), while it copies the nodes' output."""

from __future__ import annotations

import fcntl
import os
import signal
from collections.abc import Sequence

from dispatch.backends.local.output import NodeOutput, copy_until

ENDING_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


class Wakeup:
    """Installs the handlers; ``received`` lists the ending signals in the order they came
    (the runner ends the object on the first, as a stop does)."""

    def __init__(self) -> None:
        self.received: list[int] = []
        rfd, wfd = os.pipe()
        for fd in (rfd, wfd):
            flags = fcntl.fcntl(fd, fcntl.F_GETFL)
            fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
        self.fd = rfd
        signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)
        signal.signal(signal.SIGUSR1, self._wake)
        signal.signal(signal.SIGCHLD, self._wake)
        for signum in ENDING_SIGNALS:
            signal.signal(signum, self._end)

    def _wake(self, signum: int, frame: object) -> None:
        return None

    def _end(self, signum: int, frame: object) -> None:
        self.received.append(signum)

    def wait(self, outputs: Sequence[NodeOutput], timeout: float) -> None:
        """Copy output until ``timeout`` or a signal, whichever comes first."""
        copy_until(self.fd, outputs, timeout)
        try:
            while os.read(self.fd, 4096):
                pass
        except BlockingIOError:
            pass
