"""Where the kubeflow backend's configuration comes from, kubectl's way (issue 47 item 1):
the named file > $KUBECONFIG's files merged (first wins) > ~/.kube/config > the pod's service
account; the context DISPATCH_K8S_CONTEXT names; exec credential plugins of v1 and v1beta1
(real plugin processes printing an ExecCredential). Against the loader and the client, with
no API server (httpx's MockTransport answers where a request is made)."""

from __future__ import annotations

import json
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
import yaml

from dispatch.backends.kubeflow.client import ClientSettings, KubeClient, PodRes
from dispatch.backends.kubeflow.kubeconfig import KubeConfigError, load_kubeconfig
from dispatch.backends.registry import make_backend

V1 = "client.authentication.k8s.io/v1"
V1BETA1 = "client.authentication.k8s.io/v1beta1"


def write(path: Path, *, clusters: dict[str, str] | None = None,
          contexts: dict[str, tuple[str, str, str]] | None = None,
          users: dict[str, dict[str, Any]] | None = None, current: str | None = None) -> Path:
    """A kubeconfig: clusters name -> server, contexts name -> (cluster, user, namespace)."""
    doc: dict[str, Any] = {
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": n, "cluster": {"server": s}} for n, s in (clusters or {}).items()],
        "contexts": [{"name": n, "context": {"cluster": c, "user": u, "namespace": ns}}
                     for n, (c, u, ns) in (contexts or {}).items()],
        "users": [{"name": n, "user": u} for n, u in (users or {}).items()],
    }
    if current:
        doc["current-context"] = current
    path.write_text(yaml.safe_dump(doc))
    path.chmod(0o600)
    return path


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    """An environment with no configuration in it: HOME is an empty directory."""
    (tmp_path / "home").mkdir()
    return {"HOME": str(tmp_path / "home")}


@pytest.fixture
def two(tmp_path: Path) -> tuple[Path, Path]:
    """a and b both define cluster ``shared`` and user ``u``; each has a context and a
    current-context of its own."""
    a = write(tmp_path / "a", clusters={"shared": "https://a.example:6443"},
              contexts={"ctx-a": ("shared", "u", "ns-a")},
              users={"u": {"token": "token-a"}}, current="ctx-a")
    b = write(tmp_path / "b", clusters={"shared": "https://b.example:6443",
                                        "only-b": "https://only-b.example:6443"},
              contexts={"ctx-b": ("only-b", "u", "ns-b"), "ctx-a": ("only-b", "u", "ns-x")},
              users={"u": {"token": "token-b"}}, current="ctx-b")
    return a, b


def test_KUBECONFIG_files_merge_first_file_wins(two: tuple[Path, Path], env: dict[str, str],
                                                tmp_path: Path) -> None:
    a, b = two
    env["KUBECONFIG"] = f"{tmp_path / 'absent'}:{a}:{b}"  # a missing file is skipped
    cfg = load_kubeconfig(None, None, env=env)
    # a's current-context, a's context of that name, a's cluster and user
    assert (cfg.context_name, cfg.namespace) == ("ctx-a", "ns-a")
    assert cfg.cluster.server == "https://a.example:6443"
    assert cfg.user is not None and cfg.user.token == "token-a"
    assert cfg.fname == a
    # b's own context is there too; its user "u" is a's (the first to define it)
    cfg = load_kubeconfig(None, "ctx-b", env=env)
    assert (cfg.namespace, cfg.cluster.server) == ("ns-b", "https://only-b.example:6443")
    assert cfg.user is not None and cfg.user.token == "token-a"
    assert cfg.fname == b
    # the other order: b first
    env["KUBECONFIG"] = f"{b}:{a}"
    cfg = load_kubeconfig(None, None, env=env)
    assert (cfg.context_name, cfg.namespace, cfg.user.token if cfg.user else None) == (
        "ctx-b", "ns-b", "token-b")


