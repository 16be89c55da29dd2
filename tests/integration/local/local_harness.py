"""Helpers for the local backend tests: real runners, real node processes, bounded waits."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from dispatch.backends.base import Submission
from dispatch.backends.local import LocalBackend
from dispatch.core.model import ObjectReport
from dispatch.core.spec import JobSpec

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "local"
PY = sys.executable
SLEEP = (PY, "-c", "import time; time.sleep(60)")
WAIT_S = 20.0  # an upper bound for slow CI machines, never a timing assertion


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def spec(command: tuple[str, ...], **kw: object) -> JobSpec:
    return JobSpec(name=kw.pop("name", "t"), command=command, **kw)  # type: ignore[arg-type]


class Local:
    """A backend under a temporary root, with the objects it submitted stopped at the end."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.backend = LocalBackend(root, kill_grace=1.0)
        self.refs: list[str] = []
        self._jobs = 0

    def submit(self, command: tuple[str, ...], *, job: str | None = None, number: int = 1,
               gated: bool = False, **kw: object) -> tuple[str, str]:
        if job is None:
            self._jobs += 1
            job = f"job{self._jobs}"
        token = f"{job}.{number}"
        ref = self.backend.submit(Submission(job_id=job, number=number, token=token,
                                             spec=spec(command, **kw), gated=gated))
        self.refs.append(ref)
        return ref, token

    def look(self, ref: str, backend: LocalBackend | None = None) -> ObjectReport:
        found = (backend or self.backend).discover([], [ref]).objects
        assert [o.ref for o in found] == [ref]
        return found[0]

    def wait(self, ref: str, until: Callable[[ObjectReport], bool],
             backend: LocalBackend | None = None) -> ObjectReport:
        deadline = time.monotonic() + WAIT_S
        while True:
            report = self.look(ref, backend)
            if until(report):
                return report
            if time.monotonic() > deadline:
                raise AssertionError(f"{ref} never got there; last report: {report}")
            time.sleep(0.05)

    def ended(self, ref: str) -> ObjectReport:
        return self.wait(ref, lambda r: r.ended)

    def status_pids(self, ref: str) -> list[int]:
        import msgspec

        from dispatch.backends.local.wire import ObjectStatus

        raw = (self.root / "objects" / ref / "status.json").read_bytes()
        status = msgspec.json.decode(raw, type=ObjectStatus)
        return [n.pid for n in status.nodes if n.pid is not None]

    def cleanup(self) -> None:
        for ref in self.refs:
            self.backend.stop(ref)
        for ref in self.refs:
            try:
                self.wait(ref, lambda r: r.ended)
            except AssertionError:
                pass


@pytest.fixture
def local(tmp_path: Path) -> Iterator[Local]:
    harness = Local(tmp_path / "state")
    yield harness
    harness.cleanup()


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return False
    return raw[raw.rfind(b")") + 2:].split()[0] not in (b"Z", b"X")


def wait_file(path: Path) -> str:
    deadline = time.monotonic() + WAIT_S
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.02)
    return path.read_text()


def wait_dead(pid: int) -> None:
    deadline = time.monotonic() + WAIT_S
    while alive(pid):
        if time.monotonic() > deadline:
            raise AssertionError(f"pid {pid} still alive")
        time.sleep(0.02)


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
