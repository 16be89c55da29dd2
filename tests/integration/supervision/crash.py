"""The crash-window harness of issue 39: one job on the local backend is brought to an action
(submit, preempt recovery, node-loss fence and gated replacement, a person's cancel, a
person's release or give-up) by a clean supervisor in this process; then a real
``dispatch supervise`` child with one failpoint armed (DISPATCH_FAILPOINTS) carries the
action on until it dies at that point (waited for: its exit status is the failpoint's);
then a clean supervisor takes the scope over and finishes the job.

What a run returns is checked by the tests: the outcome, the submissions and the budget
against an uncrashed run's, no two objects for one token, no process left behind, the record
read back and folded, and the time from the death to the moment the new supervisor carried
the interrupted act out (``recovery_s``: its first event that does; 0 when the dead one had
done it), with the bound the issue sets for it (lease + the backend's submit bound + two
ticks, a tick as long as the slowest pass of the new supervisor).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from tests.integration.supervision.helpers import ROOT, child_env, objects_per_token
from tests.specs import parse_spec

from dispatch.backends.base import Submission
from dispatch.backends.local import LocalBackend
from dispatch.backends.local.procs import process_alive
from dispatch.core import events as ev
from dispatch.core.model import token_for
from dispatch.core.record import Job, fold
from dispatch.service.requests import create_job, give_up, request_cancel, resubmit_from_hold
from dispatch.stores.select import open_store
from dispatch.supervise.leases import Supervision, local_scope
from dispatch.supervise.loop import utcnow
from dispatch.support import failpoints

LEASE_S = 1.0
POLL_S = 0.1
WINDOW = timedelta(seconds=1)  # the node-loss window of these jobs
# The first submission runs until it is ended; every later one succeeds at once.
FIRST_RUNS = ["sh", "-c", 'test "$DISPATCH_SUBMISSION" = 1 && exec sleep 120; exit 0']
RESUBMIT = {"on": ["preempted", "node-lost"], "action": "resubmit", "budget": 3}
HOLD = {"on": ["preempted"], "action": "hold"}


@dataclass(frozen=True)
class Action:
    name: str
    command: list[str]
    rule: dict[str, Any]
    nodes: int
    ready: Callable[[Job], bool]  # the job is where the action starts
    # The events by which the new supervisor carries the interrupted act out: the earliest of
    # them written after the crash counts (none: the dead one had carried it out itself).
    recovered: tuple[type, ...]
    points: tuple[str, ...]  # the failpoints the action passes
    spec_extra: dict[str, Any] = field(default_factory=dict)  # more of the job's spec


def _started(job: Job) -> bool:
    cur = job.current
    return cur is not None and cur.ref is not None and bool(cur.executions_started)


ACTIONS: dict[str, Action] = {a.name: a for a in [
    Action("submit", ["true"], RESUBMIT, 1, lambda j: True, (ev.SubmissionBound,),
           ("appended:SubmissionIntended", "local-submit:staged", "acted:submit",
            "appended:SubmissionBound", "appended:OutcomeCommitted", "lease:renewing",
            "lease:renewed")),
    Action("preempt", FIRST_RUNS, RESUBMIT, 1, _started, (ev.SubmissionBound,),
           ("appended:RecoveryStarted", "local-submit:staged", "acted:submit",
            "appended:SubmissionBound", "appended:OutcomeCommitted")),
    Action("node-loss", FIRST_RUNS, RESUBMIT, 2, _started,
           (ev.StopRequested, ev.SubmissionAttempted, ev.SubmissionBound, ev.GateOpened,
            ev.ExecutionStarted, ev.ExecutionEnded),
           ("appended:StopRequested", "acted:stop", "local-submit:staged", "acted:submit",
            "appended:SubmissionBound", "gate:opening", "acted:open-gate",
            "appended:GateOpened")),
    Action("cancel", ["sleep", "120"], RESUBMIT, 1, _started,
           (ev.CancelSent, ev.ExecutionEnded, ev.OutcomeCommitted),
           ("appended:CancelSent", "acted:cancel", "appended:OutcomeCommitted")),
    Action("release", FIRST_RUNS, HOLD, 1, lambda j: j.hold is not None,
           (ev.SubmissionBound,),
           ("appended:SubmissionIntended", "local-submit:staged", "acted:submit",
            "appended:SubmissionBound")),
    Action("give-up", FIRST_RUNS, HOLD, 1, lambda j: j.hold is not None,
           (ev.OutcomeCommitted,),
           ("appended:OutcomeCommitted",)),
]}

# -- Issue 45 item 16: actions passing the points the ones above never reach ----------------
# tests/chaos/test_failpoints_armed.py checks that every point is armed by some test: by
# an action here, or by the Slurm lane's segment publication, where SLURM_POINTS are armed
# (tests/integration/slurm/test_segment_crash.py: segment health names Slurm units).
SLURM_POINTS = ("appended:SegmentPublished", "acted:publish-segment")
#
# "rejected": the local backend refuses the submit (its workdir is not a directory here).
# "duplicate": an object the job never meant to have (a second one carrying the token of its
# submission 1) runs beside its own; the job's own run waits until that object's process is
# gone (its pid, written before it runs), so the job ends only once the stop was carried out.
DUPLICATE_PID = "{root}/duplicate.pid"
WAITS_FOR_DUPLICATE = ["sh", "-c", 'while [ ! -e "$0" ] || kill -0 "$(cat "$0")" 2>/dev/null; '
                       'do sleep 0.1; done', DUPLICATE_PID]
DUPLICATE_RUNS = ["sh", "-c", 'echo $$ > "$0.new" && mv "$0.new" "$0" && exec sleep 120',
                  DUPLICATE_PID]
FROM_CREATION = ("submit", "rejected", "runs", "retry")  # the crashing child serves the job
# from its creation ("retry": after a first supervisor died with its submit intended).
ACTIONS.update({a.name: a for a in [
    Action("rejected", ["true"], RESUBMIT, 1, lambda j: True, (ev.OutcomeCommitted,),
           ("appended:SubmissionRejected", "appended:EscalationRaised"),
           spec_extra={"workdir": "/nonexistent/dispatch-crash-matrix"}),
    Action("duplicate", WAITS_FOR_DUPLICATE, RESUBMIT, 1, _started,
           (ev.DuplicateStopped, ev.ExecutionEnded),
           ("appended:DuplicateStopped", "acted:stop")),
    # The run's start and end, learnt from the scheduler.
    Action("runs", ["true"], RESUBMIT, 1, lambda j: True, (ev.OutcomeCommitted,),
           ("appended:ExecutionStarted", "appended:ExecutionEnded")),
    # A preemption the policy holds for a person; after the crash she gives up.
    Action("hold", FIRST_RUNS, HOLD, 1, _started, (ev.HoldPlaced,), ("appended:HoldPlaced",)),
    # The submit a supervisor recorded and died before sending, retried by the next one.
    Action("retry", ["true"], RESUBMIT, 1, lambda j: True, (ev.SubmissionBound,),
           ("appended:SubmissionAttempted",)),
]})


def _before_crash(action: Action, url: str, root: Path, scope: str, state: Path) -> None:
    if action.name == "retry":  # a first supervisor dies with the submit intended, unsent
        first = _child(url, root, scope, state, "appended:SubmissionIntended")
        _, err = first.communicate(timeout=90)
        assert first.returncode == failpoints.EXIT_CODE, f"retry: exit {first.returncode}:\n{err}"


def _after_crash(action: Action, url: str, root: Path, scope: str, job_id: str) -> None:
    if action.name == "hold":  # the hold waits for a person: she gives up
        _serve(url, root, scope, lambda j: j.hold is not None, job_id)
        with open_store(url) as store:
            give_up(store, job_id, utcnow(), "alice")


@dataclass
class Run:
    action: str
    point: str | None
    outcome: tuple[str, str, int, tuple[int, ...]] = ("", "", 0, ())
    recovery_s: float = 0.0
    bound_s: float = 0.0
    exit_code: int | None = None
    notes: list[str] = field(default_factory=list)


def _job(url: str, job_id: str) -> Job:
    with open_store(url) as store:
        return fold(store.read(job_id), utcnow())  # the record read back and folded


def _serve(url: str, root: Path, scope: str, done: Callable[[Job], bool], job_id: str,
           timeout: float = 90) -> float:
    """A clean supervisor in this process until ``done``; hands the lease back. Returns the
    longest time between two of its passes (a tick of this machine now, poll included)."""
    backend = LocalBackend(root, node_loss_window=WINDOW)
    marks: list[float] = [time.monotonic()]
    deadline = marks[0] + timeout
    with open_store(url) as store:
        sup = Supervision(store, lambda _n: backend, [scope], lease_s=LEASE_S, poll=POLL_S)

        def finished() -> bool:
            marks.append(time.monotonic())
            if marks[-1] > deadline:
                raise AssertionError(f"job {job_id} not where it should be in {timeout}s: "
                                     f"{_job(url, job_id)}")
            return done(fold(store.read(job_id), utcnow()))

        sup.serve_until(finished)
    return max(b - a for a, b in zip(marks, marks[1:], strict=False)) if len(marks) > 1 \
        else POLL_S


def _trigger(action: Action, url: str, root: Path, job_id: str) -> None:
    with open_store(url) as store:
        if action.name in ("preempt", "release", "give-up"):
            LocalBackend(root).inject(job_id, "preempt")
        elif action.name == "node-loss":
            LocalBackend(root).inject(job_id, "lose-node")
        elif action.name == "cancel":
            request_cancel(store, job_id, utcnow(), "alice")
        elif action.name == "duplicate":
            _start_duplicate(root, job_id)
        elif action.name == "hold":
            LocalBackend(root).inject(job_id, "preempt")


def _start_duplicate(root: Path, job_id: str) -> None:
    """A second object carrying the token of the job's bound submission 1: what two
    submits racing past the token's claim would leave (submit itself returns the object
    already there, and discovery looks for the job's tokens only, so it is made here with
    the backend's own object maker)."""
    command = [c.replace("{root}", str(root)) for c in DUPLICATE_RUNS]
    spec = parse_spec({"name": "duplicate", "backend": "local", "command": command,
                       "nodes": 1}, "<duplicate>")
    backend = LocalBackend(root)
    ref = backend._create(Submission(job_id=job_id, number=1, token=token_for(job_id, 1),
                                     spec=spec), backend.disk.claim().id)
    ready = Path(DUPLICATE_PID.replace("{root}", str(root)))
    deadline = time.monotonic() + 60
    while not ready.exists():  # it runs: the job waits for its process to be gone
        assert time.monotonic() < deadline, f"the duplicate {ref} never ran"
        time.sleep(0.05)


