"""A supervisor process under a lease, driven by the supervision tests (argv only).

    sup_child.py URL ROOT LOG HOLDER LEASE POLL SCOPE [SCOPE ...] [--pause-before-append GO]

Serves the SCOPEs as HOLDER with the real local backend under ROOT, appending one line per
scheduler call to LOG ("discover HOLDER" / "submit HOLDER TOKEN", O_APPEND). Prints each
lease change ("active SCOPE EPOCH", "standby SCOPE WHY", "released SCOPE"), each append
("appended JOB VERSION at MONOTONIC epoch EPOCH", the time the store's append returned, on
the machine's monotonic clock) and each refused one ("fenced JOB") on stdout, flushed.
SIGTERM stops it cleanly (leases handed back).

--no-lease: the supervisor as it was before leases (Supervisor.serve: every process ticks
every job of the scopes), for the benchmark's comparison.

--pause-before-append GO: the first fenced append after the file GO appears stops the process
itself (SIGSTOP) just before the store call, with its fence in hand; once continued it makes
that very append (printing "resumed" first).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import Any

from dispatch.backends.base import Submission
from dispatch.backends.local import LocalBackend
from dispatch.core.events import Event
from dispatch.core.model import Discovery
from dispatch.stores.base import Fence, Fenced, RecordStore
from dispatch.stores.batch import Append, Outcome
from dispatch.stores.fence import Lease
from dispatch.stores.select import open_store
from dispatch.supervise.leases import Supervision
from dispatch.supervise.loop import Supervisor


def say(*words: object) -> None:
    print(*words, flush=True)


def log_line(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, (text + "\n").encode())
    finally:
        os.close(fd)


class CountingLocal(LocalBackend):
    def __init__(self, root: Path, log: Path, holder: str) -> None:
        super().__init__(root, node_loss_window=timedelta(seconds=2))
        self.log, self.holder = log, holder

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        log_line(self.log, f"discover {self.holder}")
        return super().discover(tokens, refs)

    def submit(self, submission: Submission) -> str:
        log_line(self.log, f"submit {self.holder} {submission.token}")
        return super().submit(submission)


class PausingStore:
    """The real store; its first fenced append after GO appears stops the process first."""

    def __init__(self, store: RecordStore, go: Path | None) -> None:
        self._store, self._go, self._paused = store, go, False

    def _pause(self, job_id: str, expected_version: int, fence: Fence | None) -> None:
        if (fence is not None and self._go is not None and not self._paused
                and self._go.exists()):
            self._paused = True
            say("pausing", job_id, fence.epoch, expected_version)
            # Directed at this thread: the supervisor ticks on a thread of its own, and a
            # process-directed SIGSTOP (os.kill) lets the sending thread run on for a moment
            # (seen here: into the append, whose write lock then stayed held while stopped).
            signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
            say("resumed", job_id)

    @staticmethod
    def _appended(job_id: str, version: int, fence: Fence | None) -> None:
        # when it committed: a stop between the commit and this line prints it after SIGCONT
        say("appended", job_id, version, "at", f"{time.monotonic():.6f}", "epoch",
            fence.epoch if fence else "-")

    def append(self, job_id: str, events: Sequence[Event], expected_version: int, *,
               fence: Fence | None = None) -> int:
        self._pause(job_id, expected_version, fence)
        try:
            version = self._store.append(job_id, events, expected_version, fence=fence)
        except Fenced:
            say("fenced", job_id)
            raise
        self._appended(job_id, version, fence)
        return version

    def append_many(self, appends: Sequence[Append], *, fence: Fence | None = None
                    ) -> list[Outcome]:
        """A tick's decisions, several jobs in one transaction (supervise/batch.py)."""
        self._pause(appends[0].job_id, appends[0].expected_version, fence)
        try:
            outcomes = self._store.append_many(appends, fence=fence)
        except Fenced:
            for a in appends:
                say("fenced", a.job_id)
            raise
        for a, out in zip(appends, outcomes, strict=True):
            if isinstance(out, int):
                self._appended(a.job_id, out, fence)
        return outcomes

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def main(argv: list[str]) -> None:
    go: Path | None = None
    if "--pause-before-append" in argv:
        i = argv.index("--pause-before-append")
        go = Path(argv[i + 1])
        del argv[i:i + 2]
    no_lease = "--no-lease" in argv
    if no_lease:
        argv.remove("--no-lease")
    url, root, log, holder, lease, poll, *scopes = argv
    store = open_store(url)
    backend = CountingLocal(Path(root), Path(log), holder)
    if no_lease:
        plain = Supervisor(store, lambda _name: backend, name=holder, scope=scopes[0])
        signal.signal(signal.SIGTERM, lambda *_: plain.stopping.set())
        say("ready", holder)
        plain.serve(float(poll))
        say("stopped", holder)
        return
    sup = Supervision(PausingStore(store, go), lambda _name: backend,  # type: ignore[arg-type]
                      scopes, holder=holder, lease_s=float(lease), poll=float(poll))

    def changed(scope: str, what: str, lease: Lease | None) -> None:
        if what.startswith("active for:") and lease is not None:
            say("active", scope, lease.epoch)
        elif what.startswith("released:"):
            say("released", scope)
        else:
            say("standby", scope, what)

    sup.on_change = changed
    signal.signal(signal.SIGTERM, lambda *_: sup.stop())
    say("ready", holder)
    sup.run()
    store.close()
    say("stopped", holder)


if __name__ == "__main__":
    main(sys.argv[1:])
