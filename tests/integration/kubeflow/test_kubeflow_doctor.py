"""`dispatch doctor --backend kubeflow` against the stand-in API server: the configuration
it used, /version, the TrainJob and JobSet APIs, the runtime and its native restarts, and every
permission as a SelfSubjectAccessReview, denied ones driven by the test."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from kubeflow_support import FakeApiServer

from dispatch.backends.kubeflow.manifests import runtime
from dispatch.backends.kubeflow.permissions import PERMISSIONS
from dispatch.cli import main


def run_doctor(fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
               *args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team")
    monkeypatch.setenv("DISPATCH_KUBECONFIG", str(kubeconfig))
    monkeypatch.delenv("DISPATCH_K8S_NAMESPACE", raising=False)
    monkeypatch.delenv("DISPATCH_K8S_CONTEXT", raising=False)
    r = CliRunner().invoke(main, ["doctor", "--backend", "kubeflow", "--json", *args])
    return r.exit_code, json.loads(r.stdout)


def verdicts(out: dict) -> dict[str, str]:  # type: ignore[type-arg]
    return {c["name"]: c["verdict"] for c in out["checks"]}


def test_a_ready_cluster_passes_every_check(fake: FakeApiServer, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    fake.put(runtime())
    code, out = run_doctor(fake, tmp_path, monkeypatch, "--runtime", "dispatch-torch")
    assert code == 0, out
    assert out["ok"] is True and out["namespace"] == "team"
    v = verdicts(out)
    assert set(v.values()) == {"ok"}, out
    where = next(c for c in out["checks"] if c["name"] == "configuration")["detail"]
    assert "kubeconfig" in where and "context fake" in where and "user fake" in where
    assert "v1.31.0-stand-in" in next(c for c in out["checks"]
                                      if c["name"] == "API server")["detail"]
    assert len(out["permissions"]) == len(PERMISSIONS)
    assert all(p["allowed"] for p in out["permissions"])


def test_a_missing_runtime_and_a_denied_create_fail(fake: FakeApiServer, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    fake.denied = {("create", "trainer.kubeflow.org", "trainjobs")}
    code, out = run_doctor(fake, tmp_path, monkeypatch, "--runtime", "no-such")
    assert code == 1
    v = verdicts(out)
    assert v["runtime ClusterTrainingRuntime no-such"] == "problem"
    assert v["permission create trainjobs.trainer.kubeflow.org"] == "problem"
    denied = [p for p in out["permissions"] if not p["allowed"]]
    assert [(p["verb"], p["resource"]) for p in denied] == [("create", "trainjobs")]
    fix = next(c["fix"] for c in out["checks"] if c["name"].startswith("permission create"))
    assert "trainjobs" in fix and "verbs: [create]" in fix and "namespace team" in fix


def test_nodes_denied_is_degraded_said_and_still_ready(
        fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake.denied = {("list", "", "nodes"), ("watch", "", "nodes")}
    code, out = run_doctor(fake, tmp_path, monkeypatch)
    assert code == 0, out
    nodes = next(c for c in out["checks"] if c["name"] == "permission list nodes")
    assert nodes["verdict"] == "degraded"
    assert "pods' conditions" in nodes["detail"] and "ClusterRole" in nodes["fix"]
    assert verdicts(out)["runtime"] == "skipped"


def test_the_scope_names_the_cluster_and_a_denied_kube_system_read_is_said(
        fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code, out = run_doctor(fake, tmp_path, monkeypatch)
    scope = next(c for c in out["checks"] if c["name"] == "scope")
    uid = fake.cluster_uid.replace("-", "")[:12]
    assert scope["verdict"] == "ok", scope
    assert scope["detail"].startswith(f"kubeflow:uid-{uid}/team (context fake, cluster fake")
    review = next(p for p in out["permissions"] if p["resource"] == "namespaces")
    assert review["allowed"] and review["cluster"], review
    # a namespace-only identity, and a kubeconfig without a CA: no scope can be told
    fake.denied = {("get", "", "namespaces")}
    code, out = run_doctor(fake, tmp_path, monkeypatch)
    assert code == 1, out
    scope = next(c for c in out["checks"] if c["name"] == "scope")
    assert scope["verdict"] == "problem" and "names no CA" in scope["detail"], scope
    assert "namespaces/kube-system" in scope["fix"]
    perm = next(c for c in out["checks"] if c["name"] == "permission get namespaces")
    assert perm["verdict"] == "degraded" and "kube-system UID" in perm["detail"], perm
    assert "resourceNames: [kube-system]" in perm["fix"]


def test_a_runtime_with_native_restarts_on_is_said(
        fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rt = runtime("stock")
    job = rt["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"]
    del job["backoffLimit"]
    del job["template"]["spec"]["restartPolicy"]
    fake.put(rt)
    code, out = run_doctor(fake, tmp_path, monkeypatch, "--runtime", "stock")
    check = next(c for c in out["checks"] if c["name"].startswith("runtime"))
    assert check["verdict"] == "degraded"
    assert "backoffLimit" in check["detail"] and "OnFailure" in check["detail"]
    assert "not counted against the policy's rules" in check["detail"]
    assert code == 0


def test_no_trainer_api_and_no_server(fake: FakeApiServer, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fake.api_groups = {"jobset.x-k8s.io": ["v1alpha1"]}
    code, out = run_doctor(fake, tmp_path, monkeypatch)
    v = verdicts(out)
    assert code == 1
    assert v["TrainJob API (trainer.kubeflow.org/v1alpha1)"] == "problem"
    assert v["JobSet API (jobset.x-k8s.io/v1alpha2)"] == "problem"
    fake.stop()
    code, out = run_doctor(fake, tmp_path, monkeypatch)
    assert code == 1
    assert verdicts(out)["API server"] == "problem"
    assert "permissions" in out and out["permissions"] == []


def test_the_human_table(fake: FakeApiServer, tmp_path: Path,
                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake.denied = {("get", "", "pods/log")}
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team")
    monkeypatch.setenv("DISPATCH_KUBECONFIG", str(kubeconfig))
    r = CliRunner().invoke(main, ["doctor", "--backend", "kubeflow"])
    assert r.exit_code == 0, r.output
    assert "DEGRADED  permission get pods/log" in r.output
    row = next(line for line in r.output.splitlines() if line.startswith("get     pods/log"))
    assert row.endswith("denied (degraded)")
    assert "ready: a job can run" in r.output


def test_manifests_print_what_to_apply() -> None:
    import yaml

    r = CliRunner().invoke(main, ["kubeflow", "manifests", "--namespace", "ml",
                                  "--service-account", "runner"])
    assert r.exit_code == 0, r.output
    docs = list(yaml.safe_load_all(r.stdout))
    assert [d["kind"] for d in docs] == ["ServiceAccount", "Role", "RoleBinding", "ClusterRole",
                                         "ClusterRoleBinding", "ClusterTrainingRuntime"]
    r = CliRunner().invoke(main, ["kubeflow", "manifests", "--namespace-only", "--user", "u"])
    assert "node" in r.stdout.splitlines()[1] and "pods' conditions" in r.stdout
    assert [d["kind"] for d in yaml.safe_load_all(r.stdout)] == ["Role", "RoleBinding"]
    r = CliRunner().invoke(main, ["kubeflow", "manifests", "--runtime-only"])
    assert [d["kind"] for d in yaml.safe_load_all(r.stdout)] == ["ClusterTrainingRuntime"]
    r = CliRunner().invoke(main, ["kubeflow", "manifests", "--user", "u",
                                  "--service-account", "s"])
    assert r.exit_code == 2 and "not both" in r.output


@pytest.mark.parametrize("args", [["--namespace", "Team"], ["--namespace", "a b"],
                                  ["--service-account", "x_y"], ["--user", "a\nb"]])
def test_manifests_refuse_a_bad_name(args: list[str]) -> None:
    r = CliRunner().invoke(main, ["kubeflow", "manifests", *args])
    assert r.exit_code == 2 and "is not a" in r.output and "Traceback" not in r.output


def test_the_runtime_a_spec_names(fake: FakeApiServer, tmp_path: Path,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import yaml

    fake.put(runtime("from-spec"))
    spec = tmp_path / "job.yaml"
    spec.write_text(yaml.safe_dump({"name": "t", "command": ["python", "t.py"],
                                    "backend": "kubeflow", "kubeflow": {"runtime": "from-spec"}}))
    code, out = run_doctor(fake, tmp_path, monkeypatch, "--spec", str(spec))
    assert code == 0, out
    assert verdicts(out)["runtime ClusterTrainingRuntime from-spec"] == "ok"
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"name": "t", "command": ["x"], "backend": "kubeflow",
                                   "kubeflow": {"runtime": {"nme": "x"}}}))
    r = CliRunner().invoke(main, ["doctor", "--backend", "kubeflow", "--spec", str(bad)])
    assert r.exit_code == 2 and "kubeflow" in r.output and "Traceback" not in r.output


def test_no_kubeconfig_is_a_problem_naming_where_it_looked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("DISPATCH_KUBECONFIG", "KUBECONFIG", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    r = CliRunner().invoke(main, ["doctor", "--backend", "kubeflow", "--json"])
    assert r.exit_code == 1
    (check,) = json.loads(r.stdout)["checks"]
    assert check["name"] == "configuration" and check["verdict"] == "problem"
    assert str(tmp_path / ".kube" / "config") in check["detail"]
