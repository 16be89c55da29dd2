"""One object per token, whatever happens to a submitting process (claims.py).

Seen in CI (issue 32): a supervisor SIGSTOPped inside the local submit, after its look for the
token and before its publish, was taken over; the new holder submitted the token again, and
the stopped one, continued, published a second object for the same submission. These tests
stop a real submitting process at that very place (it stops itself just before the publish's
rename) and read what the other submitter does and what is left on disk.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from local_harness import PY, spec

from dispatch.backends.base import Submission
from dispatch.backends.local import LocalBackend
from dispatch.backends.local.claims import SubmitInFlight, claim_path
from dispatch.core.model import SchedulerUnreachable

TOKEN = "job-claim.1.token"

# A submitter that stops itself (SIGSTOP) on the publish's rename, then publishes when
# continued, and prints the ref it got.
STOPS_BEFORE_PUBLISH = """
import os, signal, sys, threading
from dispatch.backends.base import Submission
from dispatch.backends.local import LocalBackend
from dispatch.core.spec import JobSpec

rename = os.rename
def stop_then_rename(src, dst):
    if "/staging/" in str(src):
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)  # this thread stops here
    rename(src, dst)
os.rename = stop_then_rename
backend = LocalBackend(root=sys.argv[1])
spec = JobSpec(name="claimed", command=[sys.executable, "-c", "pass"], nodes=1)
print(backend.submit(Submission(job_id="job-claim", number=1, token=sys.argv[2], spec=spec)),
      flush=True)
"""


def _submission() -> Submission:
    return Submission(job_id="job-claim", number=1, token=TOKEN,
                      spec=spec((PY, "-c", "pass")))


def _stopped(pid: int) -> bool:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] == "T"


def _objects_with(root: Path, token: str) -> list[str]:
    backend = LocalBackend(root=root)
    return sorted(backend.disk.find(lambda m: m.token == token))


@pytest.fixture
def submitter(tmp_path: Path):  # type: ignore[no-untyped-def]
    procs: list[subprocess.Popen[str]] = []

    def start() -> subprocess.Popen[str]:
        p = subprocess.Popen([sys.executable, "-c", STOPS_BEFORE_PUBLISH,
                              str(tmp_path / "root"), TOKEN],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        procs.append(p)
        # Wait for the thing itself: the process stopped inside its submit, claim held.
        while not _stopped(p.pid):
            assert p.poll() is None, p.communicate()
            time.sleep(0.01)
        return p

    yield start
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()


def test_a_stopped_submitter_holds_its_token_and_its_object_is_the_one_bound(
        tmp_path: Path, submitter) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "root"
    stopped = submitter()
    other = LocalBackend(root=root)
    # The takeover's submit of the same token: refused as in flight, nothing published.
    with pytest.raises(SubmitInFlight) as caught:
        other.submit(_submission())
    assert isinstance(caught.value, SchedulerUnreachable)  # the loop retries it next tick
    assert "another process is submitting" in str(caught.value)
    assert _objects_with(root, TOKEN) == []
    # Continued, the stopped submitter publishes; the retry binds that very object.
    stopped.send_signal(signal.SIGCONT)
    out, err = stopped.communicate(timeout=60)
    assert stopped.returncode == 0, err
    published = out.strip()
    assert other.submit(_submission()) == published
    assert _objects_with(root, TOKEN) == [published]
    assert not claim_path(root, TOKEN).exists()  # removed once published
    other.cancel(published)


def test_a_submitter_killed_while_holding_the_claim_frees_it_at_once(
        tmp_path: Path, submitter) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "root"
    stopped = submitter()
    stopped.kill()
    stopped.wait()
    other = LocalBackend(root=root)
    ref = other.submit(_submission())  # the kernel dropped the dead holder's lock
    assert _objects_with(root, TOKEN) == [ref]
    other.cancel(ref)


def test_other_tokens_are_not_held_by_a_stopped_submitter(
        tmp_path: Path, submitter) -> None:  # type: ignore[no-untyped-def]
    root = tmp_path / "root"
    submitter()
    other = LocalBackend(root=root)
    sub = Submission(job_id="job-other", number=1, token="job-other.1.token",
                     spec=spec((PY, "-c", "pass")))
    ref = other.submit(sub)
    assert _objects_with(root, "job-other.1.token") == [ref]
    other.cancel(ref)


def test_a_claim_planted_as_a_symlink_is_not_followed(tmp_path: Path) -> None:
    root = tmp_path / "root"
    backend = LocalBackend(root=root)
    backend.disk.claim()
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    path = claim_path(root, TOKEN)
    path.parent.mkdir(mode=0o700, exist_ok=True)
    os.symlink(target, path)
    with pytest.raises(SchedulerUnreachable, match="cannot open the submit claim"):
        backend.submit(_submission())
    assert target.read_text() == "keep"
