"""Reading Kubernetes objects as the API server sends them (plain JSON dicts), trusting no
shape: a field of the wrong type reads as missing. Labels, conditions, times, lost nodes.
Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

TOKEN_LABEL = "dispatch.io/token"
MANAGED_LABEL = "dispatch.io/managed"
GATE_ANNOTATION = "dispatch.io/gate"
# Set by dispatch on a TrainJob just before its own delete (a stop, S14): a deletion seen
# without it is someone else's (gone.deleted_by).
STOP_ANNOTATION = "dispatch.io/stop"
# The spec's kubeflow.shared_dir, on the TrainJob: where its pods' progress and error files
# are for whoever reads the TrainJob (the supervisor has no spec in a look).
SHARED_DIR_ANNOTATION = "dispatch.io/shared-dir"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"
# JobSet's RestartJob / RestartJobAndIgnoreMaxRestarts actions recreate one Job and bump this
# (a label and an annotation on the Job and its pods), not status.restarts (JobSet v0.12.0
# pkg/constants JobRestartAttemptKey).
JOB_RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/job-restart-attempt"
REPLICATED_JOB_LABEL = "jobset.sigs.k8s.io/replicatedjob-name"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"
# The Job controller's own labels on its pods: which Job (uid) and which index of it.
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"

# Node taints that mean the node (and so the pods on it) may be gone (docs/scheduler-signals.md).
LOST_NODE_TAINTS = frozenset(
    {
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/out-of-service",
    }
)

# -- safe readers: the wrong type reads as missing --------------------------------------------


def as_map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def as_list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def as_str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 as Kubernetes writes it ('2026-01-02T03:04:05Z'); None when absent or bad."""
    text = as_str(value)
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def meta(obj: Any) -> Mapping[str, Any]:
    return as_map(as_map(obj).get("metadata"))


def labels(obj: Any) -> Mapping[str, Any]:
    return as_map(meta(obj).get("labels"))


def name_of(obj: Any) -> str:
    return as_str(meta(obj).get("name")) or ""


def namespace_of(obj: Any) -> str:
    return as_str(meta(obj).get("namespace")) or ""


def conditions(obj: Any) -> list[Mapping[str, Any]]:
    return [as_map(c) for c in as_list(as_map(as_map(obj).get("status")).get("conditions"))]


def true_condition(obj: Any, ctype: str) -> Mapping[str, Any] | None:
    for cond in conditions(obj):
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


def condition(obj: Any, ctype: str) -> Mapping[str, Any] | None:
    for cond in conditions(obj):
        if cond.get("type") == ctype:
            return cond
    return None


def words(what: str, cond: Mapping[str, Any]) -> str:
    """A condition as the scheduler said it: type=status, reason and message verbatim."""
    parts = [f"{what} {cond.get('type')}={cond.get('status')}"]
    if cond.get("reason"):
        parts.append(f"reason={cond.get('reason')}")
    if cond.get("message"):
        parts.append(f"message={cond.get('message')}")
    return " ".join(parts)


def join_words(*details: str) -> str:
    return "; ".join(d for d in details if d)


# -- nodes -------------------------------------------------------------------------------------


def node_lost_since(node: Mapping[str, Any]) -> tuple[datetime | None, str] | None:
    """When a node was seen lost and the words that say so; None when it looks healthy.

    Lost: a taint unreachable / not-ready / out-of-service, or Ready not True. The time is the
    earliest taint timeAdded or Ready lastTransitionTime, None when neither says.
    """
    found: list[tuple[datetime | None, str]] = []
    for taint in as_list(as_map(as_map(node).get("spec")).get("taints")):
        t = as_map(taint)
        key = as_str(t.get("key"))
        if key in LOST_NODE_TAINTS:
            found.append((parse_time(t.get("timeAdded")), f"taint {key}:{t.get('effect')}"))
    ready = condition(node, "Ready")
    if ready is not None and ready.get("status") != "True":
        found.append((parse_time(ready.get("lastTransitionTime")), words("node", ready)))
    if not found:
        return None
    times = [t for t, _ in found if t is not None]
    return (min(times) if times else None), "; ".join(w for _, w in found)


def lost_nodes(nodes: Iterable[Any]) -> dict[str, tuple[datetime | None, str]]:
    out: dict[str, tuple[datetime | None, str]] = {}
    for node in nodes:
        lost = node_lost_since(as_map(node))
        if lost is not None and name_of(node):
            out[name_of(node)] = lost
    return out


# -- pods --------------------------------------------------------------------------------------


