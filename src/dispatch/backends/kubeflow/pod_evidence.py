"""What the informer and the backend keep of a pod past its deletion (issue 35, M2): its
failure evidence, kept as a pod that has ended so the mapping reads it the same way once the
Job controller has deleted the pod, and when its deletion was first asked, carried from
version to version (issue 46). Pure, but for the two informer hooks' signatures."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatch.backends.kubeflow.client import PodRes
from dispatch.backends.kubeflow.informer import Watched
from dispatch.backends.kubeflow.objects import as_list, as_map, as_str, true_condition
from dispatch.backends.kubeflow.pods import (
    DELETION_ASKED,
    GONE,
    KUBELET_POD_REASONS,
    carry_deletion,
    deletion_asked,
    ended_badly,
    pod_node,
    terminations,
    utc_stamp,
)


def keep_gone(watched: Watched, obj: dict[str, Any]) -> dict[str, Any] | None:
    """The informer's hook: a deleted pod's failure evidence, kept past the deletion."""
    return evidence_of(obj) if watched.res is PodRes else None


def carry(watched: Watched, before: dict[str, Any], obj: dict[str, Any]) -> dict[str, Any]:
    """The informer's hook: a pod's next version, with when its deletion was first asked."""
    return carry_deletion(before, obj) if watched.res is PodRes else obj


def evidence_of(pod: Any) -> dict[str, Any] | None:
    """What a pod says about a failure, kept as a pod that has ended (phase Failed) so the
    mapping reads it the same way once the Job controller has deleted the pod: its
    identifying metadata, node, disruption condition, the kubelet's status words, and each
    container's last bad termination (exit code, reason, message) as its state (and the one
    before it, as its last state, when the pod's deletion ended it: ``terminations``). None
    when the pod shows no failure. Pure."""
    p = as_map(pod)
    status = as_map(p.get("status"))
    kept: dict[str, list[dict[str, Any]]] = {}
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in as_list(status.get(key)):
            c = as_map(cs)
            terms = [t for t, _ in terminations(p, c)]
            if any(ended_badly(t) for t in terms):
                entry: dict[str, Any] = {"name": c.get("name"),
                                         "restartCount": c.get("restartCount"),
                                         "state": {"terminated": dict(terms[0])}}
                if len(terms) > 1:  # ended by the deletion: the failure before it too
                    entry["lastState"] = {"terminated": dict(terms[1])}
                kept.setdefault(key, []).append(entry)
    disruption = true_condition(p, "DisruptionTarget")
    kubelet = as_str(status.get("reason")) in KUBELET_POD_REASONS
    if not kept and disruption is None and not kubelet:
        return None
    md = as_map(p.get("metadata"))
    out_status: dict[str, Any] = {"phase": "Failed", **kept}
    if status.get("startTime") is not None:  # it ran (the nodes an ended run names)
        out_status["startTime"] = status.get("startTime")
    if disruption is not None:
        out_status["conditions"] = [dict(disruption)]
    if kubelet:
        out_status["reason"] = status.get("reason")
        out_status["message"] = status.get("message")
    out: dict[str, Any] = {
        "metadata": {
            key: md.get(key)
            for key in ("name", "namespace", "uid", "labels", "annotations",
                        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds")
            if md.get(key) is not None
        },
        "spec": {"nodeName": pod_node(p)} if pod_node(p) else {},
        "status": out_status,
        GONE: True,
    }
    asked = deletion_asked(p)
    if asked is not None:
        out[DELETION_ASKED] = utc_stamp(asked)
    return out


def with_evidence(
    pods: list[Any], kept: Mapping[str, Any]
) -> tuple[list[Any], dict[str, Any]]:
    """The pods to map (those the API server still has, plus the kept evidence of those it no
    longer has) and the evidence to keep (by pod uid; the newest look of a pod wins, but a
    pod keeps when its deletion was first asked, as its kept evidence said: carry_deletion).
    Pure."""
    now_kept = dict(kept)
    present = set()
    out: list[Any] = []
    for pod in pods:
        uid = as_str(as_map(as_map(pod).get("metadata")).get("uid"))
        if uid is not None and uid in kept and isinstance(pod, dict):
            pod = carry_deletion(kept[uid], pod)
        out.append(pod)
        if uid is None:
            continue
        present.add(uid)
        found = evidence_of(pod)
        if found is not None:
            now_kept[uid] = found
    gone = [ev for uid, ev in now_kept.items() if uid not in present]
    return [*out, *gone], now_kept
