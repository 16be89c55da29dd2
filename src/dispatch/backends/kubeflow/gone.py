"""A TrainJob the API server no longer has: cancelled (by dispatch, or someone else), or,
while pods of its JobSet remain, alive until the last is gone (S11). Pure."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from dispatch.backends.kubeflow.objects import STOP_ANNOTATION, as_map, meta, name_of
from dispatch.backends.kubeflow.pods import nodes_of
from dispatch.core.model import Cause, CauseKind, ObjectReport, Provenance, State


def report_pods_left(
    gone: ObjectReport, pods: Sequence[Any], before: State | None = None
) -> ObjectReport:
    """A TrainJob that is gone while pods of its JobSet remain (deleted with background
    propagation; a lost node's pods stay Terminating until the node is back, deleted or
    tainted out-of-service): still alive, so a replacement's gate stays closed (S11) until the
    last pod is gone; the end it will have is ``gone``'s. Running only if it ran: ``before``
    (its last reading while the TrainJob was there, if this process saw it) pending or held,
    or else no pod left that ever started, is pending (a cancelled job that never started)."""
    names = sorted(name_of(p) + (" (Terminating)" if meta(p).get("deletionTimestamp") else "")
                   for p in pods)
    note = f"{gone.cause.note}; {len(names)} of its pods not yet gone: {', '.join(names)}"
    if before is None:
        ran = any(as_map(as_map(p).get("status")).get("phase") in ("Running", "Succeeded", "Failed")
                  for p in pods)
    else:
        ran = before not in (State.PENDING, State.HELD)
    return ObjectReport(
        ref=gone.ref, token=gone.token, state=State.RUNNING if ran else State.PENDING,
        cause=Cause(kind=CauseKind.NONE, note=note, at=gone.cause.at),
        nodes=nodes_of(pods),
    )


# Who deleted a TrainJob when the API server says only that it is being deleted.
SOMEONE_ELSE = "unknown"


def deleted_by(tj: Mapping[str, Any]) -> str | None:
    """None while the TrainJob is not being deleted; "dispatch" when it carries dispatch's
    stop annotation (set before its own delete); else "unknown": someone other than dispatch
    deleted it (the API server does not say who), a person's cancel (S14)."""
    if not meta(tj).get("deletionTimestamp"):
        return None
    if as_map(meta(tj).get("annotations")).get(STOP_ANNOTATION) is not None:
        return "dispatch"
    return SOMEONE_ELSE


def report_gone(ref: str, token: str | None, actor: str | None, now: datetime) -> ObjectReport:
    """A TrainJob we bound that the API server no longer has: cancelled (docs/scheduler-signals.md:
    "our TrainJob deleted by someone else"; actor None = unknown)."""
    who = actor if actor not in (None, SOMEONE_ELSE) else (
        "someone other than dispatch (actor unknown)" if actor is None
        else "someone other than dispatch, seen deleting it without dispatch's stop annotation")
    cause = Cause(
        kind=CauseKind.CANCELLED,
        provenance=Provenance.ACTOR,
        actor=actor,
        note=f"TrainJob {ref} no longer exists: deleted by {who}",
        at=now,
    )
    return ObjectReport(ref=ref, token=token, state=State.CANCELLED, cause=cause)
