"""Tests play the controllers: Trainer (TrainJob -> JobSet), JobSet (-> Jobs), the Job controller
and the kubelet (-> Pods and their status), the node lifecycle controller (-> Node taints).

Every object built here is the shape the real controller writes (names, labels,
ownerReferences, condition fields), and is validated when stored in the stand-in.
"""

from __future__ import annotations

from typing import Any

from dispatch.backends.kubeflow.objects import (
    JOBSET_NAME_LABEL,
    MANAGED_LABEL,
    RESTART_ATTEMPT_LABEL,
    TOKEN_LABEL,
)

from .server import FakeApiServer

T0 = "2026-03-01T10:00:00Z"
T1 = "2026-03-01T10:05:00Z"
T2 = "2026-03-01T10:10:00Z"
REPLICATED_JOB = "node"


def cond(
    ctype: str, status: str = "True", reason: str = "", message: str = "", at: str = T1
) -> dict[str, Any]:
    """A metav1.Condition (TrainJob, JobSet): every required field present."""
    return {
        "type": ctype,
        "status": status,
        "reason": reason or ctype,
        "message": message,
        "lastTransitionTime": at,
    }


def builtin_cond(
    ctype: str, status: str = "True", reason: str = "", message: str = "", at: str = T1
) -> dict[str, Any]:
    """A Job / Pod / Node condition (reason and message optional)."""
    out = {"type": ctype, "status": status, "lastTransitionTime": at}
    if reason:
        out["reason"] = reason
    if message:
        out["message"] = message
    return out


def owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def node(name: str, *, lost: bool = False, since: str = T1) -> dict[str, Any]:
    """A Node; ``lost``: what the node lifecycle controller writes when the kubelet stops
    reporting (Ready Unknown + unreachable taints)."""
    obj: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"conditions": [builtin_cond("Ready", "True", "KubeletReady", at=T0)]},
    }
    if lost:
        obj["spec"]["taints"] = [
            {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": since},
            {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": since},
        ]
        obj["status"]["conditions"] = [
            builtin_cond(
                "Ready",
                "Unknown",
                "NodeStatusUnknown",
                "Kubelet stopped posting node status.",
                since,
            )
        ]
    return obj


def patched_pod_spec(trainjob: dict[str, Any], base: dict[str, Any]) -> dict[str, Any]:
    """The trainer pod spec Trainer v2.3.0 makes from the runtime's (``base``) and the
    TrainJob's runtimePatches: each patch's PodSpecPatch for replicated job ``node``, its
    lists (keyed by name, or atomic) added to the runtime's, its maps merged, its containers
    matched by name (Trainer's strategic merge of PodSpecPatch onto the JobSet template)."""
    spec = {**base, "containers": [dict(c) for c in base["containers"]]}
    for patch in trainjob["spec"].get("runtimePatches", []):
        template = patch.get("trainingRuntimeSpec", {}).get("template", {})
        for job in template.get("spec", {}).get("replicatedJobs", []):
            if job["name"] != REPLICATED_JOB:
                continue
            pod = job.get("template", {}).get("spec", {}).get("template", {}).get("spec", {})
            for key, value in pod.items():
                if key == "containers":
                    for change in value:
                        for container in spec["containers"]:
                            if container["name"] == change["name"]:
                                for field, items in change.items():
                                    if field != "name":
                                        container[field] = [*container.get(field, []), *items]
                elif key == "nodeSelector":
                    spec[key] = {**spec.get(key, {}), **value}
                elif isinstance(value, list):
                    spec[key] = [*spec.get(key, []), *value]
                else:
                    spec[key] = value
    return spec


def materialize(
    fake: FakeApiServer,
    namespace: str,
    name: str,
    nodes: list[str],
    *,
    attempt: int = 0,
    phase: str = "Running",
) -> list[str]:
    """Trainer made the JobSet, JobSet the Job, the Job one pod per node; returns pod names."""
    trainjob = fake.get("TrainJob", namespace, name)
    assert trainjob is not None, f"no TrainJob {namespace}/{name}"
    token = trainjob["metadata"]["labels"][TOKEN_LABEL]
    pod_spec = patched_pod_spec(
        trainjob, {"restartPolicy": "Never", "containers": [{"name": "node", "image": "trainer:1"}]}
    )
    jobset = fake.get("JobSet", namespace, name) or fake.put(
        {
            "apiVersion": "jobset.x-k8s.io/v1alpha2",
            "kind": "JobSet",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "labels": {MANAGED_LABEL: "true", TOKEN_LABEL: token},
                "ownerReferences": [owner(trainjob)],
            },
            "spec": {
                "replicatedJobs": [
                    {
                        "name": REPLICATED_JOB,
                        "replicas": 1,
                        "template": {
                            "spec": {
                                "parallelism": len(nodes),
                                "completions": len(nodes),
                                "template": {"spec": pod_spec},
                            }
                        },
                    }
                ]
            },
        }
    )
    job_labels = {
        JOBSET_NAME_LABEL: name,
        "jobset.sigs.k8s.io/replicatedjob-name": REPLICATED_JOB,
        RESTART_ATTEMPT_LABEL: str(attempt),
    }
    job_name = f"{name}-{REPLICATED_JOB}-0"
    job = fake.put(
        {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": job_name if attempt == 0 else f"{job_name}-r{attempt}",
                "namespace": namespace,
                "labels": job_labels,
                "ownerReferences": [owner(jobset)],
            },
            "spec": {},
            "status": {"active": len(nodes), "ready": len(nodes) if phase == "Running" else 0},
        }
    )
    pods = []
    for i, node_name in enumerate(nodes):
        pod_name = f"{job['metadata']['name']}-{i}-x{attempt}k{i}"
        pods.append(pod_name)
        running = phase == "Running"
        status: dict[str, Any] = {
            "phase": phase,
            "conditions": [builtin_cond("PodScheduled", "True", at=T0)],
        }
        if running:
            status["startTime"] = T0
            status["containerStatuses"] = [
                {
                    "name": "node",
                    "ready": True,
                    "restartCount": 0,
                    "image": "trainer:1",
                    "imageID": "sha256:abc",
                    "state": {"running": {"startedAt": T0}},
                }
            ]
        fake.put(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": namespace,
                    "labels": {
                        **job_labels,
                        "batch.kubernetes.io/job-name": job["metadata"]["name"],
                        # an Indexed Job's pod carries its index (Kubernetes >= 1.28)
                        "batch.kubernetes.io/job-completion-index": str(i),
                    },
                    "ownerReferences": [owner(job)],
                },
                "spec": {
                    "nodeName": node_name,
                    **{k: v for k, v in pod_spec.items() if k != "restartPolicy"},
                },
                "status": status,
            }
        )
    fake.update(
        "TrainJob",
        namespace,
        name,
        {
            "status": {
                "jobsStatus": [
                    {
                        "name": REPLICATED_JOB,
                        "active": 1,
                        "ready": 1 if phase == "Running" else 0,
                        "succeeded": 0,
                        "failed": 0,
                        "suspended": 0,
                    }
                ]
            }
        },
    )
    return pods


