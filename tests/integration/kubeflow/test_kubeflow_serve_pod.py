"""The container of `dispatch kubeflow manifests --serve` started as a kubelet would start it,
here (issue 47 item 8): its own start script, taken from the printed Deployment, run by
/bin/sh with the Secret volume it mounts laid out as a kubelet lays one out (root's links
``tokens -> ..data/tokens``, group-readable), against the stand-in API server. What a real pod
adds (the image, the service account's token, the kubelet's probes, PostgreSQL) is not run
here: a KWOK node runs no container; docs/kubeflow.md says what was and was not checked.

Checked: serve takes the team token only through the copy the script makes (the Secret's
own path is refused by --token-file's rules); /healthz, the probes' path, answers; the team
token opens the API; two replicas on one record are one active supervisor of the kubeflow
scope and one standby, and the standby takes the scope when the active one is stopped."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO

import httpx2
import pytest
import yaml
from click.testing import CliRunner
from kubeflow_support import FakeApiServer

from dispatch.backends.kubeflow.serve_manifests import TOKENS_MOUNT
from dispatch.cli import main

TEAM = "team-Kq4Vn8Ws2Jd7Lx3B"
WAIT_S = 90.0  # an upper bound for a loaded machine, never a timing assertion


def start_script() -> str:
    out = CliRunner().invoke(main, ["kubeflow", "manifests", "--serve", "--image", "x:1",
                                    "--namespace", "team"])
    assert out.exit_code == 0, out.output
    (deploy,) = [d for d in yaml.safe_load_all(out.stdout) if d["kind"] == "Deployment"]
    command = deploy["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    return str(command[2])


def secret_volume(root: Path) -> Path:
    """A Secret volume as a kubelet writes one: the file under a timestamped directory, the
    names links to it, readable by the pod's group (defaultMode 0440)."""
    data = root / "..2026_12_07_10_00_00.1"
    data.mkdir(parents=True)
    (data / "tokens").write_text(f"team:{TEAM}\n")
    os.chmod(data / "tokens", 0o440)
    (root / "..data").symlink_to(data.name)
    (root / "tokens").symlink_to("..data/tokens")
    return root


class Pod:
    def __init__(self, tmp: Path, script: str, port: int, env: dict[str, str]) -> None:
        self.port = port
        self.log_path = tmp / f"pod-{port}.log"
        self.log: IO[str] = self.log_path.open("w")
        self.proc = subprocess.Popen(["/bin/sh", "-c", script.replace("8642", str(port))],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                     cwd=tmp)

    def output(self) -> str:
        if not self.log.closed:
            self.log.flush()
        return self.log_path.read_text()

    def wait_until(self, what: str, seen: object) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if callable(seen) and seen():
                return
            if self.proc.poll() is not None:
                raise AssertionError(f"the pod's process exited {self.proc.returncode}:\n"
                                     + self.output())
            time.sleep(0.2)
        raise AssertionError(f"never {what}:\n{self.output()}")

    def healthy(self) -> bool:
        try:
            r = httpx2.get(f"http://127.0.0.1:{self.port}/healthz", timeout=5,
                           headers={"Host": f"10.0.0.9:{self.port}"})  # the pod's address
        except httpx2.TransportError:
            return False
        return r.status_code == 200 and r.text == "ok\n"

    def stop(self) -> int:
        self.proc.terminate()  # what a kubelet sends first
        try:
            return self.proc.wait(60)
        finally:
            self.log.close()


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def pod_env(fake: FakeApiServer, tmp_path: Path) -> dict[str, str]:
    sticky = tmp_path / "tmp"  # the image's /tmp: sticky, as /tmp is
    sticky.mkdir()
    os.chmod(sticky, 0o1777)
    config = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("DISPATCH_", "KUBE", "XDG_"))}
    env.update({
        "PATH": f"{Path(sys.executable).parent}:{env.get('PATH', '/usr/bin:/bin')}",
        "TMPDIR": str(sticky),
        # the pod's stand-ins: a record both replicas share, the cluster (in a pod: its
        # service account), a short directory for the Unix socket
        "DISPATCH_STORE": str(tmp_path / "record.sqlite3"),
        "DISPATCH_KUBECONFIG": str(config),
        "XDG_RUNTIME_DIR": tempfile.mkdtemp(prefix="dxp-", dir="/tmp"),
    })
    return env


def test_the_serve_container_starts_copies_its_token_and_one_replica_is_active(
        pod_env: dict[str, str], tmp_path: Path) -> None:
    secret = secret_volume(tmp_path / "secret")
    script = start_script()
    assert TOKENS_MOUNT in script
    script = script.replace(TOKENS_MOUNT, str(secret))

    # the Secret's own path: refused by --token-file (a link, not this user's private file)
    direct = subprocess.run(
        ["dispatch", "serve", "--host", "0.0.0.0", "--port", str(free_port()),
         "--token-file", str(secret / "tokens")],
        env=pod_env, capture_output=True, text=True, timeout=120)
    assert direct.returncode == 2 and "token file" in direct.stderr, direct.stderr

    first = Pod(tmp_path, script, free_port(), pod_env)
    second: Pod | None = None
    try:
        first.wait_until("healthy", first.healthy)
        api = httpx2.get(f"http://127.0.0.1:{first.port}/api/jobs", timeout=60,
                         headers={"Authorization": f"Bearer {TEAM}"})
        assert api.status_code == 200, api.text
        # the cluster's scope: the stand-in's kube-system UID and the context's namespace
        active = re.compile(r"^active for: (kubeflow:uid-[0-9a-f]{12}/team) \(epoch", re.M)
        first.wait_until("active", lambda: active.search(first.output()) is not None)
        match = active.search(first.output())
        assert match is not None
        scope = match.group(1)

        second = Pod(tmp_path, script, free_port(), pod_env)
        second.wait_until("healthy", second.healthy)
        second.wait_until("standby", lambda: f"standby for: {scope} (active:" in
                          second.output())  # type: ignore[union-attr]
        assert active.search(second.output()) is None

        assert first.stop() == 0  # hands its leases back
        second.wait_until("active after the first stopped",
                          lambda: f"active for: {scope} (epoch" in
                          second.output())  # type: ignore[union-attr]
        for pod in (first, second):
            assert TEAM not in pod.output()
            assert "Traceback" not in pod.output()
    finally:
        for pod in (first, second):
            if pod is not None and pod.proc.poll() is None:
                pod.stop()
    # each replica's HOME was a fresh private directory under the sticky /tmp
    homes = list((tmp_path / "tmp").iterdir())
    assert len(homes) == 2
    for home in homes:
        assert oct(home.stat().st_mode & 0o777) == oct(0o700)
        assert oct((home / "tokens").stat().st_mode & 0o777) == oct(0o400)
    assert shlex.split(script)  # the script is well formed as written
