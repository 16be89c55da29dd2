"""Which configuration dispatch says it uses (issue 47 item 1): the kubeconfig file(s) merged,
the context, the cluster with its server and the user by name, from real kubeconfig files
(several files, several contexts, an exec plugin) in a temporary directory; never a token,
a client key, a password in the server's URL, nor anything an exec plugin prints (no plugin
is run to say it). And the spec's ``kubeflow.context``: checked before anything is recorded."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from dispatch.backends.kubeflow.kubeconfig import KubeConfigError
from dispatch.backends.kubeflow.origin import (
    check_context,
    config_origin,
    origin_from_env,
    shown_server,
)
from dispatch.backends.kubeflow.section import KubeflowSpecError, parse_section
from dispatch.core.spec import SpecError

SECRETS = ("token-of-alice", "pass-of-bob", "client-key-bytes", "exec-secret", "url-password")


def write(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Config", **doc}))
    path.chmod(0o600)
    return path


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """Two kubeconfig files, three contexts: ``dev`` (file a, token user), ``prod`` (file b,
    an exec-plugin user whose plugin prints a token and leaves a mark when it runs) and
    ``basic`` (file b, a password user, a server URL carrying a password)."""
    plugin = tmp_path / "plugin"
    plugin.write_text(f"#!{sys.executable}\nimport pathlib, json\n"
                      f"pathlib.Path({str(tmp_path / 'ran')!r}).write_text('ran')\n"
                      "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
                      "'kind': 'ExecCredential', 'status': {'token': 'exec-secret'}}))\n")
    plugin.chmod(0o755)
    a = write(tmp_path / "a.yaml", {
        "clusters": [{"name": "dev-cluster", "cluster": {"server": "https://dev.example:6443"}}],
        "users": [{"name": "alice", "user": {"token": "token-of-alice"}}],
        "contexts": [{"name": "dev", "context": {"cluster": "dev-cluster", "user": "alice",
                                                "namespace": "team-a"}}],
        "current-context": "dev"})
    b = write(tmp_path / "b.yaml", {
        "clusters": [
            {"name": "prod-cluster", "cluster": {"server": "https://prod.example"}},
            {"name": "old", "cluster": {
                "server": "https://bob:url-password@old.example:8443/k8s?x=url-password"}}],
        "users": [
            {"name": "sso", "user": {"exec": {
                "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
                "interactiveMode": "Never"}}},
            {"name": "bob", "user": {"username": "bob", "password": "pass-of-bob",
                                     "client-key-data": "Y2xpZW50LWtleS1ieXRlcw=="}}],
        "contexts": [
            {"name": "prod", "context": {"cluster": "prod-cluster", "user": "sso",
                                         "namespace": "ml"}},
            {"name": "basic", "context": {"cluster": "old", "user": "bob"}}],
        "current-context": "prod"})
    return a, b, plugin


def env_of(tmp_path: Path, **more: str) -> dict[str, str]:
    (tmp_path / "home").mkdir(exist_ok=True)
    return {"HOME": str(tmp_path / "home"), **more}


def no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text, (secret, text)


def test_merged_files_the_current_context_of_the_first(
        files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    a, b, _ = files
    origin = origin_from_env(env_of(tmp_path, KUBECONFIG=f"{a}:{b}"))
    assert origin.files == (a, b)
    assert (origin.context, origin.cluster, origin.user, origin.namespace) == (
        "dev", "dev-cluster", "alice", "team-a")
    assert origin.server == "https://dev.example:6443"
    text = origin.text()
    assert text == (f"kubeconfig files {a}, {b}; context dev (from {a}); cluster dev-cluster "
                    "(https://dev.example:6443); user alice; namespace team-a")
    no_secret(text)
    no_secret(repr(origin.as_json()))


def test_the_context_DISPATCH_K8S_CONTEXT_names_and_its_exec_plugin_not_run(
        files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    a, b, _ = files
    origin = origin_from_env(env_of(tmp_path, KUBECONFIG=f"{a}:{b}",
                                    DISPATCH_K8S_CONTEXT="prod",
                                    DISPATCH_K8S_NAMESPACE="watched-too"))
    # the namespace is the context's: where a TrainJob goes when its spec names none
    assert (origin.context, origin.cluster, origin.user, origin.server, origin.namespace) == (
        "prod", "prod-cluster", "sso", "https://prod.example", "ml")
    assert f"context prod (from {b})" in origin.text()
    no_secret(origin.text())
    assert not (tmp_path / "ran").exists()  # saying where is no reason to run the plugin


def test_a_password_user_and_a_password_in_the_server_url_are_not_shown(
        files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    _, b, _ = files
    origin = origin_from_env(env_of(tmp_path, DISPATCH_KUBECONFIG=str(b),
                                    DISPATCH_K8S_CONTEXT="basic"))
    assert origin.files == (b,)
    assert origin.text() == (f"kubeconfig {b}; context basic; cluster old "
                             "(https://old.example:8443/k8s); user bob; namespace default")
    no_secret(origin.text())


@pytest.mark.parametrize(("url", "shown"), [
    ("https://u:p@h.example:6443/x?token=p#p", "https://h.example:6443/x"),
    ("https://[fd00::1]:6443", "https://[fd00::1]:6443"),
    ("not a url", "(an unreadable URL)"),
    ("https://h:notaport", "(an unreadable URL)"),
])
def test_shown_server(url: str, shown: str) -> None:
    assert shown_server(url) == shown


def test_the_pods_service_account(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token-value")
    (sa / "namespace").write_text("dispatch")
    env = env_of(tmp_path, KUBERNETES_SERVICE_HOST="10.0.0.1", KUBERNETES_SERVICE_PORT="443")
    _, origin = config_origin(None, None, str(sa), env)
    assert origin.in_cluster and origin.files == ()
    assert "the pod's service account" in origin.text()
    assert "https://10.0.0.1:443" in origin.text() and "namespace dispatch" in origin.text()
    assert "sa-token-value" not in origin.text()


def test_an_unknown_context_names_the_files_and_the_contexts(
        files: tuple[Path, Path, Path], tmp_path: Path) -> None:
    a, b, _ = files
    with pytest.raises(KubeConfigError, match=r"'staging' is no context there \(contexts: "
                                              r"basic, dev, prod\)"):
        origin_from_env(env_of(tmp_path, KUBECONFIG=f"{a}:{b}",
                               DISPATCH_K8S_CONTEXT="staging"))


# -- the spec's kubeflow.context -------------------------------------------------------------

def test_the_spec_context_is_checked_against_the_one_in_use(
        files: tuple[Path, Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, _ = files
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    check_context(None, None, None)  # none asked: any context does
    check_context("dev", None, None)  # the current-context
    check_context("prod", None, "prod")  # the one DISPATCH_K8S_CONTEXT names
    with pytest.raises(SpecError) as err:
        check_context("prod", None, None)
    assert err.value.where == "kubeflow.context"
    assert "meant for context 'prod'" in str(err.value) and "context 'dev'" in str(err.value)
    assert "DISPATCH_K8S_CONTEXT=prod" in str(err.value)
    assert not (tmp_path / "ran").exists()


def test_the_spec_context_in_a_pod_without_kubeconfig_is_refused(tmp_path: Path) -> None:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("t")
    (sa / "namespace").write_text("dispatch")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HOME", str(tmp_path))
        mp.delenv("KUBECONFIG", raising=False)
        mp.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
        mp.setenv("KUBERNETES_SERVICE_PORT", "443")
        with pytest.raises(KubeConfigError, match="only its service account"):
            check_context("dev", None, "dev", str(sa))
        with pytest.raises(SpecError, match="the pod's service account"):
            check_context("dev", None, None, str(sa))


@pytest.mark.parametrize("name", [
    "dev", "arn:aws:eks:us-west-2:123456789012:cluster/ml", "gke_proj_europe-west4_ml",
    "kind-kind", "user@cluster"])
def test_a_context_name_kubectl_takes_is_taken(name: str) -> None:
    assert parse_section({"runtime": "r", "context": name}).context == name


@pytest.mark.parametrize("name", ["", " dev", "dev\n", "a\x1bb", "x" * 1025])
def test_a_context_name_no_kubeconfig_can_hold_is_refused(name: str) -> None:
    with pytest.raises(KubeflowSpecError, match=r"kubeflow.context: .* is not a context's name"):
        parse_section({"runtime": "r", "context": name})
