"""Record what the real controllers write, as dispatch's watches see it, for the replay tests
(tests/unit/backends/kubeflow/test_kubeflow_replay.py, test_kubeflow_replay_suspend.py). Run
against a testbed of your own (scripts/k8s-testbed up, the `env` exports: it deletes everything
in the namespace before and after each scenario); it rewrites
tests/fixtures/k8s-recorded/*.jsonl (docs/k8s-testbed.md):

    python tests/integration/k8s/record_fixtures.py [SCENARIO...]

Each scenario is run with the real CLI (`dispatch run`, its own record in a temporary folder),
with what a person or the cluster does meanwhile (Scenario.act), while one watch per
collection dispatch reads (TrainJobs, JobSets, Jobs, Pods and Warning Events of the namespace,
the Nodes) writes every event, in the order this process received them across the watches,
one JSON line each: {"seq", "at" (UTC, when received), "kind", "type", "object"}. The first
lines of each collection are its LIST (type "LISTED"). Objects keep everything but
metadata.managedFields, the last-applied-configuration annotation and a Node's images."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from dispatch.backends.kubeflow.client import ClientSettings, KubeClient, WatchStream
from dispatch.backends.kubeflow.look import NODES, collections_of, events_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[3]))  # tests.*, for the real scenarios
from k8s_helpers import TESTBED, get, items, kubectl, ready_pods  # noqa: E402
from real_app import App  # noqa: E402

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "tests" / "fixtures" / "k8s-recorded"

# The stock runtime: JobSet's webhook defaults its pods to restartPolicy OnFailure, so a failing
# container crash-loops until the Job's backoffLimit. dispatch-torch (the testbed's runtime,
# docs/kubeflow.md "Who restarts what"): restartPolicy Never, backoffLimit 0, low priority.
STOCK, OURS = "torch-distributed", "dispatch-torch"
RESUBMIT = {"rules": [{"on": ["preempted", "node-lost"], "action": "resubmit", "budget": 2},
                      {"on": ["non-zero-exit"], "action": "resubmit", "budget": 1}]}
WHOLE_NODE = {"resourcesPerNode": {"requests": {"cpu": "8"}}}
LONG = {"DISPATCH_TESTBED_SECONDS": "600"}


@dataclass
class Scenario:
    env: dict[str, str]
    nodes: int = 1
    runtime: str = STOCK
    kubeflow: dict[str, Any] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)
    # what a person or the cluster does while `dispatch run` runs (None: let it end)
    act: Callable[[Run], None] | None = None
    # On the real nodes (issue 46): the command, given this scenario's directory in the
    # shared one (its scripts written there), on the real runtime with that directory as
    # a volume and as kubeflow.shared_dir. None: KWOK's pods, whose env says what they do.
    real: Callable[[Path], list[str]] | None = None
    # KWOK's scenarios recorded again on the real nodes where they differ (issue 46):
    # real_app.APP's mode and argument, run on $DISPATCH_K8S_REAL_RUNTIME (``runtime`` and
    # ``env`` unused)
    real_app: tuple[str, int] | None = None


class Run:
    """One scenario's `dispatch run` under way: the person's side (kubectl as the admin, the
    dispatch CLI on the same record)."""

    def __init__(self, name: str, namespace: str, env: dict[str, str],
                 work: Path | None = None) -> None:
        self.name, self.namespace, self.env = f"rec-{name}", namespace, env
        self.work = work  # a real scenario's directory in the shared one

    def dispatch(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "dispatch.cli", *args], env=self.env,
                              capture_output=True, text=True, timeout=120, check=False)

    def status(self) -> dict[str, Any]:
        done = self.dispatch("status", self.name, "--json")
        return json.loads(done.stdout) if done.returncode == 0 else {}

    def until(self, what: str, pred: Callable[[], bool], timeout: float = 240) -> None:
        deadline = time.monotonic() + timeout
        while not pred():
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.name}: never {what}")
            time.sleep(0.5)

    def pods(self, trainjob: str | None = None) -> list[dict[str, Any]]:
        sel = [f"jobset.sigs.k8s.io/jobset-name={trainjob}"] if trainjob else []
        return items("pods", self.namespace, *sel)

    def trainjobs(self) -> list[str]:
        tjs = sorted(items("trainjobs", self.namespace),
                     key=lambda o: o["metadata"]["creationTimestamp"])
        return [o["metadata"]["name"] for o in tjs]

    def running_pod(self) -> dict[str, Any]:
        """The first TrainJob's pod, once it runs."""
        self.until("running", lambda: bool(self.trainjobs()))
        tj = self.trainjobs()[0]
        (pod,) = ready_pods(self.namespace, f"jobset.sigs.k8s.io/jobset-name={tj}")
        return pod

    def cancel(self) -> None:
        self.dispatch("cancel", self.name)


