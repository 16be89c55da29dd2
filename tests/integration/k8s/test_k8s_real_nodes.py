"""Issue 46's testbed: real nodes (`scripts/k8s-testbed up --real-nodes 2`). A pod on
real-node-1 runs a real process whose output `kubectl logs` reads through the kubelet; its
exit code and termination message reach the pod's status; a memory limit is the memory
cgroup's kill (OOMKilled, 137); a TrainJob of the real runtime runs real torchrun on both real
nodes (c10d rendezvous through JobSet's headless Service and CoreDNS, gloo all_reduce);
killing a node's kubelet gives the real unreachable taint; and a testbed of its own with a
real node leaves nothing behind after `down`. A machine that cannot run real nodes is refused
before anything starts, with the reason."""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import get, items, kubectl, wait
from real_nodes import lose_node, real_pod, restore_node

REPO = Path(__file__).resolve().parents[3]


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


@pytest.fixture
def pods(namespace: str) -> Iterator[list[str]]:
    """Names of the pods a test makes; deleted after it."""
    made: list[str] = []
    yield made
    for name in made:
        kubectl("delete", "pod", name, "-n", namespace, "--wait=false", check=False)


def _apply(body: dict[str, Any]) -> None:
    kubectl("apply", "-f", "-", input=yaml.safe_dump(body))


def _ended(namespace: str, name: str, phase: str) -> dict[str, Any]:
    wait("pod", name, namespace, f"jsonpath={{.status.phase}}={phase}", timeout_s=120)
    pod = get("pod", name, namespace)
    (status,) = pod["status"]["containerStatuses"]
    terminated: dict[str, Any] = status["state"]["terminated"]
    return terminated


@pytest.mark.real_nodes
def test_a_pod_on_a_real_node_runs_a_real_process(namespace: str, real_runtime: str,
                                                  pods: list[str]) -> None:
    name = _name("rn-proc")
    pods.append(name)
    script = ("import os, socket, sys; "
              "print('pid', os.getpid(), 'host', socket.gethostname(), "
              "'py', sys.version_info[:2]); "
              "open('/dev/termination-log', 'w').write('the real end'); sys.exit(3)")
    _apply(real_pod(name, namespace, real_runtime, ["python", "-c", script],
                    node="real-node-1"))
    terminated = _ended(namespace, name, "Failed")
    assert terminated["exitCode"] == 3, terminated
    assert terminated["reason"] == "Error", terminated
    assert terminated["message"] == "the real end", terminated
    pod = get("pod", name, namespace)
    assert pod["spec"]["nodeName"] == "real-node-1"
    # The process's own output, read by the API server from the kubelet: a real pid (the
    # container's pid namespace: small), the pod's hostname, the host venv's Python.
    log = kubectl("logs", name, "-n", namespace).stdout.split()
    assert log[0] == "pid" and log[2:4] == ["host", name], log
    assert " ".join(log[4:]) == f"py {tuple(sys.version_info[:2])}", log


@pytest.mark.real_nodes
def test_a_memory_limit_is_the_memory_cgroups_kill(namespace: str, real_runtime: str,
                                                   pods: list[str]) -> None:
    name = _name("rn-oom")
    pods.append(name)
    script = "x = []\nwhile True: x.append(bytearray(16 << 20))"
    _apply(real_pod(name, namespace, real_runtime, ["python", "-c", script],
                    node="real-node-2", memory="64Mi"))
    terminated = _ended(namespace, name, "Failed")
    assert terminated["reason"] == "OOMKilled", terminated
    assert terminated["exitCode"] == 137, terminated


ALL_REDUCE = """\
import os, torch, torch.distributed as dist
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank} of {world} on {os.environ['HOSTNAME']}: sum {t.item():g}", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.real_nodes
@pytest.mark.torch
def test_a_trainjob_of_the_real_runtime_runs_torchrun_on_both_real_nodes(
        namespace: str, real_runtime: str, real_shared: Path) -> None:
    name = _name("rn-torch")
    script = real_shared / f"{name}.py"
    script.write_text(ALL_REDUCE)
    body = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"runtimeRef": {"name": real_runtime}, "trainer": {
            "numNodes": 2,
            # Trainer sets PET_MASTER_ADDR to rank 0's name under JobSet's headless Service.
            "command": ["torchrun", "--nnodes=2", "--nproc-per-node=1", "--rdzv-backend=c10d",
                        "--rdzv-endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)",
                        f"--rdzv-id={name}", str(script)],
        }},
    }
    try:
        _apply(body)
        wait("trainjob", name, namespace, "condition=Complete", timeout_s=300)
        found = items("pods", namespace, f"jobset.sigs.k8s.io/jobset-name={name}")
        assert sorted(p["spec"]["nodeName"] for p in found) == ["real-node-1", "real-node-2"]
        sums = []
        for pod in found:
            log = kubectl("logs", pod["metadata"]["name"], "-n", namespace).stdout
            sums += [line for line in log.splitlines() if line.startswith("rank ")]
        assert sorted(s.split(" on ")[0] for s in sums) == ["rank 0 of 2", "rank 1 of 2"], sums
        assert all(s.endswith("sum 3") for s in sums), sums
    finally:
        kubectl("delete", "trainjob", name, "-n", namespace, "--wait=false", check=False)
        script.unlink(missing_ok=True)


def _taints(node: str) -> list[dict[str, Any]]:
    taints: list[dict[str, Any]] = get("node", node, "")["spec"].get("taints", [])
    return taints


@pytest.mark.real_nodes
def test_losing_a_real_node_kills_its_kubelet_only_and_taints_it_unreachable(
        namespace: str, real_runtime: str, pods: list[str]) -> None:
    name = _name("rn-lost")
    pods.append(name)
    marker = f"alive-{name}"
    loop = f"import time\nwhile True: print('{marker}', flush=True); time.sleep(1)"
    _apply(real_pod(name, namespace, real_runtime, ["python", "-c", loop], node="real-node-2"))
    wait("pod", name, namespace, "condition=Ready", timeout_s=120)
    lose_node("real-node-2")
    try:
        deadline = time.monotonic() + 120
        while not any(t["key"] == "node.kubernetes.io/unreachable" for t in _taints("real-node-2")):
            assert time.monotonic() < deadline, _taints("real-node-2")
            time.sleep(1)
        ready = [c for c in get("node", "real-node-2", "")["status"]["conditions"]
                 if c["type"] == "Ready"]
        assert ready[0]["status"] == "Unknown", ready
        # The container outlives its kubelet, as on a dead node: its process is still in the
        # node's cgroup, writing.
        assert _node_cgroup_pids("real-node-2"), "no process left in real-node-2's cgroup"
    finally:
        restore_node("real-node-2")
    kubectl("wait", "node/real-node-2", "--for=condition=Ready", "--timeout=120s", timeout=150)


def _offset() -> int:
    return int(os.environ.get("DISPATCH_K8S_PORT_OFFSET", "0"))


def _node_cgroup_pids(node: str, offset: int | None = None) -> list[int]:
    offset = _offset() if offset is None else offset
    root = Path("/sys/fs/cgroup/memory") / f"dispatch-k8s-{offset}" / node
    return sorted({int(p) for f in root.rglob("cgroup.procs") for p in f.read_text().split()})
