"""When a pod's containers ran: the start of an execution is when a container of it first
ran, its end when the last of its containers stopped (issue 46). Pure functions of pods."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dispatch.backends.kubeflow.objects import as_list, as_map, as_str, parse_time
from dispatch.backends.kubeflow.pods import TERMINATED_LAUNCH_FAILED

# What a container runtime writes as the start of a container that never started (a
# StartError's startedAt is the Unix epoch): never a start.
_NEVER = datetime(1970, 1, 2, tzinfo=UTC)


def _statuses(pod: Any) -> Sequence[Any]:
    return as_list(as_map(as_map(pod).get("status")).get("containerStatuses"))


def container_start(pod: Any) -> datetime | None:
    """When a container of ``pod`` first ran: the earliest ``startedAt`` of a container that
    runs or ran (state running, state or lastState terminated), never of one that could not
    start (StartError, ContainerCannotRun). None while none has run (ContainerCreating, a
    pull or an image error): the pod's ``status.startTime`` is not a start, since the kubelet
    sets it when it admits the pod, before it pulls the image (issue 46)."""
    times: list[datetime] = []
    for cs in _statuses(pod):
        c = as_map(cs)
        for holder in (as_map(c.get("state")), as_map(c.get("lastState"))):
            for key in ("running", "terminated"):
                ran = as_map(holder.get(key))
                if key == "terminated" and as_str(ran.get("reason")) in TERMINATED_LAUNCH_FAILED:
                    continue
                at = parse_time(ran.get("startedAt"))
                if at is not None and at >= _NEVER:
                    times.append(at)
    return min(times) if times else None


def containers_ended(pods: Sequence[Any]) -> datetime | None:
    """When the last container of ``pods`` that ran stopped: the latest ``finishedAt`` of a
    container's current termination; None when none has one. A condition that ends a run
    (DisruptionTarget, a deadline's Failed) is stamped when it was decided: the containers
    then run on through their SIGTERM grace, holding the nodes and doing work a checkpoint
    may not keep (seen on the real nodes: a preemption's condition a second before its
    checkpoint's last write)."""
    times: list[datetime] = []
    for p in pods:
        for cs in _statuses(p):
            term = as_map(as_map(as_map(cs).get("state")).get("terminated"))
            if as_str(term.get("reason")) in TERMINATED_LAUNCH_FAILED:
                continue  # it never ran: no run's end
            at = parse_time(term.get("finishedAt"))
            if at is not None and at >= _NEVER:
                times.append(at)
    return max(times) if times else None
