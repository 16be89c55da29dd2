"""Validation of Kubernetes objects against the real CRD schemas in shared/k8s-crds/.

Where the schemas are: ``$DISPATCH_K8S_CRDS``, else ``tests/fixtures/k8s-crds`` (an unmodified
copy of shared/k8s-crds). Missing schemas are an error, never a silent pass.

Stricter than an API server in one way, on purpose: a field the schema does not name is a
violation here, where a real API server would silently prune it (so a typo would be lost
there). CEL rules (``x-kubernetes-validations``) are not evaluated; the few we rely on are
checked by hand in ``cel_checks``.

Built-in kinds (batch/v1 Job, v1 Pod, v1 Node) have no CRD: ``BUILTIN`` holds small schemas of
the status fields dispatch reads, written from the Kubernetes API reference (v1.31).
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import yaml

REPO = Path(__file__).resolve().parents[2]

CRD_FILES = {
    "TrainJob": "trainer.kubeflow.org_trainjobs.yaml",
    "JobSet": "jobset.x-k8s.io_jobsets.yaml",
    "TrainingRuntime": "trainer.kubeflow.org_trainingruntimes.yaml",
    "ClusterTrainingRuntime": "trainer.kubeflow.org_clustertrainingruntimes.yaml",
}


class SchemaViolation(AssertionError):
    """An object does not match its schema: a test that made or loaded it must fail."""


def crd_dir() -> Path:
    override = os.environ.get("DISPATCH_K8S_CRDS")
    # A copy of shared/k8s-crds (unmodified; see its README for the upstream commits) ships
    # with the tests, so they never depend on what lies beside the checkout.
    path = Path(override) if override else REPO / "tests" / "fixtures" / "k8s-crds"
    if not (path / CRD_FILES["TrainJob"]).is_file():
        raise FileNotFoundError(
            f"CRD schemas not found in {path}: set DISPATCH_K8S_CRDS to the k8s-crds folder"
        )
    return path


def _strict(node: Any) -> Any:
    """Every object schema that lists its properties refuses others (see module doc)."""
    if isinstance(node, dict):
        out = {k: _strict(v) for k, v in node.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(node, list):
        return [_strict(x) for x in node]
    return node


_TIME = {"type": "string", "format": "date-time"}
_OWNER = {
    "type": "object",
    "required": ["apiVersion", "kind", "name", "uid"],
    "properties": {
        "apiVersion": {"type": "string"},
        "kind": {"type": "string"},
        "name": {"type": "string"},
        "uid": {"type": "string"},
        "controller": {"type": "boolean"},
        "blockOwnerDeletion": {"type": "boolean"},
    },
    "additionalProperties": False,
}
# ObjectMeta: what a client may send, plus the fields the API server sets.
_META = {
    "type": "object",
    "required": ["name"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "maxLength": 253, "pattern": "^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"},
        "namespace": {"type": "string", "maxLength": 63},
        "labels": {
            "type": "object",
            "additionalProperties": {
                "type": "string",
                "maxLength": 63,
                "pattern": "^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$",
            },
        },
        "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
        "uid": {"type": "string"},
        "resourceVersion": {"type": "string"},
        "generation": {"type": "integer"},
        "creationTimestamp": _TIME,
        "deletionTimestamp": _TIME,
        "deletionGracePeriodSeconds": {"type": "integer"},
        "finalizers": {"type": "array", "items": {"type": "string"}},
        "ownerReferences": {"type": "array", "items": _OWNER},
    },
}


@cache
def validator(kind: str) -> jsonschema.protocols.Validator:
    if kind in BUILTIN:
        schema = BUILTIN[kind]
    else:
        path = crd_dir() / CRD_FILES[kind]
        crd = yaml.load(path.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
        schema = _strict(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
        # metadata is 'type: object' in a CRD; the API server checks it by its own rules.
        schema["properties"]["metadata"] = _META
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft7Validator)
    return cls(schema)


def cel_checks(kind: str, obj: dict[str, Any]) -> list[str]:
    """The CEL rules of the TrainJob CRD that our objects could break."""
    problems: list[str] = []
    if kind == "TrainJob":
        trainer = (obj.get("spec") or {}).get("trainer") or {}
        npn = trainer.get("numProcPerNode")
        if npn is not None and npn < 1:
            problems.append("spec.trainer.numProcPerNode: must be greater than or equal to 1")
        managed = (obj.get("spec") or {}).get("managedBy")
        if managed is not None and managed not in (
            "trainer.kubeflow.org/trainjob-controller",
            "kueue.x-k8s.io/multikueue",
        ):
            problems.append("spec.managedBy: not an allowed value")
    return problems


def problems(kind: str, obj: dict[str, Any]) -> list[str]:
    found = [
        f"{'.'.join(str(p) for p in err.absolute_path) or '(top)'}: {err.message}"
        for err in validator(kind).iter_errors(obj)
    ]
    return found + cel_checks(kind, obj)


def validate(kind: str, obj: dict[str, Any]) -> None:
    found = problems(kind, obj)
    if found:
        name = (obj.get("metadata") or {}).get("name")
        raise SchemaViolation(f"{kind} {name}: " + "; ".join(found[:10]))


def known(kind: str) -> bool:
    return kind in CRD_FILES or kind in BUILTIN


# -- built-in kinds: the status fields dispatch reads (Kubernetes API reference) -------------

_CONDITION = {
    "type": "object",
    "required": ["type", "status"],
    "additionalProperties": False,
    "properties": {
        "type": {"type": "string"},
        "status": {"enum": ["True", "False", "Unknown"]},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "lastTransitionTime": _TIME,
        "lastProbeTime": {"type": ["string", "null"]},
        "lastHeartbeatTime": _TIME,
        "observedGeneration": {"type": "integer"},
    },
}
_TERMINATED = {
    "type": "object",
    "required": ["exitCode"],
    "additionalProperties": False,
    "properties": {
        "exitCode": {"type": "integer"},
        "signal": {"type": "integer"},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "startedAt": _TIME,
        "finishedAt": _TIME,
        "containerID": {"type": "string"},
    },
}
_STATE = {
    "type": "object",
    "additionalProperties": False,
    "maxProperties": 1,
    "properties": {
        "waiting": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"reason": {"type": "string"}, "message": {"type": "string"}},
        },
        "running": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"startedAt": _TIME},
        },
        "terminated": _TERMINATED,
    },
}
_CONTAINER_STATUS = {
    "type": "object",
    "required": ["name", "ready", "restartCount", "image", "imageID"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string"},
        "ready": {"type": "boolean"},
        "started": {"type": "boolean"},
        "restartCount": {"type": "integer", "minimum": 0},
        "image": {"type": "string"},
        "imageID": {"type": "string"},
        "containerID": {"type": "string"},
        "state": _STATE,
        "lastState": _STATE,
    },
}


def _builtin(status: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "type": "object",
        "required": ["apiVersion", "kind", "metadata"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": _META,
            "spec": spec or {"type": "object"},
            "status": status,
        },
    }


_POD_STATUS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "phase": {"enum": ["Pending", "Running", "Succeeded", "Failed", "Unknown"]},
        "reason": {"type": "string"},
        "message": {"type": "string"},
        "startTime": _TIME,
        "conditions": {"type": "array", "items": _CONDITION},
        "containerStatuses": {"type": "array", "items": _CONTAINER_STATUS},
        "initContainerStatuses": {"type": "array", "items": _CONTAINER_STATUS},
    },
}
_JOB_STATUS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "active": {"type": "integer", "minimum": 0},
        "ready": {"type": "integer", "minimum": 0},
        "succeeded": {"type": "integer", "minimum": 0},
        "failed": {"type": "integer", "minimum": 0},
        "terminating": {"type": "integer", "minimum": 0},
        "startTime": _TIME,
        "completionTime": _TIME,
        "conditions": {
            "type": "array",
            "items": {
                **_CONDITION,
                "properties": {
                    **_CONDITION["properties"],
                    "type": {
                        "enum": [
                            "Suspended",
                            "Complete",
                            "Failed",
                            "FailureTarget",
                            "SuccessCriteriaMet",
                        ]
                    },
                },
            },
        },
    },
}
_NODE_SPEC = {
    "type": "object",
    "properties": {
        "taints": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["key", "effect"],
                "additionalProperties": False,
                "properties": {
                    "key": {"type": "string"},
                    "value": {"type": "string"},
                    "effect": {"enum": ["NoSchedule", "PreferNoSchedule", "NoExecute"]},
                    "timeAdded": _TIME,
                },
            },
        },
        "unschedulable": {"type": "boolean"},
    },
}
_NODE_STATUS = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"conditions": {"type": "array", "items": _CONDITION}},
}

BUILTIN: dict[str, dict[str, Any]] = {
    "Pod": _builtin(_POD_STATUS),
    "Job": _builtin(_JOB_STATUS),
    "Node": _builtin(_NODE_STATUS, _NODE_SPEC),
}