def _person_after_hold(action: Action, url: str, job_id: str) -> None:
    with open_store(url) as store:
        if action.name == "release":
            resubmit_from_hold(store, job_id, utcnow(), "alice")
        elif action.name == "give-up":
            give_up(store, job_id, utcnow(), "alice")


def _child(url: str, root: Path, scope: str, state: Path, point: str) -> subprocess.Popen[str]:
    env = child_env(DISPATCH_STORE=url, DISPATCH_LOCAL_ROOT=str(root),
                    XDG_STATE_HOME=str(state), DISPATCH_LOCAL_NODE_LOSS_WINDOW="1s",
                    DISPATCH_FAILPOINTS=point)
    return subprocess.Popen(
        [sys.executable, "-m", "dispatch.cli", "supervise", "--scope", scope,
         "--lease", str(LEASE_S), "--poll", str(POLL_S)],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)


def _done(job: Job) -> bool:
    return job.outcome is not None


def run(url: str, base: Path, action_name: str, point: str | None) -> Run:
    """One action, crashed at ``point`` (None: the uncrashed run)."""
    action = ACTIONS[action_name]
    if point is not None:
        failpoints.parse(point)  # an unknown name: the error naming the known ones
    result = Run(action_name, point)
    root = base / "local"
    state = base / "state"
    scope = local_scope(root)
    spec = {"name": f"{action_name}-{point}", "backend": "local",
            "command": [c.replace("{root}", str(root)) for c in action.command],
            "nodes": action.nodes, "policy": {"rules": [action.rule]}, **action.spec_extra}
    decl = LocalBackend(root, node_loss_window=WINDOW).declarations()
    with open_store(url) as store:
        job_id = create_job(store, parse_spec(spec, "<crash>"), decl, utcnow(), scope=scope)
    if action.name not in FROM_CREATION:
        _serve(url, root, scope, _started, job_id)
        _trigger(action, url, root, job_id)
        if action.name in ("release", "give-up"):
            _serve(url, root, scope, action.ready, job_id)
            _person_after_hold(action, url, job_id)
    _before_crash(action, url, root, scope, state)
    died_at: datetime | None = None
    if point is not None:
        child = _child(url, root, scope, state, point)
        try:
            _, err = child.communicate(timeout=90)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
            raise AssertionError(f"{action_name}: the supervisor never reached {point}") \
                from None
        died_at = utcnow()
        result.exit_code = child.returncode
        assert child.returncode == failpoints.EXIT_CODE, \
            f"{action_name}/{point}: exit {child.returncode}, not at the failpoint:\n{err}"
        assert f"failpoint {point}:" in err, err
    _after_crash(action, url, root, scope, job_id)
    tick = _serve(url, root, scope, _done, job_id)
    job = _job(url, job_id)
    assert job.outcome is not None
    result.outcome = (job.outcome.state.value, job.outcome.cause.kind.value,
                      len(job.submissions), tuple(job.budget_used))
    if died_at is not None:
        with open_store(url) as store:
            record = store.read(job_id)
        assert any(isinstance(e, action.recovered) for e in record), \
            f"{action_name}/{point}: none of {action.recovered} recorded"
        carried = [e.at for e in record if isinstance(e, action.recovered) and e.at >= died_at]
        result.recovery_s = (min(carried) - died_at).total_seconds() if carried else 0.0
        bound = LocalBackend(root).submit_in_flight.total_seconds()
        result.bound_s = LEASE_S + bound + 2 * tick
    _no_duplicates(root, result)
    _no_orphans(root, result)
    return result


