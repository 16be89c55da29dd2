"""Issue 47 item 6 on two real control planes on one record: two clusters whose kubeconfigs
both call them ``testbed`` (context and cluster) keep their own scopes, so a supervisor of
one neither takes the other's leases nor ticks its jobs against the wrong API server; a
kubeconfig that renames the cluster (kubeadm's ``kubernetes``) serves the same jobs.

The lane's testbed is the first cluster. The second is brought up here as an API server only
(``scripts/k8s-testbed up-api``: etcd and kube-apiserver with the CRDs and dispatch's RBAC, no
controllers or nodes: a TrainJob made there stays as made), at its own port offset
(DISPATCH_K8S_SECOND_OFFSET, default 500) and state folder, and taken down after."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import TESTBED, kubectl
from test_kubeflow_real import spec
from tests.e2e.conftest import Dispatch

SECOND_OFFSET = os.environ.get("DISPATCH_K8S_SECOND_OFFSET", "500")
POINTING = ("DISPATCH_KUBECONFIG", "DISPATCH_K8S_NAMESPACE", "DISPATCH_K8S_STATE",
            "DISPATCH_K8S_PORT_OFFSET")


@pytest.fixture(scope="module")
def second(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The exports of the second cluster (`scripts/k8s-testbed env`)."""
    state = tmp_path_factory.mktemp("second-testbed")
    env = {**os.environ, "DISPATCH_K8S_STATE": str(state),
           "DISPATCH_K8S_PORT_OFFSET": SECOND_OFFSET}
    try:
        up = subprocess.run([str(TESTBED), "up-api"], env=env, capture_output=True, text=True,
                            timeout=300, check=False)
        assert up.returncode == 0, f"up-api exited {up.returncode}:\n{up.stderr[-4000:]}"
        out = subprocess.run([str(TESTBED), "env"], env=env, capture_output=True, text=True,
                             timeout=60, check=True).stdout
        exports = dict(line.removeprefix("export ").split("=", 1)
                       for line in out.splitlines() if line.startswith("export "))
        yield {k: exports[k] for k in POINTING}
    finally:
        subprocess.run([str(TESTBED), "down"], env=env, capture_output=True, timeout=120,
                       check=False)


