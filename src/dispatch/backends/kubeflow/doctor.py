"""``dispatch doctor --backend kubeflow``: what a first job needs of the cluster, asked of the
API server before one is submitted. Every answer is a ``Check`` (backends/checks.py).

Asked: where the configuration came from (kubeconfig file, context, cluster, user: the
loader's choice); ``/version``; the TrainJob and JobSet API groups in versions dispatch speaks
(API discovery, which every authenticated identity may read); the runtime a spec names and
whether its native restarts are off; and each of ``permissions.PERMISSIONS`` as a
SelfSubjectAccessReview (which every authenticated identity may create).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dispatch.backends.checks import Check, Verdict
from dispatch.backends.kubeflow.client import (
    ApiAnswer,
    ClusterRuntimeRes,
    KubeClient,
    ResourceType,
    RuntimeRes,
)
from dispatch.backends.kubeflow.manifests import DEGRADED_NOTE
from dispatch.backends.kubeflow.origin import ConfigOrigin
from dispatch.backends.kubeflow.permissions import (
    JOBSET,
    PERMISSIONS,
    TRAINER,
    Permission,
    rbac_fix,
)
from dispatch.core.model import SchedulerUnreachable
from dispatch.errors import BackendError

# The API versions the client speaks (client.py's resource classes).
SPOKEN = {TRAINER: "v1alpha1", JOBSET: "v1alpha2"}
ACCESS_REVIEW = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


@dataclass(frozen=True)
class Access:
    """One permission as the API server answered its access review."""

    permission: Permission
    allowed: bool
    reason: str  # the API server's words (why denied), or what kept it from answering

    def as_json(self) -> dict[str, Any]:
        p = self.permission
        return {"verb": p.verb, "group": p.group, "resource": p.resource,
                "cluster": p.cluster, "needed": p.needed, "allowed": self.allowed,
                "reason": self.reason, "without": "" if self.allowed else p.without}


def where_from(origin: ConfigOrigin) -> Check:
    """Which kubeconfig file(s), context, cluster (server) and user the loader chose; never a
    credential (origin.py)."""
    return Check("configuration", Verdict.OK, origin.text())


def scope_check(kube: KubeClient, cfg: Any, namespace: str) -> Check:
    """Which scope a job recorded now gets: the cluster's id (scope.py) and its readable
    name; degraded on the server-URL fallback, a problem when the cluster cannot be told."""
    from dispatch.backends.kubeflow.scope import SERVER_PREFIX, cluster_id, describe

    try:
        found = cluster_id(kube, cfg)
    except SchedulerUnreachable as err:
        return Check("scope", Verdict.PROBLEM, f"cannot be told: {err.reason}")
    except BackendError as err:
        return Check("scope", Verdict.PROBLEM, str(err),
                     "grant get on namespaces/kube-system (`dispatch kubeflow manifests`)")
    detail = f"kubeflow:{found.key}/{namespace} ({describe(cfg)}; from the {found.how})"
    if found.key.startswith(SERVER_PREFIX):
        return Check("scope", Verdict.DEGRADED, detail + ": it changes with the server URL",
                     "grant get on namespaces/kube-system (`dispatch kubeflow manifests`)")
    return Check("scope", Verdict.OK, detail)


def version_check(kube: KubeClient) -> Check:
    try:
        v = kube.request_json("GET", "/version")
    except SchedulerUnreachable as err:
        return Check("API server", Verdict.PROBLEM, f"not reachable: {err.reason}",
                     "check the kubeconfig's server address and the network to it")
    except ApiAnswer as err:
        return Check("API server", Verdict.OK, f"reachable; /version refused: {err}")
    return Check("API server", Verdict.OK,
                 f"reachable, Kubernetes {v.get('gitVersion') or v.get('major', '?')}")


def api_group_check(kube: KubeClient, group: str, what: str, install: str) -> Check:
    name = f"{what} API ({group}/{SPOKEN[group]})"
    try:
        found = kube.request_json("GET", f"/apis/{group}")
    except ApiAnswer as err:
        if err.code == 404:
            return Check(name, Verdict.PROBLEM, f"the cluster has no {group} API", install)
        return Check(name, Verdict.PROBLEM, f"cannot tell: {err}", install)
    versions = [str(v.get("version")) for v in found.get("versions") or []
                if isinstance(v, dict)]
    if SPOKEN[group] not in versions:
        return Check(name, Verdict.PROBLEM, f"served versions {', '.join(versions) or 'none'}; "
                     f"dispatch speaks {SPOKEN[group]}", install)
    return Check(name, Verdict.OK, f"served ({', '.join(versions)})")


def restarts_of(runtime: dict[str, Any]) -> list[str]:
    """Where ``runtime`` leaves Kubernetes' own restarts on (empty: off). Pure."""
    found: list[str] = []
    spec = (runtime.get("spec") or {}).get("template", {}).get("spec", {}) or {}
    max_restarts = (spec.get("failurePolicy") or {}).get("maxRestarts")
    if max_restarts:
        found.append(f"the JobSet's failurePolicy.maxRestarts is {max_restarts}")
    for rj in spec.get("replicatedJobs") or []:
        name = rj.get("name", "?")
        job = (rj.get("template") or {}).get("spec") or {}
        if job.get("backoffLimit") != 0:
            found.append(f"replicatedJob {name}: backoffLimit is "
                         f"{job.get('backoffLimit', 'unset (6)')}, not 0")
        policy = ((job.get("template") or {}).get("spec") or {}).get("restartPolicy")
        if policy != "Never":
            found.append(f"replicatedJob {name}: restartPolicy is "
                         f"{policy or 'unset (JobSet makes it OnFailure)'}, not Never")
    return found


