"""JobSpec -> TrainJob (trainer.kubeflow.org/v1alpha1): the strict ``kubeflow:`` section and the
object we create. Pure: no client, no clock.

The spec's ``kubeflow:`` section (keys spelled as in the TrainJob, so users can copy them from
Kubeflow's docs)::

    kubeflow:
      namespace: team-a                 # default: the backend's default namespace
      runtime: torch-distributed        # or {name: ..., kind: TrainingRuntime, apiGroup: ...}
      image: ghcr.io/me/train:1.2       # default: the runtime's image
      numProcPerNode: 8
      resourcesPerNode: {limits: {nvidia.com/gpu: 8}}
      labels: {team: a}                 # extra labels on the TrainJob
      annotations: {}

Restarts (issue 35; docs/kubeflow.md "Who restarts what"): dispatch's rules should be the only
recovery budget, but Trainer v2.3.0's ``runtimePatches`` patch no ``restartPolicy`` and no Job
``backoffLimit`` (``PodSpecPatch`` / ``JobSpecPatch`` in its trainjob_types.go), so the TrainJob
cannot switch Kubernetes' own restarts off: the runtime must (``restartPolicy: Never``,
``backoffLimit: 0``), and the mapping reads native restarts where a runtime forces them.

Idempotency: the object's name is derived from the token, so a repeated create answers
409 AlreadyExists instead of making a second object; the token itself rides as a label.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

import msgspec

from dispatch.backends.base import Submission
from dispatch.backends.kubeflow.objects import GATE_ANNOTATION, MANAGED_LABEL, TOKEN_LABEL
from dispatch.errors import BadInput

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
PATCH_MANAGER = "dispatch.io/kubeflow-backend"
RUNTIME_KINDS = ("ClusterTrainingRuntime", "TrainingRuntime")

# Each is for fullmatch: ``match`` with "^...$" takes a value ending in "\n" ("$" matches
# before a final newline), which the API server refuses at submit, or worse, not at all.
# Kubernetes label value: at most 63 characters, alphanumeric at both ends, [-_.] inside.
LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
LABEL_VALUE_MAX = 63
# A qualified label key: optional DNS-subdomain prefix + '/' + name of at most 63 characters.
LABEL_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
DNS1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
DNS1123_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
# The CRD's pattern for a resource quantity (resourcesPerNode.requests / limits values).
QUANTITY = re.compile(
    r"(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|"
    r"([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?"
)
# An image reference (registry/name:tag@digest): no whitespace or control character.
_IMAGE = re.compile(r"[^\s\x00-\x1f\x7f-\x9f]+")
# TrainJob names become JobSet, Job, Pod and Service names; Trainer keeps them short.
NAME_MAX = 40
HASH_LEN = 10


class KubeflowSpecError(BadInput, ValueError):
    """The spec's ``kubeflow:`` section (or the token) cannot make a TrainJob; names the key."""

    def __init__(self, where: str, message: str) -> None:
        self.where = where
        self.message = message
        super().__init__(f"kubeflow.{where}: {message}" if where else f"kubeflow: {message}")


