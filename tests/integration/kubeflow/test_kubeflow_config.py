"""Both ways the backend finds its cluster: a kubeconfig file, or the in-cluster service
account (token, namespace and CA mounted in the pod, host and port in the environment)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from kubeflow_support import FakeApiServer

from dispatch.backends.kubeflow.client import ClientSettings, KubeClient, TrainJobRes


def test_kubeconfig_from_the_environment(
    fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = fake.write_kubeconfig(tmp_path / "config", namespace="from-kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    client = KubeClient(ClientSettings(service_account_dir=str(tmp_path / "no-sa"), retries=0))
    assert client.default_namespace == "from-kubeconfig"
    assert client.list(TrainJobRes, "from-kubeconfig", {}) == []
    assert (
        fake.requests[-1].path
        == "/apis/trainer.kubeflow.org/v1alpha1/namespaces/from-kubeconfig/trainjobs"
    )
    client.close()


def test_in_cluster_service_account(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    sa = tmp_path / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "namespace").write_text("from-sa")
    subprocess.run(
        [
            "openssl",
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=stand-in-ca",
            "-keyout",
            str(tmp_path / "ca.key"),
            "-out",
            str(sa / "ca.crt"),
        ],
        check=True,
        capture_output=True,
    )
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "127.0.0.1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "6443")
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.kube/config: it would come first
    client = KubeClient(ClientSettings(service_account_dir=str(sa)))
    assert client.default_namespace == "from-sa"
    http = client._client._client._client  # lightkube Client -> generic client -> httpx client
    assert str(http.base_url).startswith("https://127.0.0.1:6443")
    client.close()
