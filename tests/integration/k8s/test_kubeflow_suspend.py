"""Issue 35, scenario 7's second half: a person suspends a running TrainJob with kubectl, then
resumes it (docs/kubeflow.md "A person's suspend"). The real chain: Trainer suspends the
JobSet, the Job controller deletes the active pods; resumed, the pods are made again."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
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
    # A person's hold is the scheduler's present state, not a decision: nothing of it is
    # committed (as a Slurm `scontrol hold`), only the end.
    kinds = causes_in_history(cli, "sus")
    assert not {"node-lost", "preempted", "non-zero-exit", "unknown"} & set(kinds), kinds
