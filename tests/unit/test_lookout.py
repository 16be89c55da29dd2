"""discovery.Lookout: a look waited for up to a deadline, on a thread of its own, with the
waiter's keep_alive called meanwhile; one look per backend in flight (issue 21 item 9).

The real local backend, its discover held on an Event (the way a hung scheduler tool holds
it), so the deadline is met for certain and released at will."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.specs import parse_spec

from dispatch.backends.local import LocalBackend
from dispatch.core.model import Discovery
from dispatch.core.record import Job, fold
from dispatch.service.requests import create_job
from dispatch.stores.select import open_store
from dispatch.supervise.discovery import OK, UNREACHABLE, Lookout


@pytest.fixture(autouse=True)
def no_runner_left_behind(tmp_path: Path) -> Iterator[None]:
    """The submitted job's runner waits for a publish no later tick makes here: end it."""
    yield
    subprocess.run(["pkill", "-f", str(tmp_path / "local")], check=False)


class HeldLocal(LocalBackend):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.go = threading.Event()
        self.asked = 0

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        self.asked += 1
        self.go.wait(60)
        return super().discover(tokens, refs)


def _submitted_job(tmp_path: Path, backend: LocalBackend) -> Job:
    """A job with a submission intended (a token to look for), straight from the record."""
    from dispatch.supervise.loop import Supervisor

    url = str(tmp_path / "r.sqlite3")
    with open_store(url) as store:
        spec = parse_spec({"name": "j", "backend": "local", "command": ["true"]}, "<j>")
        job_id = create_job(store, spec, backend.declarations(), datetime.now(UTC))
        Supervisor(store, lambda _n: backend).tick()
        return fold(store.read(job_id), datetime.now(UTC))


def test_a_look_past_its_deadline_is_given_up_and_not_asked_again_until_it_returns(
        tmp_path: Path) -> None:
    backend = HeldLocal(tmp_path / "local")
    backend.go.set()
    job = _submitted_job(tmp_path, backend)
    assert job.submissions and job.submissions[0].token
    backend.go.clear()
    lookout = Lookout(deadline_s=0.6)
    kept: list[int] = []
    seen = lookout.look("local", [job], lambda _n: backend, datetime.now(UTC),
                        keep_alive=lambda: kept.append(1))
    assert (seen.scheduler, seen.backend, seen.discovery) == (UNREACHABLE, None, None)
    assert "no answer within 0.6s" in seen.problem
    assert len(kept) >= 2, "keep_alive was not called while waiting"
    # Still running: not asked again, no action on that backend.
    again = lookout.look("local", [job], lambda _n: backend, datetime.now(UTC))
    assert again.scheduler == UNREACHABLE and "has not returned" in again.problem
    assert backend.asked == 1
    backend.go.set()  # the scheduler answers at last: the next look asks again
    for _ in range(50):
        seen = lookout.look("local", [job], lambda _n: backend, datetime.now(UTC))
        if seen.scheduler == OK:
            break
        threading.Event().wait(0.1)
    assert seen.scheduler == OK and seen.backend is backend and seen.discovery is not None
    assert backend.asked == 2


def test_what_keep_alive_raises_ends_the_wait_and_stopping_too(tmp_path: Path) -> None:
    backend = HeldLocal(tmp_path / "local")
    backend.go.set()
    job = _submitted_job(tmp_path, backend)
    backend.go.clear()

    class Lost(Exception):
        pass

    def lost() -> None:
        raise Lost

    lookout = Lookout(deadline_s=60)
    try:
        lookout.look("local", [job], lambda _n: backend, datetime.now(UTC), keep_alive=lost)
    except Lost:
        pass
    else:
        raise AssertionError("keep_alive's error did not end the wait")
    backend.go.set()
    stop = threading.Event()
    stop.set()
    other = Lookout(deadline_s=60)
    backend.go.clear()
    seen = other.look("local", [job], lambda _n: backend, datetime.now(UTC), stopping=stop)
    assert seen.scheduler == UNREACHABLE and "stopped waiting" in seen.problem
    backend.go.set()
