"""Issue 46, scenarios 1, 2, 3, 4 and 6: what a training process really does on Kubernetes,
on the testbed's real nodes (a real kubelet, containerd and runc: `scripts/k8s-testbed up
--real-nodes 2`), through `dispatch run` with a real record (the Python API for the
Executor), the least-privilege identity.

The pods run the real runtime (`DISPATCH_K8S_REAL_RUNTIME`: the host's Python and this
checkout's venv with torch, mounted read-only at the same paths) and share a host directory
(`DISPATCH_K8S_REAL_SHARED`, read-write at the same path in every real pod) that the spec
names as `kubeflow.shared_dir`: the training scripts, checkpoints, the pods' progress and
torchelastic error files, and the Executor's call folders are there.

1. 2 nodes of real torchrun (c10d rendezvous, gloo all_reduce): succeeded; both ranks' output
   through `dispatch logs`, the HTTP API, and `logs -f` live.
2. An exception in rank 1: failed / non-zero-exit; rank 1's exception and traceback from
   torchelastic's error file in the shared directory, in status, ls, history, the API and the
   job page.
3. A real cgroup OOM (the spec's `memory:` as the limit): out-of-memory, the kubelet's words,
   exit 137, the node named.
4. Preemption by a pod of `dispatch-testbed-high`: torchrun gets SIGTERM within its grace;
   preempted (no failure spent), resubmitted, resumed from its checkpoint in the shared
   directory, the work since it counted lost from the progress file; `logs -f` across the
   resubmission.
6. `dispatch.Executor(backend="kubeflow")`: the function runs in a real pod, `result()`
   returns its value; an exception re-raises with the remote traceback.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from k8s_helpers import get, items, kubectl
from tests.e2e.conftest import Dispatch, wait_until
from tests.integration.http.serve_harness import Served

import dispatch
from dispatch.fn.job import FunctionFailed

pytestmark = pytest.mark.real_nodes

REPO = Path(__file__).resolve().parents[3]
PYTHON = sys.executable  # this checkout's venv (torch, dispatch), mounted in the real pods
TORCHRUN = str(Path(sys.executable).parent / "torchrun")
RESUBMIT = {"rules": [{"on": ["preempted", "node-lost"], "action": "resubmit", "budget": 2},
                      {"on": ["non-zero-exit"], "action": "resubmit", "budget": 0}]}


# ---- the real nodes (fixtures real_runtime, real_shared: real_nodes.py) -------------------

@pytest.fixture
def work(real_shared: Path) -> Iterator[Path]:
    """This test's own directory in the shared one (its scripts, checkpoints, files)."""
    path = real_shared / f"kapp-{uuid.uuid4().hex[:10]}"
    path.mkdir(mode=0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def section(namespace: str, runtime: str, work: Path, **extra: Any) -> dict[str, Any]:
    """The kubeflow section of a job on the real nodes: the shared directory as a volume and
    as ``shared_dir``."""
    return {"namespace": namespace, "runtime": runtime,
            "volumes": [{"host_path": str(work), "mount_path": str(work)}],
            "shared_dir": str(work), **extra}


def real_spec(cli: Dispatch, name: str, command: list[str], kubeflow: dict[str, Any],
              **fields: Any) -> Path:
    return cli.spec(name, command, backend="kubeflow", kubeflow=kubeflow, **fields)


def torchrun(script: Path, *args: str) -> list[str]:
    """torchrun with a c10d rendezvous at node 0's pod (Trainer's PET_MASTER_ADDR: the JobSet's
    headless Service name), expanded by Kubernetes in the container's command."""
    return [TORCHRUN, "--nnodes=$(PET_NNODES)", "--nproc-per-node=1",
            "--rdzv-backend=c10d", "--rdzv-endpoint=$(PET_MASTER_ADDR):$(PET_MASTER_PORT)",
            "--rdzv-id=$(DISPATCH_JOB_ID)-$(DISPATCH_SUBMISSION)", "--max-restarts=0",
            str(script), *args]


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o644)
    return path


