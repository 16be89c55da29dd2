"""Issue 46's testbed: real nodes (`scripts/k8s-testbed up --real-nodes 2`). A pod on
real-node-1 runs a real process whose output `kubectl logs` reads through the kubelet; its
exit code and termination message reach the pod's status; a memory limit is the memory
cgroup's kill (OOMKilled, 137); a TrainJob of the real runtime runs real torchrun on both real
nodes (c10d rendezvous through JobSet's headless Service and CoreDNS, gloo all_reduce);
killing a node's kubelet gives the real unreachable taint; and a testbed of its own with a
real node leaves nothing behind after `down`. A machine that cannot run real nodes is refused
before anything starts, with the reason."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import TESTBED, get, items, kubectl, wait
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


# ---- a testbed of its own: beside the lane's, and nothing left after its `down` ----------

SECOND_OFFSET = int(os.environ.get("DISPATCH_K8S_REAL_SECOND_OFFSET", "600"))
STRAY = (Path("/usr/libexec/kubernetes/kubelet-plugins/volume/exec"), Path("/root/.kube/cache"))


def _second(state: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DISPATCH_K8S_STATE": str(state),
           "DISPATCH_K8S_PORT_OFFSET": str(SECOND_OFFSET)}
    done = subprocess.run([str(TESTBED), *args], capture_output=True, text=True, env=env,
                          timeout=timeout, check=False)
    assert done.returncode == 0, f"k8s-testbed {' '.join(args)}:\n{done.stdout}\n{done.stderr}"
    return done


def _start_time(pid: int) -> str | None:
    """When the live process ``pid`` started (None once it is gone or a zombie: a process
    whose parent has not reaped it yet has ended)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return None if fields[0] in ("Z", "X") else fields[19]


def _mount_ns_pids(pid: int) -> list[int]:
    ns = os.readlink(f"/proc/{pid}/ns/mnt")
    found = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                if os.readlink(p / "ns" / "mnt") == ns:
                    found.append(int(p.name))
            except OSError:
                continue
    return found


def _cgroups(offset: int) -> list[Path]:
    return sorted(Path("/sys/fs/cgroup").glob(f"*/dispatch-k8s-{offset}"))


@pytest.mark.real_nodes
def test_a_second_testbed_with_a_real_node_runs_beside_and_leaves_nothing_after_down(
        tmp_path: Path, namespace: str) -> None:
    state = tmp_path / "state"
    bridge = f"dkb{SECOND_OFFSET}"
    api_port = 16443 + SECOND_OFFSET
    assert not _cgroups(SECOND_OFFSET), "a testbed at the second offset is already up"
    strays_before = {p: p.exists() for p in STRAY}
    discovery = Path(f"/root/.kube/cache/discovery/127.0.0.1_{api_port}")
    assert not discovery.exists()
    try:
        _second(state, "up", "--real-nodes", "1")
        # A real pod on the second testbed's node, while the lane's nodes run theirs.
        kc = [str(TESTBED), "kubectl"]
        env = {**os.environ, "DISPATCH_K8S_STATE": str(state),
               "DISPATCH_K8S_PORT_OFFSET": str(SECOND_OFFSET)}
        runtime = "dispatch-real"
        spec = json.loads(subprocess.run(
            [*kc, "get", "clustertrainingruntime", runtime, "-o", "json"], env=env,
            capture_output=True, text=True, check=True).stdout)
        pod_spec = spec["spec"]["template"]["spec"]["replicatedJobs"][0]["template"]["spec"][
            "template"]["spec"]
        (container,) = pod_spec["containers"]
        body = {"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "sleeper", "namespace": namespace},
                "spec": {**pod_spec, "restartPolicy": "Never",
                         "containers": [{**container, "name": "main",
                                         "command": ["sleep", "3600"]}]}}
        subprocess.run([*kc, "apply", "-f", "-"], input=json.dumps(body), env=env, text=True,
                       capture_output=True, check=True)
        subprocess.run([*kc, "wait", "pod/sleeper", "-n", namespace, "--for=condition=Ready",
                        "--timeout=120s"], env=env, capture_output=True, text=True, check=True)
        # Both testbeds' real nodes at once: the lane's are still Ready.
        kubectl("wait", "node/real-node-1", "--for=condition=Ready", "--timeout=60s")
        run_dir = state / "run"
        pids = {int(f.read_text()) for f in run_dir.glob("*.pid")}
        # Where a machine that had neither stray folder would get them: in the state dir.
        kcm = Path(f"/proc/{int((run_dir / 'kube-controller-manager.pid').read_text())}/cmdline")
        args = kcm.read_bytes().decode().split("\0")
        assert args[args.index("--flex-volume-plugin-dir") + 1].startswith(str(state)), args
        kubelet = yaml.safe_load((state / "nodes" / "real-node-1" / "kubelet.yaml").read_text())
        assert kubelet["volumePluginDir"].startswith(str(state)), kubelet
        containerd = int((run_dir / "containerd-real-node-1.pid").read_text())
        in_ns = set(_mount_ns_pids(containerd))
        in_cgroup = {int(p) for c in _cgroups(SECOND_OFFSET)
                     for f in c.rglob("cgroup.procs") for p in f.read_text().split()}
        assert len(in_ns) >= 3, in_ns  # containerd and the shims of the sandbox and the sleeper
        assert in_cgroup, "the sleeper is not in the node's cgroup"
        everything = {p: _start_time(p) for p in pids | in_ns | in_cgroup}
    finally:
        _second(state, "down")
    alive = [p for p, start in everything.items() if start and _start_time(p) == start]
    assert not alive, {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in alive}
    mounts = Path("/proc/self/mountinfo").read_text()
    assert str(state) not in mounts and "dispatch-node" not in mounts
    assert not _cgroups(SECOND_OFFSET)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f" {bridge}:" not in links and f" {bridge}@" not in links, links
    for p, existed in strays_before.items():
        assert p.exists() == existed, p
    assert not discovery.exists()
    # The lane's testbed is untouched.
    kubectl("wait", "node/real-node-1", "--for=condition=Ready", "--timeout=60s")


