"""Issue 46, "Misreadings a held-out run found on the control plane", on the real control plane
(KWOK pods: scripts/k8s-testbed.d/pod-stages.yaml): an execution starts when a container of
it runs, never at the pod's ``status.startTime``; the node-loss fence's window belongs to the
execution, never older than it. (The third, a person's suspend: test_kubeflow_suspend.py.)"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from k8s_helpers import items, kubectl
from test_kubeflow_real import DISPATCH_RUNTIME, RESUBMIT, causes_in_history, kind, run, spec
from tests.e2e.conftest import Dispatch


def _note(st: dict[str, Any]) -> str:
    return str((st.get("cause") or {}).get("note") or "")


def test_pods_bound_but_unable_to_pull_never_start_an_execution(
        cli: Dispatch, namespace: str) -> None:
    # Both pods are bound and the kubelet (here KWOK, as a kubelet does) has set their
    # status.startTime, but no container runs: ErrImagePull on both.
    proc = cli.spawn("run", str(spec(cli, namespace, "pull", {"DISPATCH_TESTBED_IMAGE_ERROR": "1"},
                                     nodes=2)), "--json", "--poll", "0.5")
    try:
        st = cli.wait_for("pull", lambda s: kind(s) == "launch-failed", timeout=120)
        assert st["state"] == "pending", st
        trainjob = st["objects"][-1].split("/")[-1]
        pods = _both_pulling(namespace, trainjob)
        assert all(p["spec"].get("nodeName") for p in pods), pods
        assert all(p["status"].get("startTime") for p in pods), pods
        # both bound: the note counts both (it said "1 of 2 pods placed")
        st = cli.wait_for("pull", lambda s: "2 of 2 pods placed" in _note(s), timeout=60)
        assert kind(st) == "launch-failed" and st["state"] == "pending", st
        # the record: no execution started, so no running time
        story = cli.json("history", "pull")
        assert not [h for h in story if h["type"] == "ExecutionStarted"], story
        cli("cancel", "pull", check=True)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    assert json.loads(out)["state"] == "cancelled", (out, err)
    (group,) = cli.json("goodput", "pull")["groups"]
    running = [p for p in group["parts"] if p["phase"] == "running"]
    assert not running, group["parts"]
    assert not [h for h in cli.json("history", "pull") if h["type"] == "ExecutionStarted"]


def _both_pulling(namespace: str, trainjob: str, timeout_s: float = 120
                  ) -> list[dict[str, Any]]:
    """The job's two pods, once both are bound and wait with ErrImagePull."""
    deadline = time.monotonic() + timeout_s
    while True:
        pods = items("pods", namespace, f"jobset.sigs.k8s.io/jobset-name={trainjob}")
        waiting = [cs["state"].get("waiting", {}).get("reason")
                   for p in pods for cs in p["status"].get("containerStatuses") or []]
        if waiting == ["ErrImagePull", "ErrImagePull"]:
            return pods
        if time.monotonic() > deadline:
            raise AssertionError(f"the pods of {trainjob} never both waited ErrImagePull: {pods}")
        time.sleep(0.5)


# dispatch reads a node with this taint as lost, whatever its effect (objects.LOST_NODE_TAINTS);
# PreferNoSchedule keeps pods schedulable there and no controller of the testbed removes it.
STALE = "node.kubernetes.io/out-of-service"


@pytest.fixture
def stale_taints() -> Iterator[str]:
    """Every KWOK node carries a lost-node taint added ten minutes ago (what a node just
    restored still carries for a moment), taken off again after the test."""
    every = json.loads(kubectl("get", "nodes", "-o", "json").stdout)["items"]
    nodes = [n for n in every if n["metadata"]["name"].startswith("kwok-node-")]
    assert nodes, "no KWOK node in the testbed"
    added = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    before = {n["metadata"]["name"]: n["spec"].get("taints") for n in nodes}
    try:
        for name, taints in before.items():
            mine = {"key": STALE, "value": "issue-46", "effect": "PreferNoSchedule",
                    "timeAdded": added}
            kubectl("patch", "node", name, "--type", "merge",
                    "-p", json.dumps({"spec": {"taints": [*(taints or []), mine]}}))
        for name in before:  # the API server kept the old time: the test is what it says
            (kept,) = [t for t in kubectl_node(name)["spec"]["taints"] if t["key"] == STALE]
            assert kept.get("timeAdded") == added, kept
        yield added
    finally:
        for name, taints in before.items():
            kubectl("patch", "node", name, "--type", "merge",
                    "-p", json.dumps({"spec": {"taints": taints}}), check=False)


def kubectl_node(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(kubectl("get", "node", name, "-o", "json").stdout)
    return data


def test_a_run_on_a_node_lost_before_it_started_gets_a_whole_window(
        cli: Dispatch, namespace: str, stale_taints: str) -> None:
    # The node reads lost since ten minutes before the job; the window (20 s) counts from the
    # run's own first moment there, so the 6 s run ends before it: never fenced. Before, the
    # window counted from the taint and the run was stopped at once (node-lost, budget spent).
    cli.env["DISPATCH_KUBEFLOW_NODE_LOSS_WINDOW"] = "20s"
    code, st = run(cli, spec(cli, namespace, "stale", {"DISPATCH_TESTBED_SECONDS": "6"},
                             runtime=DISPATCH_RUNTIME, policy=RESUBMIT))
    assert code == 0 and st["state"] == "succeeded", st
    assert st["submissions"] == 1, st
    assert "node-lost" not in causes_in_history(cli, "stale"), st["history"]
    story = cli.json("history", "stale")
    ends = [h["event"] for h in story if h["type"] == "ExecutionEnded"]
    assert [e["cause"]["kind"] for e in ends] == ["none"], ends
    assert not [h for h in story if h["type"] == "StopRequested"], story