def run(cli: Dispatch, path: Path, timeout: float = 420) -> tuple[int, dict[str, Any]]:
    done = cli("run", str(path), "--json", "--poll", "0.5", timeout=timeout)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {done.returncode}\n{done.stdout}\n{done.stderr}") from None


def kind(st: dict[str, Any]) -> str | None:
    return st["cause"]["kind"] if st.get("cause") else None


def by_pod(lines: list[str]) -> dict[str, list[str]]:
    """Each pod's lines (``[pod] ...``), in their order."""
    out: dict[str, list[str]] = {}
    for ln in lines:
        if ln.startswith("[") and "] " in ln:
            pod, _, said = ln[1:].partition("] ")
            out.setdefault(pod, []).append(said)
    return out


def pods_of(namespace: str, trainjob: str) -> list[dict[str, Any]]:
    return items("pods", namespace, f"jobset.sigs.k8s.io/jobset-name={trainjob}")


# ---- 1. real torchrun on 2 nodes, and its logs ---------------------------------------------

ALL_REDUCE = """\
import os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
t = torch.tensor([float(rank + 1)])
dist.all_reduce(t)
print(f"rank {rank} of {world} on {os.environ['DISPATCH_POD_NAME']}: all_reduce sum "
      f"{t.item():.1f}", flush=True)
go = os.path.join(os.path.dirname(os.path.abspath(__file__)), "go")
if os.environ.get("WAIT_FOR_GO"):  # the test lets it end once it has read the line below
    if rank == 0:
        print("rank 0 waiting for go", flush=True)
    while not os.path.exists(go):
        time.sleep(0.2)
dist.barrier()
print(f"rank {rank} done", flush=True)
dist.destroy_process_group()
"""


def test_two_nodes_of_real_torchrun_succeed_and_both_ranks_output_is_read(
        cli: Dispatch, namespace: str, real_runtime: str, work: Path) -> None:
    script = write(work / "all_reduce.py", ALL_REDUCE)
    path = real_spec(cli, "ar", torchrun(script), section(namespace, real_runtime, work),
                     nodes=2, env={"WAIT_FOR_GO": "1"})
    runner = cli.spawn("run", str(path), "--json", "--poll", "0.5")
    follower = None
    try:
        cli.wait_for("ar", lambda s: bool(s.get("objects")), timeout=120)
        follower = cli.spawn("logs", "-f", "ar")
        assert follower.stdout is not None
        # live: the follower prints rank 0's line while the job still waits for "go"
        seen: list[str] = []
        for line in follower.stdout:
            seen.append(line.rstrip("\n"))
            if line.rstrip().endswith("rank 0 waiting for go"):
                break
        assert cli.status("ar")["state"] == "running", seen
        write(work / "go", "")
        out, err = runner.communicate(timeout=300)
        rest, _ = follower.communicate(timeout=120)
    finally:
        (work / "go").touch()
    st = json.loads(out)
    assert runner.returncode == 0 and st["state"] == "succeeded" and kind(st) == "none", (st, err)
    assert st["submissions"] == 1
    followed = seen + rest.splitlines()
    trainjob = st["objects"][-1].split("/")[-1]
    pods = sorted(p["metadata"]["name"] for p in pods_of(namespace, trainjob))
    assert len(pods) == 2
    # each pod's own lines: c10d's rendezvous, not the pod's index, gives each its rank
    ranks = set()
    for pod in pods:
        said = [ln for ln in followed
                if ln.startswith(f"[{pod}] rank ") and "waiting for go" not in ln]
        assert len(said) == 2 and said[0].endswith(f" of 2 on {pod}: all_reduce sum 3.0"), said
        rank = said[0].split()[2]
        assert said[1] == f"[{pod}] rank {rank} done", said
        ranks.add(rank)
    assert ranks == {"0", "1"}, followed
    # the same lines read again, whole (node 0's pod first, each pod's lines in order, where
    # the follower printed them as they came): the CLI and the HTTP API of a serve
    logs = cli("logs", "ar", check=True).stdout.splitlines()
    assert by_pod(followed) == by_pod(logs) and len(by_pod(logs)) == 2, (followed, logs)
    assert logs[0].startswith(f"[{pods[0]}] "), logs
    served = Served(cli.tmp)
    try:
        r = served.client.get(f"/api/jobs/{st['job']}/logs")
        assert r.status_code == 200, r.text
        assert r.text.splitlines() == logs
    finally:
        served.close()
    # it ran on the real nodes, one pod on each
    nodes = {p["spec"]["nodeName"] for p in pods_of(namespace, trainjob)}
    assert len(nodes) == 2 and all(n.startswith("real-node-") for n in nodes), nodes


