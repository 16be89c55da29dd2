"""JobSpec -> TrainJob (trainer.kubeflow.org/v1alpha1): the object we create from the strict
``kubeflow:`` section (``section``). Pure: no client, no clock.

The spec's ``kubeflow:`` section (the TrainJob's keys spelled as in the TrainJob, so users can
copy them from Kubeflow's docs; the pod's in snake_case)::

    kubeflow:
      namespace: team-a                 # default: the backend's default namespace
      runtime: torch-distributed        # or {name: ..., kind: TrainingRuntime, apiGroup: ...}
      image: ghcr.io/me/train:1.2       # default: the runtime's image
      numProcPerNode: 8
      resourcesPerNode: {limits: {nvidia.com/gpu: 8}}
      labels: {team: a}                 # extra labels on the TrainJob
      annotations: {}
      node_selector: {gpu: h100}        # the pods' placement and access (issues 46, 47)
      tolerations: [{key: gpu, operator: Exists, effect: NoSchedule}]
      volumes:
        - {host_path: /data, mount_path: /data, read_only: true}
        - {pvc: checkpoints, mount_path: /ckpt}
      service_account: trainer
      image_pull_secrets: [regcred]
      shared_dir: /ckpt/dispatch        # a volume's mount_path or under one: progress and
                                        # error files, read where dispatch runs (shared_files)

The pod-level keys ride in the TrainJob's ``runtimePatches`` (Trainer v2.3.0's
``RuntimePatch.trainingRuntimeSpec.template.spec.replicatedJobs[name=node].template.spec
.template.spec``, a ``PodSpecPatch``): nodeSelector, tolerations, volumes, serviceAccountName,
imagePullSecrets, and the volumes' mounts on container ``node``. Trainer applies the patch to
the JobSet it makes, so every trainer pod carries them. v2.3.0's PodSpecPatch has no
``priorityClassName``: ``priority_class`` is refused with that reason (the runtime sets it).

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
from collections.abc import Callable
from typing import Any

import yaml

from dispatch.backends.base import Submission
from dispatch.backends.kubeflow.kubeconfig import NoKubeConfig
from dispatch.backends.kubeflow.objects import (
    GATE_ANNOTATION,
    MANAGED_LABEL,
    SHARED_DIR_ANNOTATION,
    TOKEN_LABEL,
)
from dispatch.backends.kubeflow.section import (
    DNS1123_LABEL,
    DNS1123_SUBDOMAIN,
    LABEL_NAME,
    LABEL_VALUE,
    LABEL_VALUE_MAX,
    QUANTITY,
    RUNTIME_KINDS,
    KubeflowSection,
    KubeflowSpecError,
    KubeflowSpecProblems,
    Resources,
    RuntimeRef,
    Toleration,
    Volume,
    check_label_value,
    parse_section,
)
from dispatch.backends.kubeflow.shared_files import shared_file_env

API_VERSION = "trainer.kubeflow.org/v1alpha1"
KIND = "TrainJob"
PATCH_MANAGER = "dispatch.io/kubeflow-backend"
# Where Trainer runs the trainer (its torch and custom runtimes: the replicated job and its
# container are both "node"; docs/kubeflow.md). A patch names both: runtimePatches are keyed
# by replicated job and container name, and one that names neither patches nothing.
TRAINER_JOB = "node"
TRAINER_CONTAINER = "node"
# TrainJob names become JobSet, Job, Pod and Service names; Trainer keeps them short.
NAME_MAX = 40
HASH_LEN = 10
__all__ = [
    "DNS1123_LABEL", "DNS1123_SUBDOMAIN", "LABEL_NAME", "LABEL_VALUE", "LABEL_VALUE_MAX",
    "QUANTITY", "RUNTIME_KINDS", "KubeflowSection", "KubeflowSpecError",
    "KubeflowSpecProblems", "Resources", "RuntimeRef", "Toleration", "Volume",
    "build_trainjob", "check_label_value", "object_name", "parse_section", "pod_patch",
]


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


def volume_name(index: int) -> str:
    """The name of the section's ``index``-th volume (a DNS label, unique in the pod)."""
    return f"dispatch-volume-{index}"


