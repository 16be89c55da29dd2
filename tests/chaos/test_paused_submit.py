"""Issue 45 item 12: a person's cancel during a paused submit leaves no process running.

A real supervisor A (a child process) is stopped (SIGSTOP) inside the local submit, its
object staged and the token's claim held; standby B (this process, a real Supervision)
takes the scope over and its retry is refused by the claim; a person cancels; B commits
``cancelled`` with no object bound. Then A is continued and publishes its object. Checked
on the committed history, on SQLite and on a throwaway PostgreSQL: B stopped that late
object and recorded it as a duplicate (S15), the outcome is still the person's cancel, and
the object's processes are gone.

Then the same with the committer gone: B (a child process here) commits the cancel and is
killed, and a third supervisor C takes the scope over before A is continued. C never saw
the commit, so only the store's index of unresolved attempts (stores/attempts.py) tells it
the finished job is still to watch; with C's clock two hours ahead, past WATCH_UNRESOLVED,
only A's being alive (paused, on this host) keeps the watch open (core/waits.watch_until).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from datetime import datetime, timedelta
from functools import partial
from pathlib import Path

import pytest
from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401  (fixtures)
from tests.integration.supervision.helpers import ROOT, child_env
from tests.specs import parse_spec

from dispatch.backends.local import LocalBackend
from dispatch.backends.local.procs import marked, process_alive
from dispatch.core import events as ev
from dispatch.core.model import CauseKind, State
from dispatch.core.record import fold
from dispatch.service.requests import create_job, request_cancel
from dispatch.stores.select import open_store
from dispatch.supervise.leases import Supervision, local_scope
from dispatch.supervise.loop import Supervisor, TickReport, utcnow

pytestmark = pytest.mark.chaos

# Supervisor A: serves the scope; its first publish stops the process itself (SIGSTOP) just
# before the rename of the staged object, claim held, then publishes when continued.
PAUSES_IN_SUBMIT = """
import os, signal, sys, threading
from dispatch.backends.local import LocalBackend
from dispatch.stores.select import open_store
from dispatch.supervise.leases import Supervision

url, root, scope = sys.argv[1:4]
rename = os.rename
paused = []
def stop_then_rename(src, dst):
    if "/staging/" in str(src) and "/objects/" in str(dst) and not paused:
        paused.append(True)
        # To this thread: kill(getpid()) lets the kernel pick another thread to take the
        # stop, and this one ran on through the rename before the group stop reached it.
        signal.pthread_kill(threading.get_ident(), signal.SIGSTOP)
    rename(src, dst)
os.rename = stop_then_rename
backend = LocalBackend(root)
sup = Supervision(open_store(url), lambda _n: backend, [scope], lease_s=1.0, poll=0.1)
signal.signal(signal.SIGTERM, lambda *_: sup.stop())
sup.run()
"""

# Supervisor B: takes the scope over from the paused A; its own submit claims wait 3 s, so
# a person's cancel is committed without the 30 s wait. Killed once it has committed.
SERVES = """
import sys
from datetime import timedelta
from functools import partial
from dispatch.backends.local import LocalBackend
from dispatch.stores.select import open_store
from dispatch.supervise.leases import Supervision
from dispatch.supervise.loop import Supervisor

url, root, scope = sys.argv[1:4]
backend = LocalBackend(root)
make = partial(Supervisor, attempt_lease=timedelta(seconds=3))
Supervision(open_store(url), lambda _n: backend, [scope], lease_s=1.0, poll=0.1,
            make_supervisor=make).run()
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'record.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


