"""A kubeconfig dispatch must not act on, through the real CLI (`dispatch submit` of a kubeflow
spec is what loads it): one another user could have written or chosen (issue 45 item 2), and
one that is malformed (item 7). Each is exit 2, one line naming the file and what is wrong,
no traceback, and no exec plugin run.

Another user is ``nobody`` (uid 65534): the tests run as root, which can chown to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from kubeflow_support import FakeApiServer

NOBODY = 65534
SPEC = """\
name: kubeconfig-check
backend: kubeflow
nodes: 1
command: ["true"]
kubeflow:
  runtime: torch-distributed
"""

pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root to chown to nobody")


def plugin(tmp: Path, api_version: str = "client.authentication.k8s.io/v1beta1") -> Path:
    """An exec credential plugin that leaves a marker file when it runs."""
    path = tmp / "plugin"
    path.write_text(f"#!{sys.executable}\n"
                    "import json, pathlib\n"
                    f"pathlib.Path({str(tmp / 'plugin-ran')!r}).write_text('ran')\n"
                    f"print(json.dumps({{'apiVersion': {api_version!r}, "
                    "'kind': 'ExecCredential', 'status': {'token': 'from-plugin'}}))\n")
    path.chmod(0o755)
    return path


def kubeconfig(path: Path, server: str, command: Path) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"exec": {
            "apiVersion": "client.authentication.k8s.io/v1beta1", "command": str(command)}}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    }))
    path.chmod(0o600)
    return path


def submit(tmp: Path, **env: str) -> subprocess.CompletedProcess[str]:
    spec = tmp / "spec.yaml"
    spec.write_text(SPEC)
    full = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "DISPATCH_KUBECONFIG", "KUBERNETES_SERVICE_HOST")}
    full.update({"DISPATCH_STORE": str(tmp / "record.sqlite3"), "HOME": str(tmp / "home"),
                 "XDG_STATE_HOME": str(tmp / "state"), **env})
    return subprocess.run([sys.executable, "-m", "dispatch.cli", "submit", str(spec)],
                          env=full, cwd=tmp, text=True, capture_output=True, timeout=120)


def refused(tmp: Path, path: Path, variable: str = "DISPATCH_KUBECONFIG") -> str:
    done = submit(tmp, **{variable: str(path)})
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    assert done.stderr.startswith(f"error: kubeconfig {path}"), done.stderr
    assert not (tmp / "plugin-ran").exists(), "the exec plugin ran"
    return done.stderr


def test_a_kubeconfig_of_ours_runs_its_plugin(fake: FakeApiServer, tmp_path: Path) -> None:
    """The control: the same kubeconfig, trusted, is used and its plugin runs (so the
    refusals below are the trust rule's, not a plugin that could never have run)."""
    path = kubeconfig(tmp_path / "config", fake.url, plugin(tmp_path))
    done = submit(tmp_path, DISPATCH_KUBECONFIG=str(path))
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "plugin-ran").read_text() == "ran"


def test_a_kubeconfig_others_can_write_is_refused(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", "https://127.0.0.1:1", plugin(tmp_path))
    path.chmod(0o666)
    err = refused(tmp_path, path)
    assert "writable by group or others (mode 666)" in err and f"chmod go-w {path}" in err


def test_a_kubeconfig_named_in_KUBECONFIG_is_refused_the_same(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", "https://127.0.0.1:1", plugin(tmp_path))
    path.chmod(0o666)
    assert "writable by group or others" in refused(tmp_path, path, "KUBECONFIG")


def test_a_kubeconfig_of_another_user_is_refused(tmp_path: Path) -> None:
    path = kubeconfig(tmp_path / "config", "https://127.0.0.1:1", plugin(tmp_path))
    os.chown(path, NOBODY, NOBODY)
    assert f"owned by uid {NOBODY}, not by this user (root)" in refused(tmp_path, path)


def test_another_users_link_to_our_kubeconfig_is_refused(tmp_path: Path) -> None:
    target = kubeconfig(tmp_path / "config", "https://127.0.0.1:1", plugin(tmp_path))
    link = tmp_path / "link"
    link.symlink_to(target)
    os.lchown(link, NOBODY, NOBODY)
    err = refused(tmp_path, link)
    assert f"the symbolic link {link} belongs to uid {NOBODY}" in err


def test_a_kubeconfig_in_a_directory_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    path = kubeconfig(shared / "config", "https://127.0.0.1:1", plugin(tmp_path))
    shared.chmod(0o777)
    err = refused(tmp_path, path)
    assert f"the directory {shared} can be written by everybody and is not sticky (mode 777)" \
        in err and f"chmod go-w {shared}" in err
    shared.chmod(0o755)
    os.chown(shared, NOBODY, NOBODY)
    assert f"the directory {shared} is owned by another user (uid {NOBODY})" in refused(
        tmp_path, path)


def _b64_text(path: Path) -> None:
    import base64

    path.write_bytes(base64.b64encode(os.urandom(3_000_000)))  # 4 MB of base64


MALFORMED: dict[str, tuple[Callable[[Path], object], str]] = {
    "yaml-error": (lambda p: p.write_text("clusters: [\n"), "not valid YAML: "),
    "a-list": (lambda p: p.write_text("- 1\n- 2\n"), "holds a list (2 items), not a kubeconfig"),
    "plain-text": (lambda p: p.write_text("hello world\n"), "holds text (11 characters"),
    "empty": (lambda p: p.write_text(""), "empty; a kubeconfig is a mapping"),
    "clusters-5": (lambda p: p.write_text("clusters: 5\n"),
                   "clusters: expected a list of {name: ..., cluster: {...}}, got a number (5)"),
    "4MB-base64": (_b64_text, "holds text (4000000 characters"),
    "not-utf8": (lambda p: p.write_bytes(b"\xff\xfe\x00garbage"), "not UTF-8 text (byte 0)"),
    "server-a-number": (lambda p: p.write_text(
        "clusters: [{name: c, cluster: {server: 5}}]\n"), "clusters[0].cluster.server (c): "
        "Expected `str`, got `int`"),
    "a-context-without-mapping": (lambda p: p.write_text(
        "contexts: [{name: x, context: 7}]\n"),
        "contexts[0].context (x): expected a mapping, got a number (7)"),
    "cert-data-not-base64": (lambda p: p.write_text(
        "clusters: [{name: c, cluster: {server: 'https://h', certificate-authority-data: '@@'}}]"
        "\n"), "clusters[0].cluster.certificate-authority-data (c): not base64"),
    "over-4MiB": (lambda p: p.write_text("# " + "x" * (4 << 20) + "\n"), "over 4 MiB"),
}


@pytest.mark.parametrize("shape", sorted(MALFORMED))
def test_a_malformed_kubeconfig_is_exit_2_naming_it(tmp_path: Path, shape: str) -> None:
    write, words = MALFORMED[shape]
    path = tmp_path / "config"
    write(path)
    err = refused(tmp_path, path)
    assert words in err, err