def test_the_context_is_chosen_by_DISPATCH_K8S_CONTEXT(
        two: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    a, b = two
    monkeypatch.delenv("DISPATCH_KUBECONFIG", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("KUBECONFIG", f"{a}:{b}")
    monkeypatch.setenv("DISPATCH_K8S_CONTEXT", "ctx-b")
    backend = make_backend("kubeflow")  # the registry passes the context through
    try:
        assert backend.kube.default_namespace == "ns-b"  # type: ignore[attr-defined]
    finally:
        backend.close()
    monkeypatch.setenv("DISPATCH_K8S_CONTEXT", "nope")
    with pytest.raises(KubeConfigError, match=r"DISPATCH_K8S_CONTEXT 'nope' is no context "
                                              r"there \(contexts: ctx-a, ctx-b\)"):
        make_backend("kubeflow").kube  # type: ignore[attr-defined]  # noqa: B018


def test_the_precedence_is_kubectls(two: tuple[Path, Path], env: dict[str, str],
                                    tmp_path: Path) -> None:
    a, b = two
    env.update(KUBERNETES_SERVICE_HOST="10.0.0.1", KUBERNETES_SERVICE_PORT="443",
               KUBECONFIG=str(b))
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("sa-token")
    (sa / "namespace").write_text("ns-sa")
    # in a pod, KUBECONFIG still comes first (it was ignored there)
    assert load_kubeconfig(None, None, str(sa), env).namespace == "ns-b"
    # the named file over KUBECONFIG
    assert load_kubeconfig(str(a), None, str(sa), env).namespace == "ns-a"
    # KUBECONFIG unset: ~/.kube/config, then the service account
    del env["KUBECONFIG"]
    kube = Path(env["HOME"]) / ".kube"
    kube.mkdir()
    write(kube / "config", clusters={"c": "https://home:6443"},
          contexts={"home": ("c", "", "ns-home")}, current="home")
    assert load_kubeconfig(None, None, str(sa), env).namespace == "ns-home"
    (kube / "config").unlink()
    assert load_kubeconfig(None, None, str(sa), env).namespace == "ns-sa"
    # KUBECONFIG naming only files that are not there: the pod's account too, as kubectl
    env["KUBECONFIG"] = str(tmp_path / "absent")
    assert load_kubeconfig(None, None, str(sa), env).namespace == "ns-sa"
    with pytest.raises(KubeConfigError, match="context 'ctx-a' is asked for, but there is no "
                                              "kubeconfig"):
        load_kubeconfig(None, "ctx-a", str(sa), env)
    del env["KUBERNETES_SERVICE_HOST"]
    with pytest.raises(KubeConfigError, match=r"no Kubernetes configuration: no file "
                                              r"KUBECONFIG names exists \(.*absent\)"):
        load_kubeconfig(None, None, str(sa), env)
    # Issue 47 item 7: nothing at all says how to name one (both variables) and its context.
    del env["KUBECONFIG"]
    with pytest.raises(KubeConfigError) as err:
        load_kubeconfig(None, None, str(sa), env)
    assert "KUBECONFIG is unset and" in str(err.value)
    for variable in ("DISPATCH_KUBECONFIG", "KUBECONFIG", "DISPATCH_K8S_CONTEXT"):
        assert variable in str(err.value).split("; ", 1)[1], err.value
    env["KUBECONFIG"] = str(tmp_path / "absent")
    with pytest.raises(KubeConfigError, match=r"kubeconfig .*absent does not exist"):
        load_kubeconfig(str(tmp_path / "absent"), None, str(sa), env)


def test_every_file_in_KUBECONFIG_must_be_trusted(two: tuple[Path, Path],
                                                  env: dict[str, str]) -> None:
    a, b = two
    b.chmod(0o666)  # a's context would do, but b is read too
    env["KUBECONFIG"] = f"{a}:{b}"
    with pytest.raises(KubeConfigError, match=rf"kubeconfig {b}: writable by group or others"):
        load_kubeconfig(None, None, env=env)


def test_a_context_naming_what_no_file_defines_is_named(tmp_path: Path,
                                                        env: dict[str, str]) -> None:
    path = write(tmp_path / "c", contexts={"x": ("gone", "", "n")}, current="x")
    with pytest.raises(KubeConfigError, match="context 'x' names cluster 'gone', which none"):
        load_kubeconfig(str(path), None, env=env)
    path = write(tmp_path / "d", clusters={"c": "https://h"}, contexts={"x": ("c", "", "n")})
    with pytest.raises(KubeConfigError, match="no current-context, and DISPATCH_K8S_CONTEXT "
                                              "is unset"):
        load_kubeconfig(str(path), None, env=env)


def plugin(tmp: Path, version: str, expires: str | None = None) -> Path:
    """A credential plugin: records each run (its KUBERNETES_EXEC_INFO and argv), prints an
    ExecCredential of ``version`` whose token counts the runs."""
    path = tmp / "plugin"
    status = {"token": "TOKEN"} | ({"expirationTimestamp": expires} if expires else {})
    path.write_text(
        f"#!{sys.executable}\n"
        "import json, os, sys, pathlib\n"
        f"log = pathlib.Path({str(tmp / 'runs')!r})\n"
        "runs = log.read_text().splitlines() if log.exists() else []\n"
        "runs.append(json.dumps([os.environ.get('KUBERNETES_EXEC_INFO'), sys.argv[1:],\n"
        "                        os.environ.get('FROM_KUBECONFIG')]))\n"
        "log.write_text('\\n'.join(runs) + '\\n')\n"
        f"status = {status!r}\n"
        "status['token'] = f'token-{len(runs)}'\n"
        f"print(json.dumps({{'apiVersion': {version!r}, 'kind': 'ExecCredential', "
        "'status': status}))\n")
    path.chmod(0o755)
    return path


def runs(tmp: Path) -> list[Any]:
    log = tmp / "runs"
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def exec_kubeconfig(tmp: Path, version: str, command: str) -> Path:
    return write(tmp / "config", clusters={"c": "https://api.example:6443"},
                 contexts={"x": ("c", "u", "ns")}, current="x",
                 users={"u": {"exec": {"apiVersion": version, "command": command,
                                       "args": ["--flag"],
                                       "env": [{"name": "FROM_KUBECONFIG", "value": "yes"}]}}})


def serve(client: KubeClient, seen: list[str], codes: list[int]) -> None:
    """Answer the client's requests here: each code of ``codes`` in turn, then 200; each
    request's Authorization header goes to ``seen``."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.headers["Authorization"])
        code = codes.pop(0) if codes else 200
        return httpx2.Response(code, json={"kind": "List", "items": [],
                                           "metadata": {"resourceVersion": "1"}})

    http = client._client._client._client
    http._transport = httpx2.MockTransport(handler)


@pytest.mark.parametrize("version", [V1, V1BETA1])
def test_an_exec_plugin_of_each_version_gives_the_token(tmp_path: Path, version: str,
                                                        env: dict[str, str]) -> None:
    path = exec_kubeconfig(tmp_path, version, str(plugin(tmp_path, version)))
    client = KubeClient(ClientSettings(kubeconfig=str(path), retries=0))
    assert runs(tmp_path) == []  # building the client runs nothing
    seen: list[str] = []
    serve(client, seen, [])
    client.list(PodRes, "ns", {})
    client.list(PodRes, "ns", {})
    client.close()
    assert seen == ["Bearer token-1"] * 2
    info = json.loads(runs(tmp_path)[0][0])
    assert info == {"apiVersion": version, "kind": "ExecCredential",
                    "spec": {"interactive": False}}
    assert runs(tmp_path)[0][1:] == [["--flag"], "yes"]
    assert len(runs(tmp_path)) == 1  # the token is kept


def test_an_expired_or_refused_token_runs_the_plugin_again(tmp_path: Path) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    path = exec_kubeconfig(tmp_path, V1, str(plugin(tmp_path, V1, expires=past)))
    client = KubeClient(ClientSettings(kubeconfig=str(path), retries=0))
    seen: list[str] = []
    serve(client, seen, [])
    client.list(PodRes, "ns", {})
    client.list(PodRes, "ns", {})  # expired: asked again
    assert seen == ["Bearer token-1", "Bearer token-2"]
    client.close()

    later = tmp_path / "later"
    later.mkdir()
    future = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    path = exec_kubeconfig(later, V1, str(plugin(later, V1, expires=future)))
    client = KubeClient(ClientSettings(kubeconfig=str(path), retries=0))
    seen = []
    serve(client, seen, [])
    client.list(PodRes, "ns", {})
    client.list(PodRes, "ns", {})  # not expired yet: kept
    assert seen == ["Bearer token-1"] * 2
    client.close()

    fresh = tmp_path / "fresh"
    fresh.mkdir()
    path = exec_kubeconfig(fresh, V1, str(plugin(fresh, V1)))
    client = KubeClient(ClientSettings(kubeconfig=str(path), retries=0))
    seen = []
    serve(client, seen, [])
    client.list(PodRes, "ns", {})
    serve(client, seen, [401])  # revoked: the next request is refused once, then retried
    client.list(PodRes, "ns", {})
    assert seen == [
        "Bearer token-1", "Bearer token-1", "Bearer token-2"]
    client.close()


def test_a_plugin_that_fails_or_answers_another_version_is_named(tmp_path: Path) -> None:
    other = exec_kubeconfig(tmp_path, V1, str(plugin(tmp_path, V1BETA1)))
    client = KubeClient(ClientSettings(kubeconfig=str(other), retries=0))
    serve(client, [], [])
    with pytest.raises(KubeConfigError, match=rf"user u: exec plugin .*plugin: printed an "
                                              rf"ExecCredential of '{V1BETA1}', but the "
                                              rf"kubeconfig asks for '{V1}'"):
        client.list(PodRes, "ns", {})
    client.close()
    failing = tmp_path / "failing"
    failing.write_text("#!/bin/sh\necho 'log in first' >&2\nexit 3\n")
    failing.chmod(0o755)
    path = exec_kubeconfig(tmp_path, V1, str(failing))
    client = KubeClient(ClientSettings(kubeconfig=str(path), retries=0))
    serve(client, [], [])
    with pytest.raises(KubeConfigError, match="exited 3: log in first"):
        client.list(PodRes, "ns", {})
    client.close()
    old = exec_kubeconfig(tmp_path, "client.authentication.k8s.io/v1alpha1", str(failing))
    with pytest.raises(KubeConfigError, match=r"context x: user u: exec plugin apiVersion "
                                              r"'client.authentication.k8s.io/v1alpha1' is not"):
        KubeClient(ClientSettings(kubeconfig=str(old)))


def test_relative_file_names_in_a_kubeconfig_are_its_directorys(tmp_path: Path,
                                                                 env: dict[str, str]) -> None:
    sub = tmp_path / "sub"
    sub.mkdir()
    path = write(sub / "config", clusters={"c": "https://h"},
                 contexts={"x": ("c", "u", "n")}, current="x",
                 users={"u": {"exec": {"apiVersion": V1, "command": "./bin/plugin"},
                              "tokenFile": "token"}})
    cfg = load_kubeconfig(str(path), None, env=env)
    assert cfg.user is not None and cfg.user.exec is not None
    assert cfg.user.exec.command == f"{sub}/bin/plugin"
    assert cfg.user.token_file == f"{sub}/token"
