"""`dispatch submit` of a kubeflow job whose API server cannot be reached (issue 47 item 7),
through the real CLI at an address nothing listens on (127.0.0.1, a port just closed): the
job is recorded and the exit is 4, each scheduler interaction is bounded by
$DISPATCH_READ_DEADLINE (a tiny one here: the error says it was that deadline, never a
wall-clock assertion), and the reason is said once, never "kubeflow scheduler unreachable:
kubeflow scheduler unreachable: ...". A job that never reached the cluster and is then
cancelled allocated no node-time. No configuration at all names the variables that choose
one."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import yaml

SPEC = """\
name: never-created
backend: kubeflow
nodes: 1
command: ["true"]
kubeflow:
  runtime: torch-distributed
"""


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the with ends: nothing listens


def kubeconfig(path: Path, server: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u",
                                               "namespace": "team-a"}}],
        "current-context": "x",
    }))
    path.chmod(0o600)
    return path


def dispatch(tmp: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp / "spec.yaml").write_text(SPEC)
    full = {k: v for k, v in os.environ.items()
            if k not in ("KUBECONFIG", "DISPATCH_KUBECONFIG", "DISPATCH_K8S_CONTEXT",
                         "KUBERNETES_SERVICE_HOST", "DISPATCH_READ_DEADLINE")}
    full.update({"DISPATCH_STORE": str(tmp / "record.sqlite3"), "HOME": str(tmp / "home"),
                 "XDG_STATE_HOME": str(tmp / "state"), **env})
    return subprocess.run([sys.executable, "-m", "dispatch.cli", *args], env=full, cwd=tmp,
                          text=True, capture_output=True, timeout=120)


def test_an_unreachable_submit_is_bounded_by_the_read_deadline_and_said_once(
        tmp_path: Path) -> None:
    config = kubeconfig(tmp_path / "kubeconfig", f"http://127.0.0.1:{closed_port()}")
    env = {"DISPATCH_KUBECONFIG": str(config), "DISPATCH_READ_DEADLINE": "0.2"}
    done = dispatch(tmp_path, "submit", "spec.yaml", **env)
    assert done.returncode == 4, done.stderr
    assert "Traceback" not in done.stderr
    error = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1, done.stderr
    # Every retry's timeout and backoff did not run: the deadline cut them, and says so,
    # for the create (the supervisor's word) and for the read after it (the error's).
    assert "0.2s" in error[0] and "DISPATCH_READ_DEADLINE" in error[0], error
    (create,) = [line for line in done.stderr.splitlines() if "create TrainJob" in line]
    assert "no answer within the deadline (0.2s, DISPATCH_READ_DEADLINE)" in create, create
    both = done.stdout + done.stderr
    assert "scheduler unreachable: kubeflow scheduler unreachable" not in both, both
    for line in both.splitlines():
        assert line.count("scheduler unreachable") <= 1, line
        assert line.count("Connection refused") <= 1, line

    # Its caption says why the state is the record's: the refusal itself (the default
    # deadline leaves the look time to fail on its own), said once.
    table = dispatch(tmp_path, "ls", DISPATCH_KUBECONFIG=str(config))
    assert "kubeflow: scheduler unreachable: " in table.stdout, table.stdout
    for line in table.stdout.splitlines():
        assert line.count("scheduler unreachable") <= 1, line
    listed = dispatch(tmp_path, "ls", "--json", **env)
    (job,) = json.loads(listed.stdout)
    assert job["name"] == "never-created"

    # Cancelled without ever being created: it held no node, so it allocates nothing (it
    # is settling while the cluster cannot confirm the cancel: no run holds nodes).
    cancelled = dispatch(tmp_path, "cancel", job["job"], **env)
    assert cancelled.returncode in (0, 4), cancelled.stderr
    goodput = dispatch(tmp_path, "goodput", "--json", **env)
    assert goodput.returncode == 0, goodput.stderr
    (group,) = json.loads(goodput.stdout)["groups"]
    assert {p["phase"] for p in group["parts"]} == {"queued", "settling"}
    assert group["allocated_node_seconds"] == 0 and group["goodput_allocated"] is None


def test_no_configuration_names_the_variables_that_choose_one(tmp_path: Path) -> None:
    done = dispatch(tmp_path, "submit", "spec.yaml")
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    for variable in ("DISPATCH_KUBECONFIG", "KUBECONFIG", "DISPATCH_K8S_CONTEXT"):
        assert variable in done.stderr, done.stderr
