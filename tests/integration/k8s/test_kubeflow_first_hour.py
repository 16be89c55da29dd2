"""A Kubernetes user's first hour against the real control plane (issue 47 items 1-3): what
`dispatch kubeflow manifests` prints is applied by the cluster's admin, and the identity it
grants (a service account, its token from the TokenRequest API, handed over by an exec
credential plugin of each version) gets `dispatch doctor` green and a job to succeeded, with
its kubeconfig one of several files in KUBECONFIG and its context chosen by
DISPATCH_K8S_CONTEXT. The namespace-only manifests (no ClusterRole) still run a job, and
doctor says what is degraded."""

from __future__ import annotations

import json
import os
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import kubectl
from tests.e2e.conftest import Dispatch

from dispatch.backends.kubeflow.manifests import DEGRADED_NOTE

RUNTIME = "dispatch-torch"  # the testbed's runtime: native restarts off


class Grant:
    """A namespace of its own, the manifests for a service account in it applied as the
    cluster's admin, and whatever cluster-scoped object they made (deleted after)."""

    def __init__(self, cli: Dispatch, *, namespace_only: bool) -> None:
        self.namespace = f"fh-{uuid.uuid4().hex[:8]}"
        self.account = "fh-dispatch"
        kubectl("create", "namespace", self.namespace)
        args = ["kubeflow", "manifests", "--namespace", self.namespace,
                "--service-account", self.account]
        if namespace_only:
            args.append("--namespace-only")
        printed = cli(*args, check=True).stdout
        self.docs = [d for d in yaml.safe_load_all(printed) if d]
        # The testbed's runtime is the manifests' one with its pods at the testbed's low
        # priority (its preemption tests): the restart fields are compared, not re-applied.
        self.runtimes = [d for d in self.docs if d["kind"] == "ClusterTrainingRuntime"]
        rbac = [d for d in self.docs if d["kind"] != "ClusterTrainingRuntime"]
        self.cluster_scoped = [(d["kind"], d["metadata"]["name"]) for d in rbac
                               if "namespace" not in d["metadata"]]
        kubectl("apply", "-f", "-", input=yaml.safe_dump_all(rbac))
        self.token = kubectl("create", "token", self.account, "-n", self.namespace,
                             "--duration", "1h").stdout.strip()

    def delete(self) -> None:
        for kind, name in self.cluster_scoped:
            kubectl("delete", kind.lower(), name, "--wait=false", check=False)
        kubectl("delete", "namespace", self.namespace, "--wait=false", check=False)


@pytest.fixture
def grants() -> Iterator[list[Grant]]:
    made: list[Grant] = []
    yield made
    for g in made:
        g.delete()


def cluster_of_the_testbed() -> dict[str, Any]:
    """The testbed's cluster entry (server and CA), from the least-privilege kubeconfig."""
    doc = yaml.safe_load(Path(os.environ["DISPATCH_KUBECONFIG"]).read_text())
    cluster: dict[str, Any] = doc["clusters"][0]["cluster"]
    return cluster


def exec_plugin(tmp: Path, token: str, version: str) -> dict[str, Any]:
    """A credential plugin printing an ExecCredential of ``version`` with the token (read
    from a 0600 file: never in the kubeconfig, never in argv)."""
    secret = tmp / f"token-{version.rsplit('/', 1)[-1]}"
    secret.write_text(token)
    secret.chmod(0o600)
    script = tmp / f"plugin-{version.rsplit('/', 1)[-1]}.py"
    script.write_text(
        "import json, sys\n"
        f"token = open({str(secret)!r}).read().strip()\n"
        f"print(json.dumps({{'apiVersion': {version!r}, 'kind': 'ExecCredential', "
        "'status': {'token': token}}))\n")
    script.chmod(0o700)
    user: dict[str, Any] = {"apiVersion": version, "command": sys.executable,
                            "args": [str(script)]}
    if version.endswith("/v1"):
        user["interactiveMode"] = "Never"  # required by v1
    return {"exec": user}


def kubeconfigs(tmp: Path, grant: Grant, version: str) -> str:
    """KUBECONFIG of two files: the first the testbed's own identity (its current context),
    the second the granted service account's context ``first-hour`` through the plugin."""
    first = tmp / "config-team"
    first.write_text(Path(os.environ["DISPATCH_KUBECONFIG"]).read_text())
    second = tmp / "config-first-hour"
    second.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "first-hour-cluster", "cluster": cluster_of_the_testbed()}],
        "users": [{"name": "first-hour-sa", "user": exec_plugin(tmp, grant.token, version)}],
        "contexts": [{"name": "first-hour", "context": {
            "cluster": "first-hour-cluster", "user": "first-hour-sa",
            "namespace": grant.namespace}}],
    }))
    for f in (first, second):
        f.chmod(0o600)
    return f"{first}{os.pathsep}{second}"