def on(d: Dispatch, cluster: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """The CLI with the test's record, pointed at ``cluster`` ({} for the lane's testbed)."""
    return subprocess.run(d.argv(*args), env={**d.env, **cluster}, cwd=d.tmp, text=True,
                          capture_output=True, timeout=180, check=False)


def on_json(d: Dispatch, cluster: dict[str, str], *args: str) -> Any:
    done = on(d, cluster, *args, "--json")
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return json.loads(done.stdout)


def kube_system_uid(cluster: dict[str, str]) -> str:
    env = {**os.environ, **cluster}
    done = subprocess.run([str(TESTBED), "kubectl", "get", "namespace", "kube-system", "-o",
                           "jsonpath={.metadata.uid}"], env=env, capture_output=True, text=True,
                          timeout=60, check=True)
    return done.stdout.strip()


def trainjobs(cluster: dict[str, str], namespace: str) -> set[str]:
    env = {**os.environ, **cluster}
    done = subprocess.run([str(TESTBED), "kubectl", "get", "trainjobs", "-n", namespace, "-o",
                           "json"], env=env, capture_output=True, text=True, timeout=60,
                          check=True)
    return {i["metadata"]["name"] for i in json.loads(done.stdout)["items"]}


def names_in(kubeconfig: str) -> tuple[list[str], list[str]]:
    doc = yaml.safe_load(Path(kubeconfig).read_text())
    return [c["name"] for c in doc["contexts"]], [c["name"] for c in doc["clusters"]]


def test_two_clusters_called_testbed_on_one_record_keep_their_own_scopes_and_jobs(
        cli: Dispatch, namespace: str, second: dict[str, str], tmp_path: Path) -> None:
    first: dict[str, str] = {}  # the lane's exports, already in cli.env
    # the same names in both kubeconfigs: only the API servers tell the clusters apart
    assert names_in(cli.env["DISPATCH_KUBECONFIG"]) == names_in(second["DISPATCH_KUBECONFIG"]) \
        == (["testbed"], ["testbed"])
    assert second["DISPATCH_K8S_NAMESPACE"] == namespace
    long_run = {"DISPATCH_TESTBED_SECONDS": "600"}
    for name, cluster in (("on-first", first), ("on-second", second)):
        done = on(cli, cluster, "submit", str(spec(cli, namespace, name, long_run)))
        assert done.returncode == 0, f"submit {name}: {done.stdout}\n{done.stderr}"
    scope = {name: on_json(cli, {}, "status", name)["scope"] for name in ("on-first", "on-second")}
    expected = {name: f"kubeflow:uid-{kube_system_uid(c).replace('-', '')[:12]}/{namespace}"
                for name, c in (("on-first", first), ("on-second", second))}
    assert scope == expected  # before: both kubeflow:testbed/dispatch
    assert scope["on-first"] != scope["on-second"]
    refs = {r["name"]: [o.split("/")[-1] for o in r["objects"]]
            for r in on_json(cli, {}, "ls", "--all")}
    # each TrainJob on its own cluster only
    assert set(refs["on-second"]) <= trainjobs(second, namespace), refs
    assert not set(refs["on-second"]) & trainjobs(first, namespace), refs
    assert not set(refs["on-first"]) & trainjobs(second, namespace), refs

    # A supervisor of each cluster, on the one record: its own cluster's scope only.
    for cluster, mine, theirs in ((first, "on-first", "on-second"),
                                  (second, "on-second", "on-first")):
        done = on(cli, cluster, "supervise", "--once", "--json")
        assert done.returncode == 0, done.stderr
        summary = json.loads(done.stdout)
        assert scope[mine] in summary["scopes"], (summary, done.stderr)  # the log says why
        assert summary["scopes"][scope[mine]]["ticked"], summary
        assert scope[theirs] not in summary["scopes"], summary
    assert on_json(cli, {}, "status", "on-second")["submissions"] == 1

    # The second cluster's kubeconfig renamed as kubeadm names it: the same scope, its job.
    renamed_doc = yaml.safe_load(Path(second["DISPATCH_KUBECONFIG"]).read_text())
    renamed_doc["clusters"][0]["name"] = "kubernetes"
    renamed_doc["contexts"][0] = {"name": "kubernetes-admin@kubernetes",
                                  "context": {**renamed_doc["contexts"][0]["context"],
                                              "cluster": "kubernetes"}}
    renamed_doc["current-context"] = "kubernetes-admin@kubernetes"
    renamed = tmp_path / "renamed.kubeconfig"
    renamed.write_text(yaml.safe_dump(renamed_doc))
    renamed.chmod(0o600)
    summary = on_json(cli, {**second, "DISPATCH_KUBECONFIG": str(renamed)},
                      "supervise", "--once", "--scope", "kubeflow")
    assert summary["scopes"][scope["on-second"]]["jobs"] == 1, summary
    assert scope["on-first"] not in summary["scopes"], summary

    # `dispatch supervisors`: two scopes, one live job each; doctor names the cluster readably
    rows = {r["scope"]: r for r in on_json(cli, {}, "supervisors")}
    assert {s: rows[s]["live_jobs"] for s in scope.values()} == {s: 1 for s in scope.values()}
    checks = on_json(cli, second, "doctor", "--backend", "kubeflow")["checks"]
    said = next(c for c in checks if c["name"] == "scope")
    assert said["verdict"] == "ok" and said["detail"].startswith(
        f"{scope['on-second']} (context testbed, cluster testbed"), said

    for name, cluster in (("on-first", first), ("on-second", second)):
        done = on(cli, cluster, "cancel", name)
        assert done.returncode == 0, done.stderr
    kubectl("delete", "trainjob", *refs["on-first"], "-n", namespace, "--wait=false",
            check=False)