# ---- 2. an exception in rank 1 --------------------------------------------------------------

RAISES = """\
import os
import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record


def check(step):
    if dist.get_rank() == 1 and step == 3:
        raise ValueError(f"loss is nan at step {step} on rank 1")


@record
def main():
    dist.init_process_group("gloo")
    t = torch.tensor([1.0])
    dist.all_reduce(t)
    print(f"rank {dist.get_rank()}: all_reduce {t.item():.1f}", flush=True)
    for step in range(10):
        check(step)
        dist.all_reduce(t)  # rank 0 learns its peer is gone here
    dist.destroy_process_group()


main()
"""


def test_an_exception_in_rank_1_is_its_error_from_torchelastics_error_file(
        cli: Dispatch, namespace: str, real_runtime: str, work: Path) -> None:
    script = write(work / "raises.py", RAISES)
    path = real_spec(cli, "boom", torchrun(script), section(namespace, real_runtime, work),
                     nodes=2)
    code, st = run(cli, path)
    assert code != 0
    assert st["state"] == "failed" and kind(st) == "non-zero-exit", st
    assert st["cause"]["exit_code"] == 1, st
    err = st["application_error"]
    assert err["source"] == "torchelastic-error-file", err
    assert err["message"] == "ValueError: loss is nan at step 3 on rank 1", err
    assert err["rank"] == 1 and err["node"].startswith("real-node-"), err
    assert "in check" in err["traceback_tail"] and str(script) in err["traceback_tail"], err
    assert err["local_rank"] == 0
    # the error file came from rank 1's pod, in the shared directory (c10d's rendezvous, not
    # the pod's index, made it rank 1: its log's Root Cause block says so)
    trainjob = st["objects"][-1].split("/")[-1]
    files = {p["metadata"]["name"]: work / f"dispatch-{p['metadata']['name']}.error.json"
             for p in pods_of(namespace, trainjob)}
    assert all(f.is_file() for f in files.values()), files  # both workers failed
    (rank1,) = [p for p in pods_of(namespace, trainjob)
                if "loss is nan" in files[p["metadata"]["name"]].read_text()]
    assert err["node"] == rank1["spec"]["nodeName"]
    # the cause is the scheduler's: the application's words are not in it (S2)
    assert "loss is nan" not in st["cause"].get("note", "")

    # status, ls, history, the API and the job page
    status = cli("status", "boom", check=True).stdout
    (said,) = [ln.strip() for ln in status.splitlines() if ln.strip().startswith("error: ")]
    # a worker that died of a signal after raising says so between (CI once saw gloo's
    # teardown abort rank 1 once its peer was gone: "(killed by signal 6 (SIGABRT))")
    assert said.startswith(f"error: rank 1 (local rank 0) on {err['node']}: {err['message']}")
    assert said.endswith("  (torchelastic-error-file)"), status
    assert (err.get("signal") is None) == ("killed by signal" not in said), (err, status)
    ls = cli("ls", "--all", check=True).stdout
    (line,) = [ln for ln in ls.splitlines() if ln.startswith(st["job"])]
    assert line.rstrip().endswith(err["message"]) or "loss is nan" in line, ls
    history = cli("history", "boom", check=True).stdout
    assert (f"from torchelastic-error-file): rank 1 (local rank 0) on {err['node']}: "
            f"{err['message']}") in history, history
    served = Served(cli.tmp)
    try:
        got = served.status(st["job"])
        assert got["application_error"] == err, got
        page = served.client.get("/api/jobs", params={"limit": 10, "q": "loss is nan"}).json()
        assert [r["job"] for r in page["jobs"]] == [st["job"]], page
        story = served.client.get(f"/api/jobs/{st['job']}/history").json()
        assert [e for e in story if e["type"] == "ApplicationErrorRecorded"], story
        html = served.client.get(f"/jobs/{st['job']}")
        assert html.status_code == 200 and "text/html" in html.headers["content-type"]
    finally:
        served.close()


