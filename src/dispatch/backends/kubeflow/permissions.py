"""Every permission the kubeflow backend uses, and what stops working without each. Pure.

The list is what ``client.py``'s calls ask of the API server, made by the backend
(``backend.py``: create, dry-run create, get, merge-patch, delete of TrainJobs), its looks
(``look.py``/``informer.py``: list and watch of each collection and of the nodes) and its log
reader (``podlogs.py``: ``pods/log`` get); tests/integration/kubeflow records every request a
job's life makes against the stand-in API server and checks each one is here. ``doctor``
asks each with a SelfSubjectAccessReview; ``manifests`` grants them.
"""

from __future__ import annotations

from dataclasses import dataclass

TRAINER = "trainer.kubeflow.org"
JOBSET = "jobset.x-k8s.io"


@dataclass(frozen=True)
class Permission:
    """One verb on one resource. ``cluster``: granted cluster-wide (a ClusterRole), not in
    the namespace. ``needed``: a job cannot run without it; else ``without`` says what
    dispatch sees later or not at all."""

    verb: str
    group: str
    resource: str
    cluster: bool
    needed: bool
    without: str
    name: str = ""  # granted on this one object only (RBAC resourceNames); "": all of them

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.verb, self.group, self.resource)

    @property
    def shown(self) -> str:
        return f"{self.resource}.{self.group}" if self.group else self.resource


def _p(verbs: str, group: str, resource: str, without: str, *, cluster: bool = False,
       needed: bool = True, name: str = "") -> tuple[Permission, ...]:
    return tuple(Permission(v, group, resource, cluster, needed, without, name)
                 for v in verbs.split())


PERMISSIONS: tuple[Permission, ...] = (
    *_p("create", TRAINER, "trainjobs", "no job can be submitted (nor admitted by a dry run)"),
    *_p("get", TRAINER, "trainjobs", "a submit retried after a lost answer cannot find the "
        "TrainJob it already made"),
    *_p("list watch", TRAINER, "trainjobs", "no TrainJob can be seen: every job's state is "
        "unknown"),
    *_p("patch", TRAINER, "trainjobs", "a gated job's gate cannot be opened, nor a stop marked"),
    *_p("delete", TRAINER, "trainjobs", "no job can be stopped or cancelled"),
    *_p("list watch", JOBSET, "jobsets", "the JobSets are not seen: every look is incomplete "
        "and no job moves"),
    *_p("list watch", "batch", "jobs", "the Jobs are not seen: every look is incomplete and no "
        "job moves"),
    *_p("list watch", "", "pods", "the pods are not seen: every look is incomplete and no job "
        "moves"),
    *_p("get", "", "pods/log", "`dispatch logs` reads nothing and no application error is "
        "taken from a failed pod's log", needed=False),
    *_p("list watch", "", "events", "failures only an Event tells (image pull, scheduling, "
        "quota) are not seen; the job's end still is", needed=False),
    *_p("list watch", "", "nodes", "a lost node is seen only through its pods' conditions "
        "(DisruptionTarget), not from the node itself: node-loss detection is degraded",
        cluster=True, needed=False),
    *_p("get", "", "namespaces", "a job's scope names the cluster by its server URL and CA, "
        "not its kube-system UID: a supervisor reaching it through another URL (a pod's "
        "10.96.0.1) does not serve the job, and with no CA in the kubeconfig no job can be "
        "submitted", cluster=True, needed=False, name="kube-system"),
    *_p("get", TRAINER, "clustertrainingruntimes", "`dispatch doctor` cannot check the "
        "runtime a spec names; jobs still run", cluster=True, needed=False),
    *_p("get", TRAINER, "trainingruntimes", "`dispatch doctor` cannot check a namespaced "
        "runtime; jobs still run", needed=False),
)

BY_KEY = {p.key: p for p in PERMISSIONS}


def needed_for(verb: str, group: str, resource: str) -> Permission | None:
    return BY_KEY.get((verb, group, resource))


def rules_of(perms: tuple[Permission, ...]) -> list[dict[str, object]]:
    """RBAC rules granting ``perms``: one rule per (group, resource, object name), verbs in
    listed order; a named object's rule carries its ``resourceNames``."""
    rules: dict[tuple[str, str, str], list[str]] = {}
    for p in perms:
        rules.setdefault((p.group, p.resource, p.name), []).append(p.verb)
    return [{"apiGroups": [g], "resources": [r], **({"resourceNames": [n]} if n else {}),
             "verbs": verbs}
            for (g, r, n), verbs in rules.items()]


def rbac_fix(p: Permission, namespace: str) -> str:
    """The RBAC rule that grants ``p``, and where it goes, as text to paste."""
    where = ("a ClusterRole (bound by a ClusterRoleBinding)" if p.cluster
             else f"a Role in namespace {namespace} (bound by a RoleBinding)")
    names = f" resourceNames: [{p.name}]" if p.name else ""
    return (f"add to {where}: - apiGroups: [\"{p.group}\"] resources: [{p.resource}]{names} "
            f"verbs: [{p.verb}]  (all of them: `dispatch kubeflow manifests --namespace "
            f"{namespace}`)")
