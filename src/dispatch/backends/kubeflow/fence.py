"""The fence's input (S11) for one TrainJob: which of its alive pods sit on a lost node, and
when the node-loss window of its execution starts. Pure, ``now`` passed in.

The window belongs to the execution: it starts when that execution is first on a lost node,
never before it existed. A node's taint (``timeAdded``) or Ready condition may be older than
the pod: after ``restore-node`` the old ``unreachable`` taint stays a moment, and a
replacement that lands there meanwhile was fenced half a second after it started, its window
read from the taint (issue 46)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dispatch.backends.kubeflow.container_times import container_start
from dispatch.backends.kubeflow.objects import (
    as_map,
    as_str,
    condition,
    meta,
    parse_time,
    true_condition,
    words,
)
from dispatch.backends.kubeflow.pods import (
    DISRUPTION_KINDS,
    pod_alive,
    pod_node,
    pod_ref,
)
from dispatch.core.model import CauseKind


def window_start(lost_at: datetime | None, on_node_at: datetime | None,
                 started_at: datetime | None, now: datetime) -> datetime:
    """When the node-loss window of one execution starts for one lost node: when the node was
    lost (``now``, this look, when the API server gives no time), but never before the
    execution was on that node (``on_node_at``: its pod bound there) nor before it started."""
    return max(t for t in (lost_at or now, on_node_at, started_at) if t is not None)


def on_node_since(pod: Any) -> datetime | None:
    """When a pod was first on its node: its bind (``PodScheduled=True``), else its creation."""
    scheduled = condition(pod, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "True":
        bound = parse_time(scheduled.get("lastTransitionTime"))
        if bound is not None:
            return bound
    return parse_time(meta(pod).get("creationTimestamp"))


def node_lost(
    pods: Sequence[Any],
    lost: Mapping[str, tuple[datetime | None, str]],
    now: datetime,
) -> tuple[datetime, str] | None:
    """Alive pods on a lost node, or a disruption whose reason means node loss
    (DeletionByTaintManager, DeletionByPodGC, DeletionByDeviceTaintManager). A Job's
    FailureTarget is not one: every Job failure passes through it while its pods terminate
    (the Job controller's BackoffLimitExceeded, PodFailurePolicy, DeadlineExceeded...).
    Each pod is its execution's presence on its node: its window starts no earlier than that
    pod was bound there or a container of it ran (``window_start``); a pod the Job controller
    replaced keeps its own, older window. Returns (since, words): the earliest of them."""
    times: list[datetime] = []
    said: list[str] = []
    for pod in pods:
        if not pod_alive(pod):
            continue
        node = pod_node(pod)
        if node is not None and node in lost:
            since, why = lost[node]
            times.append(window_start(since, on_node_since(pod), container_start(pod), now))
            terminating = " (Terminating)" if meta(pod).get("deletionTimestamp") else ""
            said.append(f"{pod_ref(as_map(pod))}{terminating} on node {node}: {why}")
        disruption = true_condition(pod, "DisruptionTarget")
        if (
            disruption is not None
            and DISRUPTION_KINDS.get(as_str(disruption.get("reason")) or "") is CauseKind.NODE_LOST
        ):
            at = parse_time(disruption.get("lastTransitionTime"))
            times.append(window_start(at, None, container_start(pod), now))
            said.append(f"{pod_ref(as_map(pod))}: {words('pod', disruption)}")
    if not said:
        return None
    return min(times), "; ".join(said)
