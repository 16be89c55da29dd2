"""Issue 35, scenario 7's second half: a person suspends a running TrainJob with kubectl, then
resumes it (docs/kubeflow.md "A person's suspend"). The real chain: Trainer suspends the
JobSet, the Job controller deletes the active pods; resumed, the pods are made again. The
suspend ends the running execution in the record and the resumed run is a new one (issue 46,
core/held_runs.py)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from datetime import datetime
from typing import Any

from k8s_helpers import kubectl, ready_pods
from test_kubeflow_real import DISPATCH_RUNTIME, RESUBMIT, causes_in_history, spec
from tests.e2e.conftest import Dispatch


def _suspend(namespace: str, trainjob: str, value: bool) -> None:
    kubectl("patch", "trainjob", trainjob, "-n", namespace, "--type", "merge",
            "-p", json.dumps({"spec": {"suspend": value}}))


def _wait(cli: Dispatch, proc: subprocess.Popen[str],
          pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    try:
        return cli.wait_for("sus", pred, timeout=120)
    except AssertionError as err:
        proc.terminate()
        out, said = proc.communicate(timeout=60)
        raise AssertionError(f"{err}\n`dispatch run` said:\n{out}\n{said}") from None


def test_a_persons_suspend_is_held_then_runs_again_when_resumed(
        cli: Dispatch, namespace: str) -> None:
    proc = cli.spawn("run", str(spec(cli, namespace, "sus", {"DISPATCH_TESTBED_SECONDS": "20"},
                                     runtime=DISPATCH_RUNTIME, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    try:
        st = _wait(cli, proc, lambda s: s["state"] == "running" and bool(s["objects"]))
        trainjob = st["objects"][-1].split("/")[-1]
        selector = f"jobset.sigs.k8s.io/jobset-name={trainjob}"
        ready_pods(namespace, selector)
        _suspend(namespace, trainjob, True)
        # Held stays until the person resumes: not a transient state.
        held = _wait(cli, proc, lambda s: s["state"] == "held")
        assert held["cause"]["kind"] == "held", held
        assert held["cause"]["provenance"] == "scheduler", held  # not dispatch's own gate
        assert held["submissions"] == 1
        _suspend(namespace, trainjob, False)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    final = json.loads(out)
    assert final["state"] == "succeeded", (final, err)
    # Never resubmitted, no budget spent, never read as an ended execution.
    assert final["submissions"] == 1, final
    # A person's hold is the scheduler's present state, not a decision: no recovery, no
    # hold of dispatch's, no transition of the job's is committed for it...
    kinds = causes_in_history(cli, "sus")
    assert not {"node-lost", "preempted", "non-zero-exit", "unknown"} & set(kinds), kinds
    # ...but it ended the running execution (issue 46: before, execution 0 "ran" from its
    # start to the end, and goodput counted the suspended time as running): execution 0
    # ended held (not final), the run after the resume is execution 1
    story = cli.json("history", "sus")
    ends = [h["event"] for h in story if h["type"] == "ExecutionEnded"]
    starts = [h["event"] for h in story if h["type"] == "ExecutionStarted"]
    assert [(e["execution"], e["cause"]["kind"], e.get("final", True)) for e in ends] == [
        (0, "held", False), (1, "none", True)], ends
    assert [e["execution"] for e in starts] == [0, 1], starts
    assert not [h for h in story if h["type"] in ("RecoveryStarted", "HoldPlaced")], story
    held_at = _time(ends[0]["cause"]["at"])
    resumed = _time(starts[1]["started"])
    assert _time(starts[0]["started"]) <= held_at <= resumed, (starts, ends)
    # goodput: the time from the suspend to the new run is held (no node-time), never running
    (group,) = cli.json("goodput", "sus")["groups"]
    parts = {(p["phase"], p["cause"]): p for p in group["parts"]}
    running = parts[("running", "none")]["seconds"]
    ran = ((held_at - _time(starts[0]["started"]))
           + (_time(ends[1]["cause"]["at"]) - resumed)).total_seconds()
    # (at most: a start the scheduler stamps in a whole second before the job's creation
    # counts from the creation)
    assert 0 < running <= ran + 1e-6, (parts, ran)
    if resumed > held_at:
        held = parts[("held", "held")]
        # from the suspend to the new run (less, when whole-second stamps fall before an
        # earlier boundary of the split)
        assert 0 < held["seconds"] <= (resumed - held_at).total_seconds() + 1e-6, held
        assert held["node_seconds"] == 0, held


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
