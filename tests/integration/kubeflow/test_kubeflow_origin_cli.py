"""What `dispatch doctor --backend kubeflow` and `dispatch status -v` say about the
configuration they used (issue 47 item 1): the kubeconfig files of KUBECONFIG (two here, with
several contexts), the context DISPATCH_K8S_CONTEXT picks, its cluster and server, its user by
name; never a token, nor what an exec plugin printed (it runs here: the requests need it). And
a spec whose ``kubeflow.context`` is not the one in use is refused before anything is
recorded."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from kubeflow_support import FakeApiServer

from dispatch.cli import main

EXEC_TOKEN = "exec-printed-secret"
FILE_TOKEN = "file-token-secret"


def kubeconfigs(tmp: Path, server: str) -> tuple[Path, Path]:
    """``first``: the current-context ``local`` (a token user) on another server; ``second``:
    the context ``work`` on ``server`` whose user ``sso`` is an exec plugin (v1) printing
    EXEC_TOKEN, and ``other``."""
    plugin = tmp / "sso-plugin"
    plugin.write_text(f"#!{sys.executable}\nimport json, pathlib\n"
                      f"pathlib.Path({str(tmp / 'plugin-ran')!r}).touch()\n"
                      "print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
                      f"'kind': 'ExecCredential', 'status': {{'token': {EXEC_TOKEN!r}}}}}))\n")
    plugin.chmod(0o755)
    first = tmp / "first.yaml"
    first.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "local",
        "clusters": [{"name": "laptop", "cluster": {"server": "https://127.0.0.1:1"}}],
        "users": [{"name": "me", "user": {"token": FILE_TOKEN}}],
        "contexts": [{"name": "local", "context": {"cluster": "laptop", "user": "me"}}]}))
    second = tmp / "second.yaml"
    second.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "work",
        "clusters": [{"name": "gpu-cluster", "cluster": {"server": server}}],
        "users": [{"name": "sso", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1", "command": str(plugin),
            "interactiveMode": "Never"}}}],
        "contexts": [{"name": "work", "context": {"cluster": "gpu-cluster", "user": "sso",
                                                 "namespace": "team"}},
                     {"name": "other", "context": {"cluster": "laptop", "user": "me"}}]}))
    for path in (first, second):
        path.chmod(0o600)
    return first, second


def no_secret(text: str) -> None:
    assert EXEC_TOKEN not in text and FILE_TOKEN not in text, text


def test_doctor_says_which_files_context_cluster_and_user(
        fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = kubeconfigs(tmp_path, fake.url)
    monkeypatch.setenv("KUBECONFIG", f"{first}:{second}")
    monkeypatch.setenv("DISPATCH_K8S_CONTEXT", "work")
    for name in ("DISPATCH_KUBECONFIG", "DISPATCH_K8S_NAMESPACE", "KUBERNETES_SERVICE_HOST"):
        monkeypatch.delenv(name, raising=False)
    shown = CliRunner().invoke(main, ["doctor", "--backend", "kubeflow"])
    assert shown.exit_code == 0, shown.output
    (where,) = [x for x in shown.output.splitlines() if "configuration:" in x]
    assert where == (f"ok        configuration: kubeconfig files {first}, {second}; context "
                     f"work (from {second}); cluster gpu-cluster ({fake.url}); user sso; "
                     "namespace team")
    no_secret(shown.output)
    # the plugin ran (its token went with the requests), and what it printed is not shown
    assert (tmp_path / "plugin-ran").exists() and fake.requests

    as_json = CliRunner().invoke(main, ["doctor", "--backend", "kubeflow", "--json"])
    out = json.loads(as_json.stdout)
    assert out["configuration"] == {
        "files": [str(first), str(second)], "context": "work", "cluster": "gpu-cluster",
        "server": fake.url, "user": "sso", "namespace": "team", "in_cluster": False}
    no_secret(as_json.stdout)


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


SPEC = """\
name: {name}
backend: kubeflow
nodes: 1
command: ["true"]
kubeflow:
  runtime: torch-distributed
  context: {context}
"""


def dispatch(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "DISPATCH_KUBECONFIG", "DISPATCH_K8S_CONTEXT",
                         "DISPATCH_K8S_NAMESPACE", "KUBERNETES_SERVICE_HOST")}
    full.update({"DISPATCH_STORE": str(tmp / "record.sqlite3"), "HOME": str(tmp / "home"),
                 "XDG_STATE_HOME": str(tmp / "state"), "DISPATCH_READ_DEADLINE": "0.5",
                 **env})
    return subprocess.run([sys.executable, "-m", "dispatch.cli", *args], env=full, cwd=tmp,
                          text=True, capture_output=True, timeout=120)


def test_status_v_says_the_configuration_and_the_spec_context_is_checked(
        tmp_path: Path) -> None:
    # nothing listens: submit records the job (exit 4), status shows the record's state
    server = f"http://127.0.0.1:{closed_port()}"
    first, second = kubeconfigs(tmp_path, server)
    env = {"KUBECONFIG": f"{first}:{second}", "DISPATCH_K8S_CONTEXT": "work"}

    (tmp_path / "elsewhere.yaml").write_text(SPEC.format(name="elsewhere", context="other"))
    refused = dispatch(tmp_path, "submit", "elsewhere.yaml", **env)
    assert refused.returncode == 2, refused.stderr
    assert "kubeflow.context" in refused.stderr and "DISPATCH_K8S_CONTEXT=other" in \
        refused.stderr, refused.stderr
    listed = dispatch(tmp_path, "ls", "--json", **env)
    assert json.loads(listed.stdout or "[]") == [], listed.stdout  # nothing recorded

    (tmp_path / "here.yaml").write_text(SPEC.format(name="here", context="work"))
    done = dispatch(tmp_path, "submit", "here.yaml", **env)
    assert done.returncode == 4, done.stderr
    (job,) = json.loads(dispatch(tmp_path, "ls", "--json", **env).stdout)

    shown = dispatch(tmp_path, "status", "-v", job["job"], **env)
    assert shown.returncode == 4, shown.stderr
    (where,) = [x for x in shown.stdout.splitlines() if "kubernetes:" in x]
    assert where.strip() == (
        f"kubernetes: kubeconfig files {first}, {second}; context work (from {second}); "
        f"cluster gpu-cluster ({server}); user sso; namespace team")
    no_secret(shown.stdout + shown.stderr)
    plain = dispatch(tmp_path, "status", job["job"], **env)
    assert "kubernetes:" not in plain.stdout  # only with -v
