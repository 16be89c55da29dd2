"""What a cluster needs for dispatch, as objects to ``kubectl apply``: the runtime with
Kubernetes' own restarts off, and the RBAC of ``permissions.PERMISSIONS`` for one identity
(a user or a service account) in one namespace. Pure: ``dispatch kubeflow manifests``
prints ``render(cluster_manifests(...))``.

The runtime (docs/kubeflow.md "Who restarts what"): Trainer v2.3.0's TrainJob cannot patch
``restartPolicy`` or a Job's ``backoffLimit``, so the runtime switches Kubernetes' restarts off
(``restartPolicy: Never``: JobSet's webhook defaults OnFailure only when it is unset;
``backoffLimit: 0``) and dispatch's rules are the one recovery budget.

``namespace_only``: for a cluster that refuses a ClusterRole on nodes, no cluster-scoped
object at all; dispatch then sees a lost node only through its pods' conditions (said in the
output, by ``dispatch doctor`` and in the affected jobs' status).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import yaml

from dispatch.backends.kubeflow.permissions import PERMISSIONS, rules_of

RUNTIME_NAME = "dispatch-torch"
RUNTIME_IMAGE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
RBAC = "rbac.authorization.k8s.io"
DEGRADED_NOTE = ("namespace-only: no ClusterRole, so dispatch cannot list nodes; a lost node "
                 "is seen only through its pods' conditions (DisruptionTarget), later or not "
                 "at all when the node's pods are not marked")


@dataclass(frozen=True)
class Subject:
    """Who dispatch acts as: ``kind`` User or ServiceAccount."""

    kind: str
    name: str

    def as_rbac(self, namespace: str) -> dict[str, str]:
        if self.kind == "ServiceAccount":
            return {"kind": "ServiceAccount", "name": self.name, "namespace": namespace}
        return {"apiGroup": RBAC, "kind": "User", "name": self.name}


def runtime(name: str = RUNTIME_NAME, image: str = RUNTIME_IMAGE) -> dict[str, Any]:
    """A ClusterTrainingRuntime for torch with native restarts off."""
    return {
        "apiVersion": "trainer.kubeflow.org/v1alpha1",
        "kind": "ClusterTrainingRuntime",
        "metadata": {"name": name, "labels": {"trainer.kubeflow.org/framework": "torch"}},
        "spec": {
            "mlPolicy": {"numNodes": 1, "torch": {}},
            "template": {"spec": {"replicatedJobs": [{
                "name": "node",
                "template": {
                    "metadata": {"labels": {
                        "trainer.kubeflow.org/trainjob-ancestor-step": "trainer"}},
                    "spec": {
                        "backoffLimit": 0,
                        "template": {"spec": {
                            "restartPolicy": "Never",
                            "containers": [{"name": "node", "image": image}],
                        }},
                    },
                },
            }]}},
        },
    }


def role(namespace: str, name: str = "dispatch") -> dict[str, Any]:
    return {"apiVersion": f"{RBAC}/v1", "kind": "Role",
            "metadata": {"name": name, "namespace": namespace},
            "rules": rules_of(tuple(p for p in PERMISSIONS if not p.cluster))}


def cluster_role(name: str = "dispatch-reader") -> dict[str, Any]:
    return {"apiVersion": f"{RBAC}/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": rules_of(tuple(p for p in PERMISSIONS if p.cluster))}


def binding(kind: str, name: str, role_kind: str, subject: Subject, namespace: str,
            ) -> dict[str, Any]:
    meta: dict[str, str] = {"name": name}
    if kind == "RoleBinding":
        meta["namespace"] = namespace
    return {"apiVersion": f"{RBAC}/v1", "kind": kind, "metadata": meta,
            "roleRef": {"apiGroup": RBAC, "kind": role_kind, "name": name},
            "subjects": [subject.as_rbac(namespace)]}


def cluster_manifests(namespace: str, subject: Subject, *, namespace_only: bool = False,
                      with_runtime: bool = True) -> list[dict[str, Any]]:
    """Everything to apply, in apply order. A service account is made too; a cluster-wide
    binding's name carries the namespace (two namespaces' identities do not collide)."""
    docs: list[dict[str, Any]] = []
    if subject.kind == "ServiceAccount":
        docs.append({"apiVersion": "v1", "kind": "ServiceAccount",
                     "metadata": {"name": subject.name, "namespace": namespace}})
    docs += [role(namespace), binding("RoleBinding", "dispatch", "Role", subject, namespace)]
    if not namespace_only:
        reader = f"dispatch-reader-{namespace}"
        docs += [cluster_role(reader),
                 binding("ClusterRoleBinding", reader, "ClusterRole", subject, namespace)]
    if with_runtime and not namespace_only:
        docs.append(runtime())
    return docs


def render(docs: list[dict[str, Any]], *, namespace_only: bool = False) -> str:
    """The documents as one YAML stream, with a header saying what they are."""
    head = ["# dispatch's objects on a cluster (docs/kubeflow.md#rbac); kubectl apply -f -"]
    if namespace_only:
        head.append(f"# {DEGRADED_NOTE}.")
        head.append("# The runtime is cluster-scoped too: ask an admin to apply "
                    "`dispatch kubeflow manifests --runtime-only`.")
    body = "---\n".join(yaml.safe_dump(d, sort_keys=False) for d in docs)
    return "\n".join(head) + "\n" + body