class RuntimeRef(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str
    kind: str = "ClusterTrainingRuntime"
    apiGroup: str = "trainer.kubeflow.org"  # noqa: N815 - the TrainJob's own spelling


class Resources(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    requests: dict[str, str | int] = {}
    limits: dict[str, str | int] = {}


class KubeflowSection(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    runtime: RuntimeRef | str
    namespace: str | None = None
    image: str | None = None
    numProcPerNode: int | None = None  # noqa: N815
    resourcesPerNode: Resources | None = None  # noqa: N815
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}

    @property
    def runtime_ref(self) -> RuntimeRef:
        return RuntimeRef(name=self.runtime) if isinstance(self.runtime, str) else self.runtime


def _where(err: msgspec.ValidationError) -> tuple[str, str]:
    """msgspec says 'Object missing required field `runtime` - at `$.x`'; make 'x.runtime'."""
    text = str(err)
    where, message = "", text
    m = re.search(r" - at `\$\.?(.*)`$", text)
    if m:
        where, message = m.group(1), text[: m.start()]
    field = re.search(r"(?:missing required|unknown) field `([^`]*)`", message)
    if field:
        where = f"{where}.{field.group(1)}" if where else field.group(1)
    return where, message


def _check_label_key(where: str, key: str) -> None:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not DNS1123_SUBDOMAIN.fullmatch(prefix)):
        raise KubeflowSpecError(where, f"label key {key!r}: prefix must be a DNS subdomain")
    if len(name) > 63 or not LABEL_NAME.fullmatch(name):
        raise KubeflowSpecError(
            where, f"label key {key!r}: name must be 1-63 characters, alphanumeric at both ends"
        )


def check_label_value(where: str, value: str) -> None:
    if len(value) > LABEL_VALUE_MAX:
        raise KubeflowSpecError(
            where, f"{value!r} is {len(value)} characters; a label value is at most 63"
        )
    if not LABEL_VALUE.fullmatch(value):
        raise KubeflowSpecError(
            where,
            f"{value!r} is not a label value: letters, digits, '-', '_', '.', "
            "alphanumeric at both ends",
        )


def parse_section(data: Any) -> KubeflowSection:
    """Decode and check the spec's ``kubeflow:`` section; every error names its key."""
    if not isinstance(data, dict) or not data:
        raise KubeflowSpecError("", "the kubeflow backend needs a kubeflow: section with runtime")
    try:
        section = msgspec.convert(data, KubeflowSection, strict=True)
    except msgspec.ValidationError as err:
        where, message = _where(err)
        raise KubeflowSpecError(where, message) from None
    ref = section.runtime_ref
    if len(ref.name) > 253 or not DNS1123_SUBDOMAIN.fullmatch(ref.name):
        raise KubeflowSpecError("runtime", f"{ref.name!r} is not a runtime's name (1-253 "
                                "characters: lowercase letters, digits, '-' and '.')")
    if ref.kind not in RUNTIME_KINDS:
        raise KubeflowSpecError("runtime.kind", f"must be one of {', '.join(RUNTIME_KINDS)}")
    if section.namespace is not None and (
        len(section.namespace) > 63 or not DNS1123_LABEL.fullmatch(section.namespace)
    ):
        raise KubeflowSpecError("namespace", f"{section.namespace!r} is not a namespace name")
    if section.image is not None and not (0 < len(section.image) <= 500
                                          and _IMAGE.fullmatch(section.image)):
        raise KubeflowSpecError("image", "must be 1-500 characters, with no whitespace or "
                                "control character")
    if section.numProcPerNode is not None and section.numProcPerNode < 1:
        raise KubeflowSpecError("numProcPerNode", "must be >= 1")
    if section.resourcesPerNode is not None:
        for part in ("requests", "limits"):
            for res, qty in getattr(section.resourcesPerNode, part).items():
                if isinstance(qty, bool) or not QUANTITY.fullmatch(str(qty)):
                    raise KubeflowSpecError(
                        f"resourcesPerNode.{part}.{res}",
                        f"{qty!r} is not a quantity (e.g. 8, 64Gi)",
                    )
    for key, value in section.labels.items():
        _check_label_key(f"labels.{key}", key)
        check_label_value(f"labels.{key}", value)
        if key.startswith("dispatch.io/"):
            raise KubeflowSpecError(f"labels.{key}", "dispatch.io/ labels are dispatch's own")
    for key in section.annotations:
        _check_label_key(f"annotations.{key}", key)
    return section


def object_name(spec_name: str, token: str) -> str:
    """A DNS-1035 name, the same for the same token: '<slug of the job name>-<token hash>'."""
    slug = re.sub(r"[^a-z0-9-]+", "-", spec_name.lower()).strip("-")
    slug = re.sub(r"-{2,}", "-", slug)
    if not slug or not slug[0].isalpha():
        slug = f"dj-{slug}".rstrip("-")
    digest = hashlib.sha256(token.encode()).hexdigest()[:HASH_LEN]
    slug = slug[: NAME_MAX - HASH_LEN - 1].rstrip("-")
    return f"{slug}-{digest}"


def _memory_quantity(size: int) -> str:
    for unit, factor in (("Gi", 1024**3), ("Mi", 1024**2), ("Ki", 1024)):
        if size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def build_trainjob(submission: Submission, default_namespace: str) -> dict[str, Any]:
    """The TrainJob for one submission, as the JSON the API server receives."""
    spec = submission.spec
    section = parse_section(spec.kubeflow)
    check_label_value("(token)", submission.token)
    namespace = section.namespace or default_namespace
    name = object_name(spec.name, submission.token)
    ref = section.runtime_ref

    trainer: dict[str, Any] = {"command": list(spec.command), "numNodes": spec.nodes}
    if section.image is not None:
        trainer["image"] = section.image
    # The same names the local and Slurm backends set, so a command (dispatch.fn's bootstrap)
    # can tell its job and submission apart; dispatch's win over the spec's.
    env = {**spec.env, "DISPATCH_JOB_ID": submission.job_id,
           "DISPATCH_SUBMISSION": str(submission.number)}
    trainer["env"] = [{"name": k, "value": v} for k, v in sorted(env.items())]
    if section.numProcPerNode is not None:
        trainer["numProcPerNode"] = section.numProcPerNode
    resources: dict[str, dict[str, str | int]] = {}
    if section.resourcesPerNode is not None:
        for part in ("requests", "limits"):
            values = getattr(section.resourcesPerNode, part)
            if values:
                resources[part] = dict(values)
    if spec.memory is not None:
        # The spec's memory is per node: a request and a limit, unless the section set them.
        qty = _memory_quantity(spec.memory)
        for part in ("requests", "limits"):
            resources.setdefault(part, {}).setdefault("memory", qty)
    if resources:
        trainer["resourcesPerNode"] = resources

    labels = {**section.labels, MANAGED_LABEL: "true", TOKEN_LABEL: submission.token}
    annotations = {
        **section.annotations,
        TOKEN_LABEL: submission.token,
        "dispatch.io/job-name": spec.name,
        GATE_ANNOTATION: "closed" if submission.gated else "open",
    }
    body: dict[str, Any] = {
        "runtimeRef": {"name": ref.name, "kind": ref.kind, "apiGroup": ref.apiGroup},
        "trainer": trainer,
        "suspend": submission.gated,
        # Label the JobSet too, so one labelled list finds every JobSet of ours.
        "runtimePatches": [
            {
                "manager": PATCH_MANAGER,
                "trainingRuntimeSpec": {
                    "template": {
                        "metadata": {
                            "labels": {MANAGED_LABEL: "true", TOKEN_LABEL: submission.token}
                        }
                    }
                },
            }
        ],
    }
    if spec.time_limit is not None:
        # Counted from the TrainJob's start and reset on resume: a gated job's wait is free.
        body["activeDeadlineSeconds"] = spec.time_limit
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": labels,
            "annotations": annotations,
        },
        "spec": body,
    }