def _no_duplicates(root: Path, result: Run) -> None:
    planted = 1 if result.action == "duplicate" else 0  # the one the action made itself
    dupes = {t: n for t, n in objects_per_token(root).items() if n > 1 + planted}
    assert not dupes, f"{result.action}/{result.point}: two objects for one token: {dupes}"


def _children(pid: int) -> list[str]:
    try:
        return Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []


def _no_orphans(root: Path, result: Run) -> None:
    """Every published object's runner is gone once its object ended (waited for: it leaves
    right after its last status); a runner of an object never published (its submit died
    before the rename) started no process and leaves by itself (runner.PUBLISH_WAIT_S), so
    it is checked to have no children and then ended here."""
    deadline = time.monotonic() + 30
    for info in sorted((root / "objects").glob("*/runner.json")):
        got = json.loads(info.read_text())
        pid, ticks = got["pid"], got["start_ticks"]
        while process_alive(pid, ticks) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not process_alive(pid, ticks), f"{result.action}/{result.point}: runner {pid} of " \
                                       f"{info.parent.name} outlived its object"
    for info in sorted((root / "staging").glob("*/runner.json")):
        got = json.loads(info.read_text())
        pid = got["pid"]
        if process_alive(pid, got["start_ticks"]):
            assert not _children(pid), f"runner {pid} of an unpublished object started " \
                                       f"{_children(pid)}"
            result.notes.append(f"unpublished runner {pid} waiting (ended here)")
            os.kill(pid, signal.SIGTERM)
