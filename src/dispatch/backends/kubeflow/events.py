"""Kubernetes Events that say a TrainJob cannot start (issue 35, M5). Pure.

Two failures exist only as Events, never as a condition: Trainer's
``TrainJobResourcesCreationFailed`` on the TrainJob (its runtime's objects could not be built
or applied: trainjob_controller.go, Trainer v2.3.0) and JobSet's ``JobCreationFailed`` on the
JobSet (a child Job could not be created: jobset_controller.go, JobSet v0.12.0). Both
controllers retry, so an Event counts only while what it is about has not happened since: the
TrainJob's while it has no JobSet, the JobSet's while it has no Job. The Events are read as the
API server's core/v1 view of them (``involvedObject``, ``reason``, ``message``, ``count``),
which it serves for Events written through events.k8s.io/v1 too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dispatch.backends.kubeflow.objects import as_int, as_map, as_str, meta, name_of, parse_time
from dispatch.core.model import Cause, CauseKind

TRAINJOB_CREATION_FAILED = "TrainJobResourcesCreationFailed"
JOB_CREATION_FAILED = "JobCreationFailed"
# Which Event reason is about which kind of object.
CREATION_FAILED = {TRAINJOB_CREATION_FAILED: "TrainJob", JOB_CREATION_FAILED: "JobSet"}


def event_time(event: Any) -> datetime | None:
    e = as_map(event)
    for when in (
        as_map(e.get("series")).get("lastObservedTime"),
        e.get("lastTimestamp"),
        e.get("eventTime"),
        e.get("firstTimestamp"),
    ):
        at = parse_time(when)
        if at is not None:
            return at
    return None


def _about(event: Any, reason: str, kind: str, name: str, uid: str | None) -> bool:
    e = as_map(event)
    obj = as_map(e.get("involvedObject"))
    if e.get("reason") != reason or obj.get("kind") != kind or obj.get("name") != name:
        return False
    said_uid = as_str(obj.get("uid"))
    return uid is None or said_uid is None or said_uid == uid


def _words(event: Any) -> str:
    e = as_map(event)
    obj = as_map(e.get("involvedObject"))
    parts = [f"event {obj.get('kind')}/{obj.get('name')}: {e.get('type')} reason={e.get('reason')}"]
    if e.get("message"):
        parts.append(f"message={e.get('message')}")
    count = as_int(as_map(e.get("series")).get("count")) or as_int(e.get("count"))
    if count is not None and count > 1:
        parts.append(f"count={count}")
    return " ".join(parts)


def creation_failure(
    trainjob: Any, jobset: Any, jobs: Sequence[Any], events: Sequence[Any]
) -> Cause | None:
    """The newest Event saying the TrainJob's objects cannot be made, while that still holds
    (the TrainJob without a JobSet, the JobSet without a Job); launch-failed with the Event's
    words verbatim. None when there is none."""
    name = name_of(trainjob)
    found: list[Any] = []
    if jobset is None:
        uid = as_str(meta(trainjob).get("uid"))
        found += [e for e in events if _about(e, TRAINJOB_CREATION_FAILED, "TrainJob", name, uid)]
    elif not jobs:
        uid = as_str(meta(jobset).get("uid"))
        found += [e for e in events if _about(e, JOB_CREATION_FAILED, "JobSet", name_of(jobset),
                                               uid)]
    if not found:
        return None
    far = datetime.min.replace(tzinfo=UTC)
    newest = max(found, key=lambda e: event_time(e) or far)
    return Cause(kind=CauseKind.LAUNCH_FAILED, detail=_words(newest), at=event_time(newest))