def terminate(
    fake: FakeApiServer,
    namespace: str,
    pod: str,
    *,
    reason: str,
    exit_code: int,
    at: str = T1,
    phase: str = "Failed",
    message: str | None = None,
) -> None:
    """The kubelet reports the container terminated (``message``: what the container left
    as its termination message)."""
    current = fake.get("Pod", namespace, pod)
    assert current is not None
    statuses = current["status"]["containerStatuses"]
    terminated = {"exitCode": exit_code, "reason": reason, "startedAt": T0, "finishedAt": at}
    if message is not None:
        terminated["message"] = message
    statuses[0]["state"] = {"terminated": terminated}
    statuses[0]["ready"] = False
    fake.update("Pod", namespace, pod, {"status": {"phase": phase, "containerStatuses": statuses}})


def add_pod_condition(
    fake: FakeApiServer, namespace: str, pod: str, condition: dict[str, Any]
) -> None:
    current = fake.get("Pod", namespace, pod)
    assert current is not None
    conds = [c for c in current["status"].get("conditions", []) if c["type"] != condition["type"]]
    fake.update("Pod", namespace, pod, {"status": {"conditions": [*conds, condition]}})


def set_conditions(
    fake: FakeApiServer, kind: str, namespace: str, name: str, *conds: dict[str, Any]
) -> None:
    """Replace the conditions of a TrainJob / JobSet / Job (a controller's status write)."""
    fake.update(kind, namespace, name, {"status": {"conditions": list(conds)}})


def finish_jobs_status(
    fake: FakeApiServer, namespace: str, name: str, *, succeeded: int, failed: int
) -> None:
    fake.update(
        "TrainJob",
        namespace,
        name,
        {
            "status": {
                "jobsStatus": [
                    {
                        "name": REPLICATED_JOB,
                        "active": 0,
                        "ready": 0,
                        "succeeded": succeeded,
                        "failed": failed,
                        "suspended": 0,
                    }
                ]
            }
        },
    )


def event(
    namespace: str,
    about: dict[str, Any],
    reason: str,
    message: str,
    *,
    etype: str = "Warning",
    count: int = 1,
    at: str = T1,
) -> dict[str, Any]:
    """A core/v1 Event about ``about`` (a TrainJob, JobSet...), as a controller's recorder
    leaves it (the API server serves events.k8s.io/v1 Events in this view too)."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{about['metadata']['name']}.{reason.lower()}",
            "namespace": namespace,
        },
        "involvedObject": {
            "apiVersion": about.get("apiVersion"),
            "kind": about.get("kind"),
            "name": about["metadata"]["name"],
            "namespace": namespace,
            "uid": about["metadata"].get("uid"),
        },
        "reason": reason,
        "message": message,
        "type": etype,
        "count": count,
        "lastTimestamp": at,
        "eventTime": None,
        "reportingComponent": "trainer",
    }
