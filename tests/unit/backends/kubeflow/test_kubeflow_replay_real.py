"""Issue 46: the backend's reading of what real containers did, replayed event by event from
the testbed's real nodes (a real kubelet, containerd and runc; `record_fixtures.py real-*`,
tests/fixtures/k8s-recorded/real-*.jsonl), through both ways discover() reads, as the KWOK
recordings are (test_kubeflow_replay.py: every look checked, not only the end).

Where they differ from KWOK's: a real torchrun that loses its peer exits 1, not the 143 KWOK
gives every deleted pod; a preempted torchrun ends 1 too (its launcher's SignalException after
the kubelet's SIGTERM), so its cause must come from the pod's DisruptionTarget alone; the OOM
is the memory cgroup's kill of a real process (exit 137, reason OOMKilled), on the real runtime
whose Job does not restart it. The recordings hold no log and no shared-directory file (the
recorder deletes its scripts' folder): what the replays read of the application's error is
what the pods' statuses say."""

from __future__ import annotations

import json

import pytest
from test_kubeflow_replay import (
    Path_,
    kinds,
    never_pending_once_running,
    recorded,
    replay,
    trainjobs_added,
)

from dispatch.core.model import CauseKind, State

NEVER = {CauseKind.NODE_LOST, CauseKind.UNKNOWN}


def pod_ends(scenario: str) -> set[tuple[str, int]]:
    """(reason, exit code) of every container termination the recording's pods show."""
    found = set()
    for ln in recorded(scenario):
        if ln["kind"] != "Pod":
            continue
        for cs in (ln["object"].get("status") or {}).get("containerStatuses") or []:
            term = (cs.get("state") or {}).get("terminated")
            if term:
                found.add((term.get("reason"), term.get("exitCode")))
    return found


def test_real_torchrun_on_two_nodes_reads_running_then_succeeded(path: Path_) -> None:
    readings = replay("real-success", path)
    seen = kinds(readings)
    assert seen[-1] == (State.SUCCEEDED, CauseKind.NONE), seen
    assert (State.RUNNING, CauseKind.NONE) in seen
    assert not [k for k in seen if k is not None and k[1] in NEVER], seen
    never_pending_once_running(seen)
    final = readings[-1]
    assert final is not None and len(final.executions) == 1
    (run,) = final.executions
    assert run.nodes == ("real-node-1", "real-node-2"), run
    assert run.started_at is not None and run.ended_at is not None
    assert run.started_at < run.ended_at
    assert pod_ends("real-success") == {("Completed", 0)}


def test_a_real_exception_in_one_rank_is_its_exit_never_the_peers_reaction(path: Path_) -> None:
    readings = replay("real-exit", path)
    seen = kinds(readings)
    final = readings[-1]
    assert final is not None and seen[-1] == (State.FAILED, CauseKind.NON_ZERO_EXIT), seen
    assert final.cause.exit_code == 1 and len(final.executions) == 1, final
    assert "(node real-node-" in final.cause.detail, final.cause.detail
    # both real launchers ended 1: the rank that raised, and its peer whose all_reduce broke
    # (KWOK's deleted pods say 143)
    assert pod_ends("real-exit") == {("Error", 1)}
    error = final.executions[-1].error
    assert error is not None and error.exit_code == 1 and error.node.startswith("real-node-")
    assert not [k for k in seen if k is not None and k[1] in NEVER], seen
    never_pending_once_running(seen)


def test_a_real_cgroup_oom_is_out_of_memory_on_its_node(path: Path_) -> None:
    readings = replay("real-oom", path)
    seen = kinds(readings)
    final = readings[-1]
    assert final is not None and seen[-1] == (State.FAILED, CauseKind.OUT_OF_MEMORY), seen
    assert final.cause.exit_code == 137
    assert "container node: terminated reason=OOMKilled exitCode=137" in final.cause.detail
    (run,) = final.executions
    assert len(run.nodes) == 1 and f"(node {run.nodes[0]})" in final.cause.detail, final
    assert pod_ends("real-oom") == {("OOMKilled", 137)}
    never = NEVER | {CauseKind.NON_ZERO_EXIT}
    assert not [k for k in seen if k is not None and (k[1] in never or k[0] is State.RECOVERING)]
    never_pending_once_running(seen)


def test_a_real_preemption_is_preempted_though_torchrun_ends_1(path: Path_) -> None:
    readings = replay("real-preempted", path)
    seen = kinds(readings)
    final = readings[-1]
    assert final is not None and seen[-1] == (State.FAILED, CauseKind.PREEMPTED), seen
    assert "reason=PreemptionByScheduler" in final.cause.detail, final.cause
    # the kubelet's SIGTERM: torchrun's launcher ends 1 (KWOK says 143); the eviction is the
    # cause, never the exit
    assert ("Error", 1) in pod_ends("real-preempted")
    assert final.executions[-1].error is None  # a preemption is not the application's end
    never = NEVER | {CauseKind.NON_ZERO_EXIT}
    assert not [k for k in seen if k is not None and k[1] in never], seen
    never_pending_once_running(seen)
    # the resubmission ran to success on the other real node
    assert len(trainjobs_added("real-preempted")) == 2
    again = replay("real-preempted", path, 1)
    assert kinds(again)[-1] == (State.SUCCEEDED, CauseKind.NONE)
    last = again[-1]
    assert last is not None and last.executions[-1].nodes != final.executions[-1].nodes


@pytest.mark.parametrize("scenario", ["real-exit", "real-oom", "real-preempted"])
def test_a_real_failure_with_the_pods_watch_behind_never_commits_another_cause(
        path: Path_, scenario: str) -> None:
    # M11 on the real recordings: the TrainJob's Failed before the pod's end reaches its watch
    recorded_order = replay(scenario, path)[-1]
    readings = replay(scenario, path, pods_lag=True)
    final = readings[-1]
    assert recorded_order is not None and final is not None
    assert (final.state, final.cause.kind) == (recorded_order.state, recorded_order.cause.kind)
    failed = {r.cause.kind for r in readings if r is not None and r.state is State.FAILED}
    assert failed == {final.cause.kind}, kinds(readings)


def test_the_recordings_name_the_shared_directory_and_each_pods_files() -> None:
    # what the real pods were given: each pod's progress and error file named after it
    for scenario in ("real-success", "real-exit", "real-preempted"):
        (tj, *_) = [ln["object"] for ln in recorded(scenario) if ln["kind"] == "TrainJob"]
        shared = tj["metadata"]["annotations"]["dispatch.io/shared-dir"]
        env = {e["name"]: e for e in tj["spec"]["trainer"]["env"]}
        assert env["DISPATCH_PROGRESS_FILE"]["value"] == \
            f"{shared}/dispatch-$(DISPATCH_POD_NAME).progress.jsonl"
        assert tj["spec"]["trainer"]["env"][0]["name"] == "DISPATCH_POD_NAME"
        pods = [ln["object"] for ln in recorded(scenario) if ln["kind"] == "Pod"]
        assert pods and all(json.dumps(p).count("DISPATCH_POD_NAME") >= 1 for p in pods)
