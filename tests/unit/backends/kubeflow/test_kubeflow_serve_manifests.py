"""`dispatch kubeflow manifests --serve --image IMAGE` (issue 47 item 8): the objects for
`dispatch serve` in the cluster, after the RBAC of its service account. The output is YAML
that parses, of the kinds expected, bound together by name (the Deployment runs as the
service account the bindings grant to); the PostgreSQL URL and the tokens are Secrets named
by reference, never a value; the start script's serve flags are ones `dispatch serve` takes;
the probes ask /healthz on the container's port. Checked without a cluster
(`kubectl apply --dry-run=client` is not needed: each field is asserted here)."""

from __future__ import annotations

import shlex
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from dispatch.backends.kubeflow.serve_manifests import PORT, STORE_SECRET, TOKENS_SECRET
from dispatch.cli import main
from dispatch.cli.serve import serve

IMAGE = "ghcr.io/team/dispatch:2026.12@sha256:" + "a" * 64


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["kubeflow", "manifests", *args])


def docs_of(*args: str) -> list[dict[str, Any]]:
    out = run("--serve", "--image", IMAGE, *args)
    assert out.exit_code == 0, out.output
    return [d for d in yaml.safe_load_all(out.stdout) if d is not None]


def container(deploy: dict[str, Any]) -> dict[str, Any]:
    (c,) = deploy["spec"]["template"]["spec"]["containers"]
    return c  # type: ignore[no-any-return]


def test_the_kinds_in_apply_order_bound_to_one_service_account() -> None:
    docs = docs_of("--namespace", "ml", "--service-account", "dispatch-serve-sa")
    assert [d["kind"] for d in docs] == [
        "ServiceAccount", "Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding",
        "ClusterTrainingRuntime", "Deployment", "Service"]
    by_kind = {d["kind"]: d for d in docs}
    for kind in ("ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"):
        assert by_kind[kind]["metadata"]["namespace"] == "ml", kind
    assert by_kind["ServiceAccount"]["metadata"]["name"] == "dispatch-serve-sa"
    for binding in ("RoleBinding", "ClusterRoleBinding"):
        assert by_kind[binding]["subjects"] == [
            {"kind": "ServiceAccount", "name": "dispatch-serve-sa", "namespace": "ml"}]
    deploy = by_kind["Deployment"]
    pod = deploy["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "dispatch-serve-sa"
    assert pod["automountServiceAccountToken"] is True  # the in-cluster configuration
    assert deploy["spec"]["replicas"] == 2
    labels = deploy["spec"]["selector"]["matchLabels"]
    assert labels.items() <= deploy["spec"]["template"]["metadata"]["labels"].items()
    assert by_kind["Service"]["spec"]["selector"] == labels
    assert container(deploy)["image"] == IMAGE


def test_secrets_are_referenced_by_name_never_a_value() -> None:
    out = run("--serve", "--image", IMAGE, "--namespace", "ml")
    docs = [d for d in yaml.safe_load_all(out.stdout) if d is not None]
    assert "Secret" not in [d["kind"] for d in docs]
    c = container(next(d for d in docs if d["kind"] == "Deployment"))
    # every variable comes from a Secret by reference: none has a value written in
    assert c["env"] == [{"name": "DISPATCH_STORE", "valueFrom": {"secretKeyRef": {
        "name": STORE_SECRET, "key": "url"}}}]
    assert all("value" not in e for e in c["env"])
    volumes = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"][
        "spec"]["volumes"]
    assert volumes == [{"name": "tokens", "secret": {
        "secretName": TOKENS_SECRET, "defaultMode": 0o440,
        "items": [{"key": "tokens", "path": "tokens"}]}}]
    # nothing that looks like a credential anywhere; the header says how to make both
    for word in ("postgresql://", "password:", "token:", "Bearer"):
        assert word not in out.stdout.replace("postgresql://USER:PASSWORD@HOST/DB", ""), word
    assert f"create secret generic {STORE_SECRET}" in out.stdout
    assert f"create secret generic {TOKENS_SECRET}" in out.stdout


def test_the_start_script_runs_serve_with_flags_it_takes_on_the_probed_port() -> None:
    c = container(next(d for d in docs_of() if d["kind"] == "Deployment"))
    command = c["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    (line,) = [x for x in command[2].splitlines() if x.startswith("exec dispatch serve")]
    argv = shlex.split(line)[3:]
    ctx = serve.make_context("serve", list(argv))  # a flag serve lacks: click refuses here
    assert ctx.params["host"] == "0.0.0.0" and ctx.params["port"] == PORT
    assert ctx.params["scopes"] == ("kubeflow",)
    assert ctx.params["token_file"] == "$HOME/tokens"  # the shell expands it
    assert c["ports"] == [{"name": "http", "containerPort": PORT}]
    for probe in ("readinessProbe", "livenessProbe"):
        assert c[probe]["httpGet"] == {"path": "/healthz", "port": "http"}, probe


def test_namespace_only_keeps_no_cluster_scoped_object() -> None:
    docs = docs_of("--namespace", "ml", "--namespace-only")
    assert [d["kind"] for d in docs] == [
        "ServiceAccount", "Role", "RoleBinding", "Deployment", "Service"]


def test_without_serve_the_output_is_unchanged() -> None:
    plain = run("--namespace", "ml")
    assert plain.exit_code == 0
    assert "Deployment" not in plain.stdout and "dispatch-serve" not in plain.stdout


@pytest.mark.parametrize(("args", "words"), [
    (["--serve"], "--serve needs --image"),
    (["--image", IMAGE], "--image is for --serve"),
    (["--serve", "--image", "has space"], "--image: 'has space' is not an image reference"),
    (["--serve", "--image", ""], "is not an image reference"),
    (["--serve", "--image", IMAGE, "--user", "ann"], "runs as a service account"),
    (["--serve", "--image", IMAGE, "--runtime-only"], "--serve or --runtime-only"),
    (["--serve", "--image", IMAGE, "--namespace", "Bad_NS"], "not a namespace's name"),
])
def test_bad_options_exit_2_with_the_reason(args: list[str], words: str) -> None:
    out = run(*args)
    assert out.exit_code == 2, out.output
    assert words in out.output and "Traceback" not in out.output