def as_granted(cli: Dispatch, grant: Grant, version: str) -> None:
    cli.env.pop("DISPATCH_KUBECONFIG", None)
    cli.env.pop("DISPATCH_K8S_NAMESPACE", None)
    cli.env["KUBECONFIG"] = kubeconfigs(cli.tmp, grant, version)
    cli.env["DISPATCH_K8S_CONTEXT"] = "first-hour"


def restart_fields(runtime: dict[str, Any]) -> tuple[int, str, str]:
    """What makes a runtime's native restarts off: the Job's backoffLimit, the pod's
    restartPolicy, and the container dispatch's command goes to."""
    (job,) = runtime["spec"]["template"]["spec"]["replicatedJobs"]
    spec = job["template"]["spec"]
    (container,) = spec["template"]["spec"]["containers"]
    return spec["backoffLimit"], spec["template"]["spec"]["restartPolicy"], container["name"]


def doctor(cli: Dispatch) -> tuple[int, dict[str, Any]]:
    done = cli("doctor", "--backend", "kubeflow", "--runtime", RUNTIME, "--json")
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {done.returncode}\n{done.stdout}\n{done.stderr}") from None


def run_a_job(cli: Dispatch, name: str) -> dict[str, Any]:
    # No namespace in the spec: the context's (the granted one) is where it goes.
    path = cli.spec(name, ["python", "train.py"], backend="kubeflow", nodes=2,
                    env={"DISPATCH_TESTBED_SECONDS": "2"}, kubeflow={"runtime": RUNTIME})
    done = cli("run", str(path), "--json", "--poll", "0.5", timeout=300)
    try:
        st: dict[str, Any] = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {done.returncode}\n{done.stdout}\n{done.stderr}") from None
    assert done.returncode == 0 and st["state"] == "succeeded", (done.stderr, st)
    return st


@pytest.mark.parametrize("version", ["client.authentication.k8s.io/v1",
                                     "client.authentication.k8s.io/v1beta1"])
def test_the_printed_manifests_give_an_identity_doctor_passes_and_a_job_succeeds(
        cli: Dispatch, grants: list[Grant], version: str) -> None:
    grant = Grant(cli, namespace_only=False)
    grants.append(grant)
    # The runtime it prints is the testbed's (restarts off), but for the testbed's priority
    # class and what the API server defaults.
    (printed,) = grant.runtimes
    testbed = json.loads(kubectl("get", "clustertrainingruntime", RUNTIME, "-o",
                                 "json").stdout)
    assert printed["metadata"]["name"] == RUNTIME
    assert restart_fields(printed) == restart_fields(testbed) == (0, "Never", "node")

    as_granted(cli, grant, version)
    code, out = doctor(cli)
    assert code == 0, out
    assert out["namespace"] == grant.namespace
    assert {c["verdict"] for c in out["checks"]} == {"ok"}, out
    assert all(p["allowed"] for p in out["permissions"]), out["permissions"]
    where = next(c for c in out["checks"] if c["name"] == "configuration")["detail"]
    assert "context first-hour" in where and "first-hour-sa" in where, where
    assert grant.token not in json.dumps(out)  # the credential is never shown

    st = run_a_job(cli, "first-hour")
    (ref,) = st["objects"]
    assert ref.split("/")[-2] == grant.namespace  # in the context's namespace


def test_namespace_only_manifests_run_a_job_and_doctor_says_node_loss_is_degraded(
        cli: Dispatch, grants: list[Grant]) -> None:
    grant = Grant(cli, namespace_only=True)
    grants.append(grant)
    assert grant.cluster_scoped == [] and grant.runtimes == []
    as_granted(cli, grant, "client.authentication.k8s.io/v1")
    code, out = doctor(cli)
    assert code == 0, out  # a job can run: only the node-loss fence is degraded
    verdicts = {c["name"]: c["verdict"] for c in out["checks"]}
    assert verdicts["permission list nodes"] == "degraded", out
    nodes = next(c for c in out["checks"] if c["name"] == "permission list nodes")
    assert DEGRADED_NOTE in nodes["detail"] or "pods' conditions" in nodes["detail"], nodes
    denied = {(p["verb"], p["resource"]) for p in out["permissions"] if not p["allowed"]}
    assert ("list", "nodes") in denied
    run_a_job(cli, "first-hour-ns")