# ---- 3. a real cgroup OOM ------------------------------------------------------------------

HOG = ("import time\nchunks = []\nwhile True:\n    chunks.append(b'x' * (16 << 20))\n"
       "    time.sleep(0.01)\n")


def test_a_real_cgroup_oom_is_out_of_memory_with_the_kubelets_words(
        cli: Dispatch, namespace: str, real_runtime: str, work: Path) -> None:
    script = write(work / "hog.py", HOG)
    path = real_spec(cli, "oom", [PYTHON, str(script)], section(namespace, real_runtime, work),
                     nodes=1, memory="256Mi")
    code, st = run(cli, path)
    assert st["state"] == "failed" and kind(st) == "out-of-memory", st
    assert st["cause"]["exit_code"] == 137, st
    assert "reason=OOMKilled exitCode=137" in st["cause"]["detail"], st
    trainjob = st["objects"][-1].split("/")[-1]
    (pod,) = pods_of(namespace, trainjob)
    node = pod["spec"]["nodeName"]
    assert node.startswith("real-node-")
    assert f"(node {node}) container node: terminated reason=OOMKilled" in \
        st["cause"]["detail"], st  # the node is named where the kubelet's words are
    limits = pod["spec"]["containers"][0]["resources"]["limits"]
    assert limits["memory"] == "256Mi"


# ---- 4. preemption, SIGTERM, resume from the checkpoint, lost work ----------------------------

RESUMABLE = """\
import json, os, signal, sys, time
import torch.distributed as dist

here = os.path.dirname(os.path.abspath(__file__))
ckpt = os.path.join(here, "ckpt.json")
steps = int(sys.argv[1])


def on_term(signum, frame):
    with open(os.path.join(here, f"sigterm.{os.environ['DISPATCH_SUBMISSION']}"), "w") as f:
        f.write(f"{step}\\n")
    print(f"SIGTERM at step {step}", flush=True)
    sys.exit(143)


signal.signal(signal.SIGTERM, on_term)
dist.init_process_group("gloo")
step = 0
if os.path.exists(ckpt):
    step = json.load(open(ckpt))["step"]
    print(f"resumed from step {step}", flush=True)
while step < steps:
    time.sleep(0.5)
    step += 1
    print(f"step {step}", flush=True)
    # submission 1 keeps no checkpoint past step 10: the work from there to its SIGTERM is
    # what the preemption loses, however late the preemptor lands
    first = os.environ["DISPATCH_SUBMISSION"] == "1"
    if step % 5 == 0 and not (first and step > 10):
        with open(ckpt + ".tmp", "w") as f:
            json.dump({"step": step}, f)
        os.replace(ckpt + ".tmp", ckpt)
        with open(os.environ["DISPATCH_PROGRESS_FILE"], "a") as f:
            f.write(json.dumps({"step": step, "checkpoint": True, "time": time.time()}) + "\\n")
        if first and step == 10:
            open(os.path.join(here, "checkpointed"), "w").close()
    if first and step == 13:
        # 1.5 s of work past the checkpoint before the preemptor is made (Kubernetes' times
        # are whole seconds: the end's stamp may be up to 1 s early)
        open(os.path.join(here, "past-checkpoint"), "w").close()
dist.destroy_process_group()
print("done", flush=True)
"""