RESTARTS_MEAN = ("Kubernetes restarts a failed container or pod itself before dispatch sees "
                 "the failure: those restarts are not counted against the policy's rules "
                 "(their budget is not the only one) and a crash's cause may be hidden")


def runtime_check(kube: KubeClient, name: str | None, kind: str, namespace: str) -> Check:
    if name is None:
        return Check("runtime", Verdict.SKIPPED,
                     "no runtime named (give --runtime NAME or --spec FILE)")
    res: ResourceType = ClusterRuntimeRes if kind == "ClusterTrainingRuntime" else RuntimeRes
    label = f"runtime {kind} {name}"
    try:
        found = kube.get(res, None if kind == "ClusterTrainingRuntime" else namespace, name)
    except ApiAnswer as err:
        return Check(label, Verdict.DEGRADED, f"cannot be read: {err}",
                     "grant get on it (`dispatch kubeflow manifests`) to have it checked")
    except SchedulerUnreachable as err:
        return Check(label, Verdict.PROBLEM, f"cannot be read: {err.reason}")
    if found is None:
        return Check(label, Verdict.PROBLEM, "not found: a TrainJob naming it is refused",
                     "apply one (`dispatch kubeflow manifests` has dispatch-torch) or name "
                     "an existing runtime in the spec")
    restarts = restarts_of(found)
    if restarts:
        return Check(label, Verdict.DEGRADED,
                     f"native restarts are on ({'; '.join(restarts)}): {RESTARTS_MEAN}",
                     "use a runtime with restartPolicy Never and backoffLimit 0 "
                     "(`dispatch kubeflow manifests` prints one), or, where its JobSet "
                     "failurePolicy restarts, set DISPATCH_KUBEFLOW_RESTART_NATIVE=1")
    return Check(label, Verdict.OK, "present, native restarts off")


def review(kube: KubeClient, p: Permission, namespace: str) -> Access:
    attrs: dict[str, str] = {"verb": p.verb, "group": p.group}
    resource, _, sub = p.resource.partition("/")
    attrs["resource"] = resource
    if sub:
        attrs["subresource"] = sub
    if not p.cluster:
        attrs["namespace"] = namespace
    if p.name:
        attrs["name"] = p.name
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": attrs}}
    try:
        status = kube.request_json("POST", ACCESS_REVIEW, body).get("status") or {}
    except ApiAnswer as err:
        return Access(p, False, f"the access review was refused: {err}")
    allowed = bool(status.get("allowed"))
    return Access(p, allowed, str(status.get("reason") or status.get("evaluationError") or ""))


def access_checks(accesses: Sequence[Access], namespace: str) -> list[Check]:
    """One Check per denied permission (a job needs it: problem; else degraded, with what
    stops working), or one saying all are allowed. Pure."""
    out: list[Check] = []
    for a in accesses:
        if a.allowed:
            continue
        p = a.permission
        scope = "cluster-wide" if p.cluster else f"in {namespace}"
        detail = f"{p.verb} {p.shown} {scope} denied: {p.without}"
        if p.resource == "nodes":
            detail += f" ({DEGRADED_NOTE})"
        out.append(Check(f"permission {p.verb} {p.shown}",
                         Verdict.PROBLEM if p.needed else Verdict.DEGRADED,
                         detail, rbac_fix(p, namespace)))
    if not out:
        out.append(Check("permissions", Verdict.OK,
                         f"all {len(accesses)} allowed ({namespace} and cluster-wide)"))
    return out


def doctor(kube: KubeClient, origin: ConfigOrigin, cfg: Any, namespace: str,
           runtime: str | None = None, runtime_kind: str = "ClusterTrainingRuntime",
           ) -> tuple[list[Check], list[Access]]:
    """Every check, and the permission table (``origin``: where the configuration came from,
    ``cfg``: the configuration, for the cluster's id). Stops after the API server when it
    cannot be reached (nothing else could be asked)."""
    checks = [where_from(origin), version_check(kube)]
    if checks[-1].verdict is Verdict.PROBLEM:
        return checks, []
    checks.append(api_group_check(kube, TRAINER, "TrainJob",
                                  "install Kubeflow Trainer v2 (its CRDs and controller)"))
    checks.append(api_group_check(kube, JOBSET, "JobSet",
                                  "install JobSet (Kubeflow Trainer v2 installs it)"))
    checks.append(runtime_check(kube, runtime, runtime_kind, namespace))
    checks.append(scope_check(kube, cfg, namespace))
    accesses = [review(kube, p, namespace) for p in PERMISSIONS]
    checks += access_checks(accesses, namespace)
    return checks, accesses
