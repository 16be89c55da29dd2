"""Issue 34's acceptance: the testbed is the real thing. The real server version; a TrainJob
made with kubectl goes through the real Trainer, JobSet and Job controllers to Complete; with
DISPATCH_TESTBED_EXIT=3 it crash-loops in place (JobSet's restartPolicy OnFailure) and ends
Failed; `lose-node` gets its pods evicted by the real taint manager."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime

from k8s_helpers import (
    TESTBED,
    events_for,
    get,
    items,
    kubectl,
    ready_pods,
    trainjob,
    version,
    wait,
)


def stamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_the_server_is_the_kubernetes_the_tools_module_names() -> None:
    out = json.loads(kubectl("version", "-o", "json").stdout)
    assert out["serverVersion"]["gitVersion"] == version("K8S_VERSION")
    assert out["clientVersion"]["gitVersion"] == version("K8S_VERSION")


def test_a_trainjob_completes_through_trainer_jobset_and_job(namespace: str) -> None:
    name = trainjob(namespace, {"DISPATCH_TESTBED_SECONDS": "3"}, nodes=2)
    try:
        wait("trainjob", name, namespace, "condition=Complete")
        # The committed path: Trainer made the JobSet, JobSet the Job, the Job two pods on
        # the KWOK nodes, each of which ran its own three seconds.
        jobset = get("jobset", name, namespace)
        assert any(c["type"] == "Completed" and c["status"] == "True"
                   for c in jobset["status"]["conditions"])
        pods = items("pods", namespace, f"jobset.sigs.k8s.io/jobset-name={name}")
        assert len(pods) == 2
        for pod in pods:
            assert pod["status"]["phase"] == "Succeeded"
            assert pod["spec"]["nodeName"].startswith("kwok-node-")
            (c,) = pod["status"]["containerStatuses"]
            ran = stamp(c["state"]["terminated"]["finishedAt"]) - stamp(
                c["state"]["terminated"]["startedAt"])
            assert ran.total_seconds() >= 2.5, c
    finally:
        kubectl("delete", "trainjob", name, "-n", namespace, "--wait=false", check=False)


def test_exit_3_crash_loops_in_place_then_the_trainjob_fails(namespace: str) -> None:
    name = trainjob(namespace, {"DISPATCH_TESTBED_SECONDS": "1", "DISPATCH_TESTBED_EXIT": "3"})
    try:
        wait("trainjob", name, namespace, "condition=Failed", timeout_s=300)
        # JobSet's webhook defaulted the pods to restartPolicy OnFailure: the container was
        # restarted in place (the BackOff events of the one pod) until the Job's backoffLimit.
        job = items("jobs", namespace, f"jobset.sigs.k8s.io/jobset-name={name}")
        assert job, "the Job is kept after the failure"
        template = job[0]["spec"]["template"]["spec"]
        assert template["restartPolicy"] == "OnFailure"
        conditions = {c["type"]: c for c in job[0]["status"]["conditions"]}
        assert conditions["Failed"]["reason"] == "BackoffLimitExceeded", conditions
        backoffs = [e for e in events_for(namespace, name) if e["reason"] == "BackOff"]
        assert backoffs, "no crash loop was seen"
        assert max(e.get("count", 1) for e in backoffs) + len(backoffs) >= 2
    finally:
        kubectl("delete", "trainjob", name, "-n", namespace, "--wait=false", check=False)


def test_lose_node_evicts_its_pods_by_taint(namespace: str) -> None:
    name = trainjob(namespace, {"DISPATCH_TESTBED_SECONDS": "600"})
    node = None
    try:
        (pod,) = ready_pods(namespace, f"jobset.sigs.k8s.io/jobset-name={name}")
        node = pod["spec"]["nodeName"]
        subprocess.run([str(TESTBED), "lose-node", node], check=True)
        # Lease stale -> Ready Unknown -> unreachable taint -> eviction after the 20 s
        # toleration: the pod carries DisruptionTarget (DeletionByTaintManager) and is
        # Terminating (no kubelet to finish it: it stays so, which is what we read).
        podname = pod["metadata"]["name"]
        wait("pod", podname, namespace, "condition=DisruptionTarget", timeout_s=180)
        after = get("pod", podname, namespace)
        assert after["metadata"].get("deletionTimestamp")
        (dt,) = [c for c in after["status"]["conditions"] if c["type"] == "DisruptionTarget"]
        assert dt["reason"] == "DeletionByTaintManager", dt
        taints = {t["key"] for t in get("node", node, "")["spec"].get("taints", [])}
        assert "node.kubernetes.io/unreachable" in taints
    finally:
        if node:
            subprocess.run([str(TESTBED), "restore-node", node], check=False)
        kubectl("delete", "trainjob", name, "-n", namespace, "--wait=false", check=False)