def preempt(run: Run) -> None:
    # The low-priority job holds a whole node; a person's high-priority Job asks for all four:
    # the scheduler preempts dispatch's pod; the rule resubmits (its replacement then waits).
    run.running_pod()
    kubectl("apply", "-f", "-", input=json.dumps({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "rec-hog", "namespace": run.namespace},
        "spec": {"parallelism": 4, "completions": 4, "backoffLimit": 0,
                 "template": {"spec": {
                     "restartPolicy": "Never", "priorityClassName": "dispatch-testbed-high",
                     "containers": [{"name": "c", "image": "busybox",
                                     "env": [{"name": "DISPATCH_TESTBED_SECONDS", "value": "8"}],
                                     "resources": {"requests": {"cpu": "8"}}}]}}}}))
    run.until("resubmitted", lambda: run.status().get("submissions", 0) >= 2)
    run.until("running again", lambda: run.status().get("state") == "running", 120)
    run.cancel()


def preempt_real(run: Run) -> None:
    # The job's one pod takes most of a real node's CPU; once it has checkpointed, a pod of
    # the high priority asks for as much there: the scheduler preempts dispatch's pod, the
    # kubelet gives torchrun SIGTERM and its grace, the rule resubmits, it resumes.
    from test_kubeflow_real_app import high_priority_pod

    pod = run.running_pod()
    run.until("checkpointed", lambda: (Path(run.work) / "checkpointed").exists(), 180)
    cpu = pod["spec"]["containers"][0]["resources"]["requests"]["cpu"]
    kubectl("apply", "-f", "-", input=json.dumps(
        high_priority_pod("rec-high", run.namespace, pod, cpu)))
    try:
        run.until("resubmitted", lambda: run.status().get("submissions", 0) >= 2)
        run.until("ended", lambda: run.status().get("settled", False), 300)
    finally:
        kubectl("delete", "pod", "rec-high", "-n", run.namespace, "--wait=false", check=False)


def _real_scripts() -> Any:
    import test_kubeflow_real_app as real

    return real


def _real(script: str, *args: str, torch: bool = True) -> Callable[[Path], list[str]]:
    """A real scenario's command: ``script`` (a text of test_kubeflow_real_app) written to
    the scenario's directory, run by torchrun (c10d) or by this venv's python."""
    def command(work: Path) -> list[str]:
        real = _real_scripts()
        path = real.write(work / f"{script.lower()}.py", getattr(real, script))
        return real.torchrun(path, *args) if torch else [real.PYTHON, str(path), *args]
    return command


def lose_node(run: Run) -> None:
    # The node goes (taint eviction; its pod stays Terminating with no kubelet), dispatch
    # resubmits behind a closed gate; the node comes back, the old pod ends, the gate opens.
    node = run.running_pod()["spec"]["nodeName"]
    try:
        subprocess.run([str(TESTBED), "lose-node", node], check=True)
        run.until("resubmitted", lambda: run.status().get("submissions", 0) >= 2)
        time.sleep(3)
    finally:
        subprocess.run([str(TESTBED), "restore-node", node], check=True)
    run.until("running again", lambda: run.status().get("state") == "running", 120)
    run.cancel()


