"""Helpers for the tests on the real control plane: kubectl as the testbed's admin (a person
acting on the cluster), and bounded waits on committed state (`kubectl wait`, never a poll for
a passing moment)."""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import httpx2
import yaml

REPO = Path(__file__).resolve().parents[3]
TESTBED = REPO / "scripts" / "k8s-testbed"
VERSIONS = REPO / "scripts" / "k8s-testbed.d" / "k8s-tools" / "versions.env"


def testbed_problem() -> str | None:
    if not os.environ.get("DISPATCH_KUBECONFIG"):
        return "DISPATCH_KUBECONFIG is not set"
    done = subprocess.run([str(TESTBED), "status"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return "scripts/k8s-testbed status: " + " ".join(done.stdout.split())
    return None


def kubectl(*args: str, check: bool = True, input: str | None = None,
            timeout: float = 180) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([str(TESTBED), "kubectl", *args], capture_output=True, text=True,
                          input=input, timeout=timeout, check=False)
    if check and done.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} exited {done.returncode}:\n"
                             f"{done.stdout}\n{done.stderr}")
    return done


def get(kind: str, name: str, namespace: str) -> dict[str, Any]:
    scope = ["-n", namespace] if namespace else []
    data: dict[str, Any] = json.loads(kubectl("get", kind, name, *scope, "-o", "json").stdout)
    return data


def items(kind: str, namespace: str, *selector: str) -> list[dict[str, Any]]:
    args = ["get", kind, "-n", namespace, "-o", "json"]
    if selector:
        args += ["-l", ",".join(selector)]
    found: list[dict[str, Any]] = json.loads(kubectl(*args).stdout)["items"]
    return found


def wait(kind: str, name: str, namespace: str, condition: str, timeout_s: int = 180) -> None:
    kubectl("wait", f"{kind}/{name}", "-n", namespace, f"--for={condition}",
            f"--timeout={timeout_s}s", timeout=timeout_s + 30)


def ready_pods(namespace: str, selector: str, count: int = 1,
               timeout_s: float = 120) -> list[dict[str, Any]]:
    """The ``count`` pods ``selector`` names, once they exist and are Ready (`kubectl wait`
    refuses a selector that matches nothing yet, so their creation is waited for first)."""
    deadline = time.monotonic() + timeout_s
    while len(pods := items("pods", namespace, selector)) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"{count} pods {selector} never appeared: {len(pods)}")
        time.sleep(0.5)
    kubectl("wait", "pod", "-n", namespace, "-l", selector, "--for=condition=Ready",
            f"--timeout={int(timeout_s)}s", timeout=timeout_s + 30)
    return items("pods", namespace, selector)


def version(name: str) -> str:
    for line in VERSIONS.read_text().splitlines():
        key, _, value = line.partition("=")
        if key == name:
            return value
    raise KeyError(name)


def trainjob(namespace: str, env: dict[str, str], *, nodes: int = 1,
             name: str | None = None, runtime: str = "torch-distributed",
             extra: dict[str, Any] | None = None) -> str:
    """Create a TrainJob with kubectl (as a person would); return its name."""
    name = name or f"tb-{uuid.uuid4().hex[:8]}"
    trainer: dict[str, Any] = {"numNodes": nodes,
                               "env": [{"name": k, "value": v} for k, v in env.items()]}
    body: dict[str, Any] = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtimeRef": {"name": runtime}, "trainer": trainer},
    }
    if extra:
        body["spec"].update(extra)
    kubectl("apply", "-f", "-", input=yaml.safe_dump(body))
    return name


def events_for(namespace: str, name_prefix: str) -> list[dict[str, Any]]:
    return [e for e in items("events", namespace)
            if e.get("involvedObject", {}).get("name", "").startswith(name_prefix)]


def state_dir() -> Path:
    return Path(os.environ.get("DISPATCH_K8S_STATE", "/var/lib/dispatch-k8s-testbed"))


def component_pid(name: str) -> int:
    """The pid of a testbed component (etcd, kube-apiserver, ...), from its pid file."""
    return int((state_dir() / "run" / f"{name}.pid").read_text().strip())


def etcd_compact() -> int:
    """Compact the testbed's etcd at its current revision (physically: the history is gone),
    through etcd's JSON gateway on its plain-HTTP client port; the revision compacted at."""
    url = f"http://127.0.0.1:{23791 + int(os.environ.get('DISPATCH_K8S_PORT_OFFSET', '0'))}"
    with httpx2.Client(base_url=url, timeout=30) as etcd:
        head = etcd.post("/v3/kv/range", json={"key": "AA=="})
        head.raise_for_status()
        revision = int(head.json()["header"]["revision"])
        etcd.post("/v3/kv/compaction",
                  json={"revision": str(revision), "physical": True}).raise_for_status()
    return revision