def pod_patch(section: KubeflowSection) -> dict[str, Any]:
    """The trainer pods' PodSpecPatch for the section's pod-level keys ({} when it has none)."""
    pod: dict[str, Any] = {}
    if section.node_selector:
        pod["nodeSelector"] = dict(section.node_selector)
    if section.tolerations:
        pod["tolerations"] = [_toleration(t) for t in section.tolerations]
    if section.service_account is not None:
        pod["serviceAccountName"] = section.service_account
    if section.image_pull_secrets:
        pod["imagePullSecrets"] = [{"name": s} for s in section.image_pull_secrets]
    if section.volumes:
        pod["volumes"] = [_volume(i, v) for i, v in enumerate(section.volumes)]
        mounts = [{"name": volume_name(i), "mountPath": v.mount_path, "readOnly": v.read_only}
                  for i, v in enumerate(section.volumes)]
        pod["containers"] = [{"name": TRAINER_CONTAINER, "volumeMounts": mounts}]
    return pod


def _toleration(t: Toleration) -> dict[str, Any]:
    out: dict[str, Any] = {"operator": t.operator}
    for key in ("key", "value", "effect"):
        if getattr(t, key):
            out[key] = getattr(t, key)
    if t.tolerationSeconds is not None:
        out["tolerationSeconds"] = t.tolerationSeconds
    return out


def _volume(index: int, v: Volume) -> dict[str, Any]:
    if v.host_path is not None:
        # Directory: the node's directory must be there (a typo fails the pod, never makes one).
        return {"name": volume_name(index), "hostPath": {"path": v.host_path,
                                                         "type": "Directory"}}
    return {"name": volume_name(index),
            "persistentVolumeClaim": {"claimName": v.pvc, "readOnly": v.read_only}}


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
    files = shared_file_env(section.shared_dir) if section.shared_dir is not None else []
    for var in files:
        env.pop(var["name"], None)
    # the pod's own name first: the file names after it refer to it as $(DISPATCH_POD_NAME),
    # which Kubernetes expands only from a variable defined earlier in the list
    trainer["env"] = [*files[:1], *({"name": k, "value": v} for k, v in sorted(env.items())),
                      *files[1:]]
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
    if section.shared_dir is not None:
        annotations[SHARED_DIR_ANNOTATION] = section.shared_dir
    template: dict[str, Any] = {
        # Label the JobSet too, so one labelled list finds every JobSet of ours.
        "metadata": {"labels": {MANAGED_LABEL: "true", TOKEN_LABEL: submission.token}},
    }
    pod = pod_patch(section)
    if pod:
        template["spec"] = {"replicatedJobs": [
            {"name": TRAINER_JOB, "template": {"spec": {"template": {"spec": pod}}}}]}
    body: dict[str, Any] = {
        "runtimeRef": {"name": ref.name, "kind": ref.kind, "apiGroup": ref.apiGroup},
        "trainer": trainer,
        "suspend": submission.gated,
        "runtimePatches": [
            {"manager": PATCH_MANAGER, "trainingRuntimeSpec": {"template": template}},
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


def dry_run_trainjob(submission: Submission, namespace: Callable[[], str]) -> tuple[str, str]:
    """What ``submit --dry-run`` shows (title, YAML): the TrainJob in the section's namespace,
    else the context's (``namespace()``, read from the configuration), else, with no
    Kubernetes configuration at all, in ``default``, said to stand in (a dry run needs no
    cluster; a configuration that is there but unusable is still its error)."""
    title = "TrainJob"
    if parse_section(submission.spec.kubeflow).namespace is not None:
        where = "default"  # the section's namespace wins
    else:
        try:
            where = namespace()
        except NoKubeConfig:
            where = "default"
            title += (" (no Kubernetes configuration here: its namespace 'default' stands in"
                      " for the context's, which submit needs)")
    return title, yaml.safe_dump(build_trainjob(submission, where), sort_keys=False)