def flap_node(run: Run) -> None:
    # The node's Ready goes Unknown (tainted unreachable) and comes back inside the 20 s
    # toleration: nothing is evicted, the job runs on and succeeds.
    node = run.running_pod()["spec"]["nodeName"]

    def unknown() -> bool:
        conds = get("node", node, "")["status"].get("conditions", [])
        return any(c["type"] == "Ready" and c["status"] == "Unknown" for c in conds)

    try:
        subprocess.run([str(TESTBED), "lose-node", node], check=True)
        run.until("Ready Unknown", unknown, 60)
        time.sleep(4)
    finally:
        subprocess.run([str(TESTBED), "restore-node", node], check=True)


def delete_trainjob(run: Run) -> None:
    run.running_pod()
    kubectl("delete", "trainjob", run.trainjobs()[0], "-n", run.namespace)


def delete_rank_0(run: Run) -> None:
    # A person's `kubectl delete pod` of rank 0 once both ranks run (issue 46, real nodes):
    # its process gets SIGTERM (exit 143); the Job (backoffLimit 0) fails.
    run.until("running", lambda: bool(run.trainjobs()))
    tj = run.trainjobs()[0]
    pods = ready_pods(run.namespace, f"jobset.sigs.k8s.io/jobset-name={tj}", count=2)
    (rank0,) = [p["metadata"]["name"] for p in pods
                if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index") == "0"]
    time.sleep(2)
    kubectl("delete", "pod", rank0, "-n", run.namespace, "--wait=false")


def suspend_resume(said_running: bool) -> Callable[[Run], None]:
    """Scenario 7': a person suspends the running TrainJob with kubectl (Trainer suspends the
    JobSet, the Job controller deletes the pod); once dispatch says held and the pod is gone,
    the person resumes it: the pod is made again and the job runs to its end. The suspend
    comes as soon as the pod is Ready (as in test_kubeflow_suspend.py), or ``said_running``:
    once dispatch's own status says running, 2 s later."""

    def act(run: Run) -> None:
        run.running_pod()
        if said_running:
            run.until("said running", lambda: run.status().get("state") == "running", 60)
            time.sleep(2)
        tj = run.trainjobs()[0]

        def patch(value: bool) -> None:
            kubectl("patch", "trainjob", tj, "-n", run.namespace, "--type", "merge",
                    "-p", json.dumps({"spec": {"suspend": value}}))

        patch(True)
        run.until("held", lambda: run.status().get("state") == "held", 120)
        run.until("its pod gone", lambda: not run.pods(tj), 120)
        time.sleep(3)
        patch(False)

    return act


def pods_say(word: str) -> Callable[[Run], None]:
    """Wait until a pod shows the scheduler's or the kubelet's ``word``, then cancel."""

    def act(run: Run) -> None:
        run.until(word, lambda: word in json.dumps(run.pods()), 120)
        time.sleep(3)
        run.cancel()

    return act


SCENARIOS: dict[str, Scenario] = {
    "success": Scenario({"DISPATCH_TESTBED_SECONDS": "2"}, nodes=2),
    "exit3": Scenario({"DISPATCH_TESTBED_SECONDS": "1", "DISPATCH_TESTBED_EXIT": "3",
                       "DISPATCH_TESTBED_MESSAGE": "loss is nan at step 7"}),
    "exit3-never": Scenario({"DISPATCH_TESTBED_SECONDS": "1", "DISPATCH_TESTBED_EXIT": "3",
                             "DISPATCH_TESTBED_MESSAGE": "bad batch"}, runtime=OURS),
    "oom": Scenario({"DISPATCH_TESTBED_SECONDS": "1", "DISPATCH_TESTBED_OOM": "1"}),
    "preempted": Scenario(LONG, runtime=OURS, kubeflow=WHOLE_NODE,
                          fields={"policy": RESUBMIT}, act=preempt),
    "node-lost": Scenario(LONG, fields={"policy": RESUBMIT}, act=lose_node),
    "node-flap": Scenario({"DISPATCH_TESTBED_SECONDS": "45"}, fields={"policy": RESUBMIT},
                          act=flap_node),
    # real containers: Python as PID 1 deaf to SIGTERM ends 137 at the grace's end (KWOK: 143)
    "time-limit": Scenario({}, fields={"time_limit": "6s"}, real_app=("ignore", 600)),
    "deleted": Scenario({}, fields={"policy": RESUBMIT}, act=delete_trainjob,
                        real_app=("ignore", 600)),
    "pod-deleted": Scenario({}, nodes=2, fields={"policy": RESUBMIT}, act=delete_rank_0,
                            real_app=("run", 600)),
    "unschedulable": Scenario(LONG, nodes=5, runtime=OURS, kubeflow=WHOLE_NODE,
                              act=pods_say("Unschedulable")),
    "image-pull": Scenario({"DISPATCH_TESTBED_IMAGE_ERROR": "1"}, act=pods_say("ErrImagePull")),
    "suspend-resume": Scenario({"DISPATCH_TESTBED_SECONDS": "20"}, runtime=OURS,
                               fields={"policy": RESUBMIT}, act=suspend_resume(False)),
    "suspend-resume-late": Scenario({"DISPATCH_TESTBED_SECONDS": "20"}, runtime=OURS,
                                    fields={"policy": RESUBMIT}, act=suspend_resume(True)),
    # On the real nodes (issue 46): real processes, a real kubelet's words and exit codes.
    "real-success": Scenario({}, nodes=2, real=_real("ALL_REDUCE")),
    "real-exit": Scenario({}, nodes=2, real=_real("RAISES")),
    "real-oom": Scenario({}, real=_real("HOG", torch=False), fields={"memory": "256Mi"}),
    "real-preempted": Scenario({}, real=_real("RESUMABLE", "40"), act=preempt_real,
                               fields={"policy": RESUBMIT}),
}


def clean(namespace: str) -> None:
    """Nothing of an earlier scenario left (this deletes everything in the namespace: point
    the recorder at a testbed of your own), every node managed by KWOK again."""
    kubectl("delete", "trainjobs,jobsets,jobs", "--all", "-n", namespace, "--wait=true",
            "--timeout=120s")
    for node in ("kwok-node-1", "kwok-node-2", "kwok-node-3", "kwok-node-4"):
        subprocess.run([str(TESTBED), "restore-node", node], check=True, capture_output=True)
    kubectl("delete", "pods,events", "--all", "-n", namespace, "--wait=true", "--timeout=120s")


# What no reader needs: a person's kubectl apply of the Node, a Node's images.
def slim(obj: dict[str, Any]) -> None:
    md = obj.get("metadata", {})
    md.pop("managedFields", None)
    (md.get("annotations") or {}).pop("kubectl.kubernetes.io/last-applied-configuration", None)
    (obj.get("status") or {}).pop("images", None)


class Recorder:
    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.lines: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.streams: list[WatchStream] = []
        self.threads: list[threading.Thread] = []
        self.ready = threading.Barrier(len(collections_of(namespace)) + 3)
        for w in [*collections_of(namespace), events_of(namespace), NODES]:
            t = threading.Thread(target=self._watch, args=(w,), daemon=True)
            self.threads.append(t)
            t.start()
        self.ready.wait(timeout=60)

    def _add(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        slim(obj)
        with self.lock:
            self.lines.append(
                {
                    "seq": len(self.lines) + 1,
                    "at": datetime.now(UTC).isoformat(),
                    "kind": kind,
                    "type": etype,
                    "object": obj,
                }
            )

    def _watch(self, w: Any) -> None:
        kind = w.res._api_info.resource.kind
        items, rv = self.kube.list_versioned(w.res, w.namespace, dict(w.labels), dict(w.fields))
        for obj in items:
            self._add(kind, "LISTED", obj)
        stream = self.kube.open_watch(w.res, w.namespace, dict(w.labels), rv, 600, dict(w.fields))
        with self.lock:
            self.streams.append(stream)
        self.ready.wait(timeout=60)
        try:
            for etype, obj in stream.events():
                if etype != "BOOKMARK":
                    self._add(kind, etype, obj)
        except Exception:  # noqa: BLE001 - aborted at the end
            if not self.stopping.is_set():
                raise

    def stop(self) -> list[dict[str, Any]]:
        self.stopping.set()
        with self.lock:
            for s in self.streams:
                s.abort()
        for t in self.threads:
            t.join(10)
        return self.lines


def record(name: str, namespace: str) -> Path:
    sc = SCENARIOS[name]
    clean(namespace)
    kube = KubeClient(ClientSettings(kubeconfig=os.environ["DISPATCH_KUBECONFIG"]))
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / f"{name}.yaml"
        command, section = ["python", "train.py"], {"runtime": sc.runtime, **sc.kubeflow}
        work = None
        if sc.real_app is not None:
            command = App(Path(os.environ["DISPATCH_K8S_REAL_SHARED"])).command(*sc.real_app)
            section = {**section, "runtime": os.environ["DISPATCH_K8S_REAL_RUNTIME"],
                       "node_selector": {"dispatch.testbed/real": "true"}}
        if sc.real is not None:
            work = Path(os.environ["DISPATCH_K8S_REAL_SHARED"]) / f"rec-{name}"
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(mode=0o755)
            command = sc.real(work)
            section = {**_real_scripts().section(namespace, os.environ[
                "DISPATCH_K8S_REAL_RUNTIME"], work), **sc.kubeflow}
            if sc.act is preempt_real:
                section["resourcesPerNode"] = {"requests": {"cpu": _real_scripts().busy_cpu()}}
        spec.write_text(
            yaml.safe_dump(
                {
                    "name": f"rec-{name}",
                    "backend": "kubeflow",
                    "command": command,
                    "nodes": sc.nodes,
                    "env": sc.env,
                    "kubeflow": {"namespace": namespace, **section},
                    **sc.fields,
                }
            )
        )
        env = {
            **os.environ,
            "DISPATCH_STORE": str(Path(tmp) / "record.sqlite3"),
            "XDG_STATE_HOME": str(Path(tmp) / "state"),
            # a lost node is acted on 30 s after it is seen lost (the default is 5 min)
            "DISPATCH_KUBEFLOW_NODE_LOSS_WINDOW": "30s",
        }
        recorder = Recorder(kube, namespace)
        proc = subprocess.Popen(
            [sys.executable, "-m", "dispatch.cli", "run", str(spec), "--json", "--poll", "0.5"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            if sc.act is not None:
                sc.act(Run(name, namespace, env, work))
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        time.sleep(2)  # the controllers' last words after dispatch's end
        lines = recorder.stop()
        final = json.loads(out) if out.strip() else {"state": f"no JSON: {err[-500:]}"}
    kube.close()
    clean(namespace)
    if work is not None:  # a replay reads no file of the recording's (it is not hermetic)
        shutil.rmtree(work, ignore_errors=True)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    print(
        f"{path}: {len(lines)} events, {path.stat().st_size} bytes; dispatch said "
        f"{final['state']} / {(final.get('cause') or {}).get('kind')}, "
        f"{final.get('submissions')} submission(s)"
    )
    return path


if __name__ == "__main__":
    for scenario in sys.argv[1:] or list(SCENARIOS):
        record(scenario, os.environ.get("DISPATCH_K8S_NAMESPACE", "dispatch"))