V1 = {"memory/memory.limit_in_bytes": "", "cpuset/cpuset.cpus": "0-1"}
FAKE_IP = """#!/bin/sh
case "$*" in
  "link add"*) echo "RTNETLINK answers: Operation not supported" >&2; exit 2 ;;
esac
exit 1
"""


@pytest.mark.parametrize(("machine", "reason"), [
    ({"cgroup": {"cpu/cgroup.procs": "", "cpuset/cpuset.cpus": "0-1"}}, "no memory cgroup"),
    ({"cgroup": {"cgroup.controllers": "cpu memory"}}, "cgroup v2"),
    ({"cgroup": V1, "filesystems": "nodev\ttmpfs\n\text4\n"}, "no overlay filesystem"),
    ({"cgroup": V1, "ip": FAKE_IP}, "no bridge support"),
    ({"cgroup": V1, "venv": "/nonexistent/venv"}, "no Python venv"),
], ids=["no-memory-cgroup", "cgroup-v2", "no-overlay", "no-bridge", "no-venv"])
def test_a_machine_that_cannot_run_real_nodes_is_refused_before_anything_starts(
        tmp_path: Path, machine: dict[str, Any], reason: str) -> None:
    """The machine is made up (a cgroup folder, a filesystems list, an `ip` whose bridge is
    refused as a kernel without bridge support refuses it): `check-real-nodes` and `up
    --real-nodes` say why, and `up` starts nothing."""
    fake = tmp_path / "cgroup"
    fake.mkdir()
    for rel, text in machine["cgroup"].items():
        (fake / rel).parent.mkdir(parents=True, exist_ok=True)
        (fake / rel).write_text(text)
    state = tmp_path / "state"
    env = {**os.environ, "DISPATCH_K8S_CGROUP_FS": str(fake), "DISPATCH_K8S_STATE": str(state),
           "DISPATCH_K8S_PORT_OFFSET": "650"}
    if "filesystems" in machine:
        (tmp_path / "filesystems").write_text(machine["filesystems"])
        env["DISPATCH_K8S_PROC_FILESYSTEMS"] = str(tmp_path / "filesystems")
    if "ip" in machine:
        (tmp_path / "bin").mkdir()
        (tmp_path / "bin" / "ip").write_text(machine["ip"])
        (tmp_path / "bin" / "ip").chmod(0o755)
        env["PATH"] = f"{tmp_path / 'bin'}:{env['PATH']}"
    if "venv" in machine:
        env["DISPATCH_K8S_REAL_VENV"] = machine["venv"]
    for args in (["check-real-nodes", "2"], ["up", "--real-nodes", "2"]):
        done = subprocess.run([str(TESTBED), *args], capture_output=True, text=True, env=env,
                              timeout=60, check=False)
        assert done.returncode == 1, done
        assert "real nodes cannot start here" in done.stderr and reason in done.stderr, done
    assert not state.exists(), "up started something before refusing"
    # Without real nodes nothing is asked of the machine.
    done = subprocess.run([str(TESTBED), "check-real-nodes", "0"], capture_output=True,
                          text=True, env=env, timeout=60, check=False)
    assert done.returncode == 0, done
