"""What the informer keeps of each object it caches: only the fields dispatch reads (issue 49).

A TrainJob, JobSet, Job and Pod as the API server sends them (``managedFields`` dropped) held
about 49 KiB of Python objects per job at 1,000 jobs; most of it is what no reader here looks
at: pod and Job templates, the JobSet's replicatedJobs, ownerReferences, the dozen JobSet
labels and annotations, IPs, images, conditions of types nothing asks for. ``project`` keeps,
per kind, the fields that ``mapping``, ``pods``, ``fence``, ``events``, ``gone``,
``pod_errors``, the backend and the informer itself read, and nothing else.

The shapes below are that list; a reader that starts reading another field must add it here
(tests/unit/backends/kubeflow/test_kubeflow_projection.py runs every mapping fixture and every
recorded look through the projection and fails on any difference in what is said).

A value of an unexpected type (a list where a map should be) is kept as it is: the readers
read it as missing either way, and the projection never decides that for them. Keys are the
shapes' own strings and short values are interned, so that a thousand pods share "True",
"Running", their namespace and their timestamps instead of holding a copy each. Pure.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Union

from dispatch.backends.kubeflow.objects import (
    COMPLETION_INDEX_LABEL,
    CONTROLLER_UID_LABEL,
    GATE_ANNOTATION,
    JOB_INDEX_LABEL,
    JOB_RESTART_ATTEMPT_LABEL,
    JOBSET_NAME_LABEL,
    MANAGED_LABEL,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
    SHARED_DIR_ANNOTATION,
    STOP_ANNOTATION,
    TOKEN_LABEL,
)
from dispatch.backends.kubeflow.pods import DELETION_ASKED

WHOLE = True  # a value kept as it is (a container's state, a scalar)
SHORT = 64  # strings up to this long are interned (words, names, uids, timestamps)


@dataclass(frozen=True)
class Keys:
    """A map of free keys (labels, annotations): only these keys, their values whole."""

    names: tuple[str, ...]


@dataclass(frozen=True)
class Each:
    """A list: each item projected by ``shape``; with ``types``, only the items (conditions)
    whose ``type`` is one of them (the readers look conditions up by type)."""

    shape: Shape
    types: frozenset[str] | None = None


Shape = Union[bool, dict[str, "Shape"], Keys, Each]  # noqa: UP007 - a recursive alias

LABELS = Keys((TOKEN_LABEL, MANAGED_LABEL, JOBSET_NAME_LABEL, RESTART_ATTEMPT_LABEL,
               JOB_RESTART_ATTEMPT_LABEL, REPLICATED_JOB_LABEL, JOB_INDEX_LABEL,
               CONTROLLER_UID_LABEL, COMPLETION_INDEX_LABEL))
ANNOTATIONS = Keys((GATE_ANNOTATION, STOP_ANNOTATION, SHARED_DIR_ANNOTATION,
                    JOB_RESTART_ATTEMPT_LABEL))
METADATA: dict[str, Shape] = {"labels": LABELS, "annotations": ANNOTATIONS}
METADATA.update((key, WHOLE) for key in ("name", "namespace", "uid", "resourceVersion",
                                         "creationTimestamp", "deletionTimestamp",
                                         "deletionGracePeriodSeconds"))
CONDITION: dict[str, Shape] = {
    key: WHOLE for key in ("type", "status", "reason", "message", "lastTransitionTime")
}


def conditions(*types: str) -> Each:
    return Each(CONDITION, frozenset(types))


SHAPES: dict[str, dict[str, Shape]] = {
    "TrainJob": {
        "metadata": METADATA,
        "spec": {"suspend": WHOLE},
        "status": {
            "conditions": conditions("Complete", "Failed", "Suspended"),
            "jobsStatus": Each({"active": WHOLE, "ready": WHOLE, "suspended": WHOLE}),
        },
    },
    "JobSet": {
        "metadata": METADATA,
        "status": {
            "conditions": conditions("Completed", "Failed", "RestartingJobSet"),
            "restarts": WHOLE,
        },
    },
    "Job": {
        "metadata": METADATA,
        "status": {"conditions": conditions("Failed", "FailureTarget"), "failed": WHOLE},
    },
    "Pod": {
        "metadata": METADATA,
        DELETION_ASKED: WHOLE,  # the informer's own note (pods.carry_deletion), kept as it is
        "spec": {"nodeName": WHOLE, "restartPolicy": WHOLE},
        "status": {
            "phase": WHOLE,
            "startTime": WHOLE,
            "reason": WHOLE,
            "message": WHOLE,
            "conditions": conditions("PodScheduled", "DisruptionTarget"),
            **{
                key: Each({"name": WHOLE, "restartCount": WHOLE, "state": WHOLE,
                           "lastState": WHOLE})
                for key in ("initContainerStatuses", "containerStatuses")
            },
        },
    },
    "Node": {
        "metadata": METADATA,
        "spec": {"taints": Each({"key": WHOLE, "effect": WHOLE, "timeAdded": WHOLE})},
        "status": {"conditions": conditions("Ready")},
    },
    "Event": {
        "metadata": METADATA,
        "involvedObject": {"kind": WHOLE, "name": WHOLE, "uid": WHOLE},
        **{key: WHOLE for key in ("type", "reason", "message", "count", "lastTimestamp",
                                  "eventTime", "firstTimestamp")},
        "series": {"count": WHOLE, "lastObservedTime": WHOLE},
    },
}


def _word(value: Any) -> Any:
    if isinstance(value, str) and len(value) <= SHORT:
        return sys.intern(value)
    return value


def _whole(value: Any) -> Any:
    """A value kept whole, its short strings interned (a container state's few words)."""
    if isinstance(value, dict):
        return {_word(k): _whole(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_whole(v) for v in value]
    return _word(value)


def _project(value: Any, shape: Shape) -> Any:
    if shape is WHOLE:
        return _whole(value)
    if isinstance(shape, Each):
        if not isinstance(value, list):
            return value
        types = shape.types
        return [
            _project(item, shape.shape)
            for item in value
            if types is None or (isinstance(item, Mapping) and isinstance(item.get("type"), str)
                                 and item.get("type") in types)
        ]
    if not isinstance(value, Mapping):
        return value
    if isinstance(shape, Keys):
        return {key: _whole(value[key]) for key in shape.names if key in value}
    assert isinstance(shape, dict)
    return {key: _project(value[key], sub) for key, sub in shape.items() if key in value}


def project(kind: str, obj: dict[str, Any]) -> dict[str, Any]:
    """What the cache keeps of ``obj``, an object of ``kind`` (TrainJob, JobSet, Job, Pod,
    Node, Event); an object of another kind is kept whole (nothing here knows its readers)."""
    shape = SHAPES.get(kind)
    if shape is None:
        return obj
    kept: dict[str, Any] = _project(obj, shape)
    return kept