def high_priority_pod(name: str, namespace: str, victim: dict[str, Any],
                      cpu: str) -> dict[str, Any]:
    """A pod of the cluster's high priority that fits only where ``victim`` runs by taking
    its CPU: the same image, host paths and mounts (this venv's Python), the same node (by
    name, through the scheduler: a nodeName would skip it and preempt nothing)."""
    spec = victim["spec"]
    container = spec["containers"][0]
    host_paths = [v for v in spec.get("volumes", []) if "hostPath" in v]
    names = {v["name"] for v in host_paths}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                "values": [spec["nodeName"]]}]}]}}}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"priorityClassName": "dispatch-testbed-high", "affinity": affinity,
                 "nodeSelector": spec.get("nodeSelector", {}),
                 "tolerations": spec.get("tolerations", []),
                 "terminationGracePeriodSeconds": 0, "volumes": host_paths,
                 "containers": [{"name": "high", "image": container["image"],
                                 "imagePullPolicy": "Never",
                                 "command": [PYTHON, "-c", "import time; time.sleep(600)"],
                                 "volumeMounts": [m for m in container.get("volumeMounts", [])
                                                  if m["name"] in names],
                                 "resources": {"requests": {"cpu": cpu}}}]}}


def _allocatable_cpu(node: str) -> float:
    cpu = str(get("node", node, "")["status"]["allocatable"]["cpu"])
    return float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)


def busy_cpu() -> str:
    """Most of a real node's CPU: a pod of the high priority asking as much fits on a node
    only by preempting one that holds it."""
    nodes = [n["metadata"]["name"] for n in items("nodes", "")
             if n["metadata"]["name"].startswith("real-node-")]
    assert nodes, "no real node"
    return f"{int(min(_allocatable_cpu(n) for n in nodes) * 1000 * 0.6)}m"


