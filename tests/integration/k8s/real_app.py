"""The training process the tests on the real nodes run (issue 46): the host's Python runs
``APP`` in the real runtime's pods; it writes what happens to it (each start, a SIGTERM, its
end) to a folder of the shared directory (``DISPATCH_K8S_REAL_SHARED``, mounted at the same
path on every real node), where the test (or the recorder) reads it. Python as PID 1 ignores
SIGTERM unless it installs a handler: the modes that end on SIGTERM install one (exit 143);
the others end 137, the kubelet's SIGKILL at the grace's end."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

# The training process. argv: MODE FOLDER [N]. Every line it writes to FOLDER/events:
# "<unix time> <submission> <rank> <pid> <what>".
APP = r'''
import os, signal, sys, time

mode, folder = sys.argv[1], sys.argv[2]
n = int(sys.argv[3]) if len(sys.argv) > 3 else 0
sub = os.environ.get("DISPATCH_SUBMISSION", "?")
rank = os.environ.get("JOB_COMPLETION_INDEX", "0")
events = os.path.join(folder, "events")


def note(what):
    with open(events, "a") as f:
        f.write(f"{time.time():.3f} {sub} {rank} {os.getpid()} {what}\n")


def earlier_starts():
    try:
        with open(events) as f:
            return sum(1 for line in f if line.split()[1:3] == [sub, rank]
                       and line.split()[4] == "start")
    except FileNotFoundError:
        return 0


def on_term(signum, frame):
    note("sigterm")
    os._exit(143)


before = earlier_starts()
note("start")
if mode == "run":  # run n seconds; SIGTERM: exit 143
    signal.signal(signal.SIGTERM, on_term)
    time.sleep(n)
elif mode == "ignore":  # run n seconds, deaf to SIGTERM (PID 1): the kubelet's SIGKILL
    time.sleep(n)
elif mode == "first-long":  # the first run of each submission and rank long, later ones 3 s
    signal.signal(signal.SIGTERM, on_term)
    time.sleep(600 if before == 0 else 3)
elif mode == "submission-1-long":  # submission 1 long, a resubmission 3 s
    signal.signal(signal.SIGTERM, on_term)
    time.sleep(600 if sub == "1" else 3)
elif mode == "crash":  # the first n starts exit 3 at once, later ones run deaf to SIGTERM
    if before < n:
        with open("/dev/termination-log", "w") as f:
            f.write(f"ValueError: loss is nan at start {before + 1}")
        note("exit 3")
        sys.exit(3)
    time.sleep(600)
note("done")
'''


class App:
    """The training process's folder in the shared directory, and what it wrote there."""

    def __init__(self, shared: Path) -> None:
        self.folder = shared / f"kfault-{uuid.uuid4().hex[:10]}"
        self.folder.mkdir(mode=0o777)
        self.folder.chmod(0o777)  # the pods may write as another uid
        self.script = self.folder / "app.py"
        self.script.write_text(APP)

    def command(self, mode: str, n: int = 0) -> list[str]:
        return ["python3", str(self.script), mode, str(self.folder), str(n)]

    def events(self) -> list[tuple[float, str, str, int, str]]:
        path = self.folder / "events"
        if not path.exists():
            return []
        out = []
        for line in path.read_text().splitlines():
            at, sub, rank, pid, what = line.split(" ", 4)
            out.append((float(at), sub, rank, int(pid), what))
        return out

    def said(self, what: str, sub: str | None = None) -> list[tuple[float, str, str, int, str]]:
        return [e for e in self.events() if e[4] == what and (sub is None or e[1] == sub)]

    def wait(self, what: str, count: int = 1, sub: str | None = None,
             timeout_s: float = 180) -> list[tuple[float, str, str, int, str]]:
        """The first ``count`` lines saying ``what`` (a bound for a hung run, never a timing
        assertion)."""
        deadline = time.monotonic() + timeout_s
        while len(found := self.said(what, sub)) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"the app never said {what!r} {count} time(s): "
                                     f"{self.events()}")
            time.sleep(0.5)
        return found
