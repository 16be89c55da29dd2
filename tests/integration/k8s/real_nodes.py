"""The testbed's real nodes (`scripts/k8s-testbed up --real-nodes N`) for the tests that need
real containers: kubelet, containerd and runc on `real-node-1..N`, beside the KWOK nodes.

A test that needs them is marked ``@pytest.mark.real_nodes`` and takes the ``real_runtime`` or
``real_shared`` fixture, which FAILS (never skips) when the testbed was brought up without
real nodes: a skipped test is not coverage. scripts/test's k8s lane deselects the marked tests
only on a machine that cannot run real nodes, and prints which tests it left out and why.

- ``real_runtime``: the ClusterTrainingRuntime whose pods run on the real nodes only, from the
  local image (`DISPATCH_K8S_REAL_RUNTIME`), native restarts off like `dispatch-torch`.
- ``real_shared``: the host folder every real pod sees read-write at the same path
  (`DISPATCH_K8S_REAL_SHARED`): scripts, checkpoints, progress files, call folders.
- ``lose_node`` / ``restore_node``: a real node's kubelet killed (its containers keep running)
  and started again, through `scripts/k8s-testbed`.
- ``real_pod``: a bare Pod manifest for a real node (the image, the toleration, the mounts).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import TESTBED, kubectl

REAL_LABEL = "dispatch.testbed/real"
IMAGE = "dispatch.testbed/node:1"


def _required(name: str) -> str:
    value = os.environ.get(name, "")
    if not value:
        pytest.fail(f"{name} is not set: this test needs the testbed's real nodes. Bring it up "
                    "with `scripts/k8s-testbed up --real-nodes 2` and export what "
                    "`scripts/k8s-testbed env` prints.", pytrace=False)
    return value


@pytest.fixture
def real_runtime() -> str:
    """The name of the ClusterTrainingRuntime of the real nodes."""
    return _required("DISPATCH_K8S_REAL_RUNTIME")


@pytest.fixture
def real_shared() -> Path:
    """The host folder mounted read-write at the same path in every real pod."""
    shared = Path(_required("DISPATCH_K8S_REAL_SHARED"))
    if not shared.is_dir():
        pytest.fail(f"DISPATCH_K8S_REAL_SHARED={shared} is not a folder", pytrace=False)
    return shared


def _testbed(*args: str) -> None:
    done = subprocess.run([str(TESTBED), *args], capture_output=True, text=True, timeout=120,
                          check=False)
    if done.returncode != 0:
        raise AssertionError(f"scripts/k8s-testbed {' '.join(args)} exited "
                             f"{done.returncode}:\n{done.stdout}\n{done.stderr}")


def lose_node(name: str) -> None:
    """Kill the kubelet of real node ``name`` (its containers keep running)."""
    _testbed("lose-node", name)


def restore_node(name: str) -> None:
    """Start the kubelet of real node ``name`` again."""
    _testbed("restore-node", name)


def runtime_pod_spec(runtime: str) -> dict[str, Any]:
    """The pod spec the real runtime gives its pods (its mounts, image, toleration)."""
    found = json.loads(kubectl("get", "clustertrainingruntime", runtime, "-o", "json").stdout)
    spec: dict[str, Any] = (found["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]
                            ["spec"]["template"]["spec"])
    return spec


def real_pod(name: str, namespace: str, runtime: str, command: list[str], *,
             node: str | None = None, memory: str | None = None) -> dict[str, Any]:
    """A bare Pod of the real runtime's shape (``restartPolicy: Never``) running ``command``,
    on ``node`` if given; ``memory`` its memory limit."""
    spec = runtime_pod_spec(runtime)
    (container,) = spec["containers"]
    container = {**container, "name": "main", "command": command}
    if memory:
        container["resources"] = {"limits": {"memory": memory}, "requests": {"memory": memory}}
    selector = dict(spec.get("nodeSelector", {}))
    if node:
        selector["kubernetes.io/hostname"] = node
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"restartPolicy": "Never", "nodeSelector": selector,
                 "tolerations": spec.get("tolerations", []), "containers": [container],
                 "volumes": spec.get("volumes", []),
                 "terminationGracePeriodSeconds": 5},
    }