def test_a_preemption_is_preempted_resumed_from_its_checkpoint_and_its_lost_work_counted(
        cli: Dispatch, namespace: str, real_runtime: str, work: Path) -> None:
    script = write(work / "resumable.py", RESUMABLE)
    nodes = sorted(n["metadata"]["name"] for n in items("nodes", "")
                   if n["metadata"]["name"].startswith("real-node-"))
    assert len(nodes) >= 2, nodes
    cpu = busy_cpu()
    kf = section(namespace, real_runtime, work,
                 resourcesPerNode={"requests": {"cpu": cpu}})
    path = real_spec(cli, "pre", torchrun(script, "40"), kf, nodes=1, policy=RESUBMIT)
    runner = cli.spawn("run", str(path), "--json", "--poll", "0.5")
    follower = None
    high = f"kapp-high-{uuid.uuid4().hex[:6]}"
    try:
        st = cli.wait_for("pre", lambda s: s["state"] == "running" and bool(s["objects"]),
                          timeout=180)
        follower = cli.spawn("logs", "-f", "pre")
        wait_until(lambda: (work / "checkpointed").exists(), "no checkpoint at step 10",
                   timeout=180)
        wait_until(lambda: "checkpoint at step 10" in cli("history", "--all", "pre").stdout,
                   "the checkpoint never reached the record", timeout=60)
        wait_until(lambda: (work / "past-checkpoint").exists(), "no step 13", timeout=60)
        trainjob = st["objects"][-1].split("/")[-1]
        (pod,) = pods_of(namespace, trainjob)
        preemptor = high_priority_pod(high, namespace, pod, cpu)
        # as a person with the cluster's high priority: the scheduler preempts our pod
        kubectl("apply", "-f", "-", input=yaml.safe_dump(preemptor))
        out, err = runner.communicate(timeout=420)
        rest, _ = follower.communicate(timeout=120)
    finally:
        kubectl("delete", "pod", high, "-n", namespace, "--wait=false", check=False)
    st = json.loads(out)
    assert runner.returncode == 0 and st["state"] == "succeeded", (st, err)
    assert st["submissions"] == 2, st
    causes = [h["cause"]["kind"] for h in cli.status("pre")["history"] if h.get("cause")]
    assert "preempted" in causes and "non-zero-exit" not in causes, causes
    # torchrun got SIGTERM (its worker wrote so, from the step it had reached) within its grace
    term = (work / "sigterm.1").read_text().strip()
    assert int(term) >= 10
    # the second submission resumed from the checkpoint in the shared directory
    logs = rest.splitlines()
    assert "== dispatch: submission 2 after preempted" in logs, logs
    resumed = [ln for ln in logs if ln.startswith("resumed from step ")]  # one pod: no prefix
    assert resumed, logs
    step = int(resumed[0].split()[-1])
    assert step == 10  # submission 1's last checkpoint
    assert logs.index("== dispatch: submission 2 after preempted") < logs.index(resumed[0])
    assert logs[-1] == "done", logs
    # what the first run did after its checkpoint, and its SIGTERM, were followed live
    first = logs[:logs.index("== dispatch: submission 2 after preempted")]
    assert f"step {term}" in first, first
    # no application error for a preemption (its SIGTERM is not the application's)
    story = cli.json("history", "pre")
    assert not [e for e in story if e["type"] == "ApplicationErrorRecorded"], story
    # goodput: the work since the last checkpoint of submission 1 is lost, charged to it
    (group,) = cli.json("goodput", "pre")["groups"]
    (lost,) = group["lost_work"]
    assert lost["cause"] == "preempted", group
    # from the checkpoint at step 10 to the container's end, which came after the SIGTERM at
    # step ``term`` (each step sleeps 0.5 s): its grace is counted, less the end's stamp,
    # which is whole seconds
    assert lost["seconds"] >= max(0.5, (int(term) - 10) * 0.5 - 1), (term, group)
    badput = {b["cause"]: b["node_seconds"] for b in group["badput"]}
    assert badput["preempted"] >= lost["node_seconds"]


# ---- 6. dispatch.Executor on the real nodes -------------------------------------------------

def where_am_i(x: int) -> dict[str, Any]:
    import socket
    return {"x": x * 2, "pod": os.environ.get("DISPATCH_POD_NAME"),
            "host": socket.gethostname()}


def fails_in_the_pod(x: int) -> int:
    raise ValueError(f"boom in the pod with {x}")


def test_an_executor_function_runs_in_a_real_pod(
        namespace: str, real_runtime: str, work: Path, tmp_path: Path) -> None:
    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # no test module in the pod
    try:
        # the pod's `python` (the Executor runs `python -I -m dispatch.fn`) is this
        # checkout's venv's: the runtime's PATH puts it first, as an image puts its own
        ex = dispatch.Executor(work / "calls", backend="kubeflow",
                               store=str(tmp_path / "record.sqlite3"), nodes=1,
                               kubeflow=section(namespace, real_runtime, work))
        job = ex.submit(where_am_i, 21)
        value = job.result(timeout=300, poll=0.5)
        assert value["x"] == 42
        assert value["pod"] and value["pod"].startswith(job.status().objects[-1]
                                                        .split("/")[-1])
        failing = ex.submit(fails_in_the_pod, 7)
        with pytest.raises(FunctionFailed) as caught:
            failing.result(timeout=300, poll=0.5)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    err = caught.value
    assert err.remote is not None
    assert "ValueError: boom in the pod with 7" in str(err)
    assert "fails_in_the_pod" in err.remote.traceback, err.remote.traceback
    assert err.status.cause.kind is dispatch.CauseKind.NON_ZERO_EXIT
    app = err.status.error
    assert app is not None and app.message == "ValueError: boom in the pod with 7", app
    assert app.source.value == "torchelastic-error-file", app
