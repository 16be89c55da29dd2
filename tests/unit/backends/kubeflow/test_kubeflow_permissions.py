"""The permissions dispatch needs, what each denied one costs, and the RBAC that grants them:
pure tables, and the testbed's hand-written RBAC checked against them (so the two cannot drift
apart while scripts/k8s-testbed.d keeps its own copy)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dispatch.backends.checks import Verdict
from dispatch.backends.kubeflow.doctor import Access, access_checks, restarts_of
from dispatch.backends.kubeflow.manifests import (
    DEGRADED_NOTE,
    Subject,
    cluster_manifests,
    cluster_role,
    render,
    runtime,
)
from dispatch.backends.kubeflow.permissions import PERMISSIONS, needed_for, rbac_fix

TESTBED = Path(__file__).parents[4] / "scripts" / "k8s-testbed.d"


def granted(docs: list[dict], kinds: tuple[str, ...]) -> set[tuple[str, str, str]]:  # type: ignore[type-arg]
    out = set()
    for d in docs:
        if d["kind"] in kinds:
            for rule in d["rules"]:
                for g in rule["apiGroups"]:
                    for r in rule["resources"]:
                        out |= {(v, g, r) for v in rule["verbs"]}
    return out


@pytest.mark.parametrize(("verb", "group", "resource", "needed", "cluster"), [
    ("create", "trainer.kubeflow.org", "trainjobs", True, False),
    ("watch", "", "pods", True, False),
    ("list", "jobset.x-k8s.io", "jobsets", True, False),
    ("get", "", "pods/log", False, False),
    ("watch", "", "events", False, False),
    ("list", "", "nodes", False, True),
    ("get", "trainer.kubeflow.org", "clustertrainingruntimes", False, True),
])
def test_each_permission_is_needed_or_says_what_is_lost(verb: str, group: str, resource: str,
                                                        needed: bool, cluster: bool) -> None:
    p = needed_for(verb, group, resource)
    assert p is not None
    assert (p.needed, p.cluster) == (needed, cluster)
    assert p.without


def test_nodes_denied_says_node_loss_is_seen_only_through_pods() -> None:
    p = needed_for("list", "", "nodes")
    assert p is not None and "pods' conditions" in p.without


def test_the_manifests_grant_every_permission_in_its_scope() -> None:
    docs = cluster_manifests("team", Subject("User", "ann"))
    assert granted(docs, ("Role",)) == {p.key for p in PERMISSIONS if not p.cluster}
    assert granted(docs, ("ClusterRole",)) == {p.key for p in PERMISSIONS if p.cluster}
    kinds = [d["kind"] for d in docs]
    assert kinds == ["Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
                     "ClusterTrainingRuntime"]
    rb = docs[1]
    assert rb["metadata"]["namespace"] == "team"
    assert rb["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User",
                               "name": "ann"}]
    assert docs[3]["metadata"]["name"] == "dispatch-reader-team"


def test_a_service_account_is_made_and_bound_in_the_namespace() -> None:
    docs = cluster_manifests("ml", Subject("ServiceAccount", "runner"))
    assert docs[0] == {"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "runner", "namespace": "ml"}}
    for d in docs:
        if d["kind"].endswith("Binding"):
            assert d["subjects"] == [{"kind": "ServiceAccount", "name": "runner",
                                      "namespace": "ml"}]


def test_namespace_only_has_nothing_cluster_scoped_and_says_what_it_costs() -> None:
    docs = cluster_manifests("ml", Subject("User", "ann"), namespace_only=True)
    assert [d["kind"] for d in docs] == ["Role", "RoleBinding"]
    text = render(docs, namespace_only=True)
    assert DEGRADED_NOTE in text
    assert list(yaml.safe_load_all(text)) == docs


def test_the_runtime_has_native_restarts_off() -> None:
    assert restarts_of(runtime()) == []


def test_restarts_of_names_every_native_restart() -> None:
    rt = runtime()
    spec = rt["spec"]["template"]["spec"]
    spec["failurePolicy"] = {"maxRestarts": 3}
    job = spec["replicatedJobs"][0]["template"]["spec"]
    job["backoffLimit"] = 2
    job["template"]["spec"]["restartPolicy"] = "OnFailure"
    found = restarts_of(rt)
    assert len(found) == 3
    assert any("maxRestarts is 3" in f for f in found)
    assert any("backoffLimit is 2" in f for f in found)
    assert any("restartPolicy is OnFailure" in f for f in found)


def test_the_testbed_rbac_grants_at_least_what_dispatch_needs() -> None:
    docs = list(yaml.safe_load_all((TESTBED / "dispatch-rbac.yaml").read_text()))
    needed = {p.key for p in PERMISSIONS if not p.cluster}
    assert needed <= granted(docs, ("Role",))
    assert {p.key for p in PERMISSIONS if p.cluster} <= granted(docs, ("ClusterRole",))


def test_the_testbed_runtime_is_the_packaged_one_with_its_priority_class() -> None:
    testbed = yaml.safe_load((TESTBED / "dispatch-runtime.yaml").read_text())
    pod = (testbed["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
           ["template"]["spec"])
    assert pod.pop("priorityClassName") == "dispatch-testbed-low"
    assert testbed == runtime()


def test_access_checks_problem_degraded_and_fix() -> None:
    by = {p.key: p for p in PERMISSIONS}
    accesses = [Access(p, p.key not in {("create", "trainer.kubeflow.org", "trainjobs"),
                                        ("list", "", "nodes")}, "")
                for p in PERMISSIONS]
    checks = access_checks(accesses, "ml")
    assert [(c.name, c.verdict) for c in checks] == [
        ("permission create trainjobs.trainer.kubeflow.org", Verdict.PROBLEM),
        ("permission list nodes", Verdict.DEGRADED),
    ]
    assert checks[1].fix == rbac_fix(by[("list", "", "nodes")], "ml")
    assert "ClusterRole" in checks[1].fix
    assert access_checks([Access(p, True, "") for p in PERMISSIONS], "ml")[0].verdict \
        is Verdict.OK


def test_the_kube_system_namespace_is_granted_by_name_only() -> None:
    """Its UID names the cluster in a job's scope (scope.py); nothing else of namespaces."""
    rule = {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"],
            "verbs": ["get"]}
    assert rule in cluster_role()["rules"]
    docs = list(yaml.safe_load_all((TESTBED / "dispatch-rbac.yaml").read_text()))
    reader = next(d for d in docs if d["kind"] == "ClusterRole")
    assert rule in reader["rules"]
    p = needed_for("get", "", "namespaces")
    assert p is not None and p.cluster and not p.needed and p.name == "kube-system"
    assert "resourceNames: [kube-system]" in rbac_fix(p, "ml")