def _stopped(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "T"
    except OSError:
        return False


def _wait(pred, what: str, timeout: float = 120) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, f"timed out after {timeout}s waiting for {what}"
        time.sleep(0.05)


def test_a_late_object_of_a_paused_submit_is_stopped_after_a_persons_cancel(
        url: str, tmp_path: Path) -> None:
    root = tmp_path / "local"
    scope = local_scope(root)
    spec = {"name": "paused", "backend": "local", "command": ["sleep", "300"], "nodes": 1,
            "policy": {"rules": [{"on": ["preempted"], "action": "resubmit", "budget": 1}]}}
    with open_store(url) as store:
        job_id = create_job(store, parse_spec(spec, "<paused>"), LocalBackend(root)
                            .declarations(), utcnow(), scope=scope)
    a = subprocess.Popen([sys.executable, "-c", PAUSES_IN_SUBMIT, url, str(root), scope],
                         env=child_env(), cwd=ROOT, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    try:
        _wait(lambda: _stopped(a.pid) or a.poll() is not None, "A to stop in its submit")
        assert a.poll() is None, a.communicate()
        _wait(lambda: len(list((root / "staging").glob("*/runner.json"))) == 1,
              "A's object staged, its runner waiting")  # a runner's start: slow under load
        phase = {"cancelled": False, "continued": False}
        # B: attempt lease 3 s, so the person's cancel commits without the 30 s wait.
        make = partial(Supervisor, attempt_lease=timedelta(seconds=3))
        backend = LocalBackend(root)
        with open_store(url) as store:
            sup = Supervision(store, lambda _n: backend, [scope], lease_s=1.0, poll=0.1,
                              make_supervisor=make)
            deadline = time.monotonic() + 180

            def done() -> bool:
                assert time.monotonic() < deadline, store.read(job_id)
                record = store.read(job_id)
                job = fold(record, utcnow())
                if not phase["cancelled"] and any(
                        isinstance(e, ev.SubmissionAttempted) for e in record):
                    request_cancel(store, job_id, utcnow(), "alice")  # B's retry refused
                    phase["cancelled"] = True
                elif phase["cancelled"] and not phase["continued"] \
                        and job.outcome is not None:
                    assert job.submissions[0].ref is None  # committed with nothing bound
                    a.send_signal(signal.SIGCONT)  # A publishes its object now
                    phase["continued"] = True
                return any(isinstance(e, ev.DuplicateStopped) for e in record)

            sup.serve_until(done)
            record = store.read(job_id)
        job = fold(record, utcnow())
        assert phase["continued"]
        assert job.outcome is not None
        assert (job.outcome.state, job.outcome.cause.kind, job.outcome.cause.actor) == \
            (State.CANCELLED, CauseKind.CANCELLED, "alice")
        assert not any(isinstance(e, ev.SubmissionBound) for e in record), \
            "A's late append is fenced; B binds nothing to a finished job"
        [dup] = [e for e in record if isinstance(e, ev.DuplicateStopped)]
        assert dup.token == job.submissions[0].token
        assert dup.cause.kind is CauseKind.DUPLICATE
        assert dup.at > job.outcome.at  # the late object, after the outcome
        # The late object is the one A published, and it ended with every process of it.
        objdir = root / "objects" / dup.ref
        meta = json.loads((objdir / "meta.json").read_text())
        assert meta["token"] == dup.token
        runner = json.loads((objdir / "runner.json").read_text())
        _wait(lambda: not process_alive(runner["pid"], runner["start_ticks"]),
              f"the runner of {dup.ref} to leave")
        report = LocalBackend(root).discover([dup.token], [dup.ref]).get(dup.ref)
        assert report is not None and not report.alive, report
        assert marked(meta["mark"]) == [], "a process of the late object still runs"
    finally:
        if a.poll() is None:
            a.send_signal(signal.SIGCONT)
            a.terminate()
            try:
                a.wait(15)
            except subprocess.TimeoutExpired:
                a.kill()
                a.wait()


def _end(p: subprocess.Popen[str]) -> None:
    if p.poll() is None:
        p.send_signal(signal.SIGCONT)
        p.kill()
        p.wait()


@pytest.mark.parametrize("ahead", [timedelta(0), timedelta(hours=2)],
                         ids=["within-the-horizon", "past-the-horizon"])
def test_a_late_object_is_stopped_by_a_supervisor_that_took_over_after_the_commit(
        url: str, tmp_path: Path, ahead: timedelta) -> None:
    root = tmp_path / "local"
    scope = local_scope(root)
    spec = {"name": "paused", "backend": "local", "command": ["sleep", "300"], "nodes": 1}
    with open_store(url) as store:
        job_id = create_job(store, parse_spec(spec, "<paused>"), LocalBackend(root)
                            .declarations(), utcnow(), scope=scope)
    argv = [url, str(root), scope]
    a = subprocess.Popen([sys.executable, "-c", PAUSES_IN_SUBMIT, *argv], env=child_env(),
                         cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    b: subprocess.Popen[str] | None = None
    try:
        _wait(lambda: _stopped(a.pid) or a.poll() is not None, "A to stop in its submit")
        assert a.poll() is None, a.communicate()
        _wait(lambda: len(list((root / "staging").glob("*/runner.json"))) == 1,
              "A's object staged, its runner waiting")
        b = subprocess.Popen([sys.executable, "-c", SERVES, *argv], env=child_env(), cwd=ROOT,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
        with open_store(url) as store:
            def retried() -> bool:  # B took over and its retry was refused by A's claim
                return any(isinstance(e, ev.SubmissionAttempted) for e in store.read(job_id))

            _wait(retried, "B to take the scope over and retry")
            request_cancel(store, job_id, utcnow(), "alice")
            _wait(lambda: fold(store.read(job_id), utcnow()).outcome is not None,
                  "B to commit the person's cancel")
            b.kill()  # the committer dies: its memory of the job goes with it
            b.wait()
            job = fold(store.read(job_id), utcnow())
            assert job.outcome is not None and job.submissions[0].unresolved

            # C: a fresh supervisor; a long lease, so the continued A cannot take it back.
            def clock() -> datetime:
                return utcnow() + ahead

            make = partial(Supervisor, clock=clock)
            sup = Supervision(store, lambda _n: LocalBackend(root), [scope], lease_s=10.0,
                              poll=0.1, make_supervisor=make)
            deadline = time.monotonic() + 180

            def on_tick(reports: dict[str, TickReport]) -> None:
                if scope in reports and a.poll() is None and _stopped(a.pid):
                    a.send_signal(signal.SIGCONT)  # C has ticked the scope: A publishes now

            def done() -> bool:
                assert time.monotonic() < deadline, (
                    "no duplicate stop recorded: C does not watch the finished job",
                    store.read(job_id))
                return any(isinstance(e, ev.DuplicateStopped) for e in store.read(job_id))

            sup.serve_until(done, on_tick)
            record = store.read(job_id)
        job = fold(record, utcnow())
        assert job.outcome is not None
        assert (job.outcome.state, job.outcome.cause.actor) == (State.CANCELLED, "alice")
        assert not any(isinstance(e, ev.SubmissionBound) for e in record)
        [dup] = [e for e in record if isinstance(e, ev.DuplicateStopped)]
        assert dup.token == job.submissions[0].token
        assert dup.at >= job.outcome.at + ahead  # recorded by C, on its clock
        objdir = root / "objects" / dup.ref
        assert json.loads((objdir / "meta.json").read_text())["token"] == dup.token
        runner = json.loads((objdir / "runner.json").read_text())
        _wait(lambda: not process_alive(runner["pid"], runner["start_ticks"]),
              f"the runner of {dup.ref} to leave")
        assert marked(json.loads((objdir / "meta.json").read_text())["mark"]) == []
    finally:
        for p in (a, b):
            if p is not None:
                _end(p)
