"""Issue 46's faults on real containers: scenarios 5 (a lost node), 7 (the stock runtime's
crash loop under the kubelet's real back-off), 8 (cancel), 9 (a person's `kubectl delete pod`
of one rank; the time limit) and the three misreadings a held-out run found (an image that
cannot be pulled, the node-loss window of an execution, a person's suspend), each through
`dispatch run` with a real record, on the testbed's real nodes (`scripts/k8s-testbed up
--real-nodes 2`: a real kubelet, containerd and runc each; docs/k8s-testbed.md).

The training process is ``real_app.APP``, run by the host's Python in the real runtime's
pods; it writes each start and each SIGTERM to the shared directory, where the test reads it."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from k8s_helpers import TESTBED, items, kubectl, ready_pods, state_dir
from real_app import App
from test_kubeflow_real import RESUBMIT, causes_in_history, kind, run
from tests.e2e.conftest import Dispatch

pytestmark = pytest.mark.real_nodes

NODE_1, NODE_2 = "real-node-1", "real-node-2"
JOBSET = "jobset.sigs.k8s.io/jobset-name"
REAL_LABEL = "dispatch.testbed/real"


@pytest.fixture
def app(real_shared: Path) -> App:
    return App(real_shared)


def real_spec(cli: Dispatch, namespace: str, name: str, command: list[str], runtime: str, *,
              nodes: int = 1, kubeflow: dict[str, Any] | None = None, **fields: Any) -> Path:
    """A job of ``command`` on the real nodes (``runtime``: the real one or a variant)."""
    section = {"namespace": namespace, "runtime": runtime,
               "node_selector": {REAL_LABEL: "true"}, **(kubeflow or {})}
    return cli.spec(name, command, backend="kubeflow", nodes=nodes, kubeflow=section, **fields)


def _time(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _history(cli: Dispatch, job: str) -> list[dict[str, Any]]:
    return list(cli.json("history", job))


def _of(story: list[dict[str, Any]], kind_: str) -> list[dict[str, Any]]:
    return [h for h in story if h["type"] == kind_]


def _pods_of(namespace: str, trainjob: str) -> list[dict[str, Any]]:
    return items("pods", namespace, f"{JOBSET}={trainjob}")


def _finish(proc: subprocess.Popen[str], timeout: float = 300) -> tuple[dict[str, Any], str]:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        out, err = proc.communicate(timeout=60)
        raise AssertionError(f"`dispatch run` did not end:\n{out}\n{err[-4000:]}") from None
    try:
        return json.loads(out), err
    except json.JSONDecodeError:
        raise AssertionError(f"`dispatch run` printed no JSON:\n{out}\n{err[-4000:]}") from None


class Container(NamedTuple):
    """A container in a real node's containerd (its k8s.io namespace), and its task's status
    (None: no task)."""

    id: str
    pod: str
    task: str | None


def node_containers(node: str) -> list[Container]:
    """Every container of real node ``node``'s containerd, through the testbed's `ctr` in the
    node's mount namespace (where its containerd runs), each with its pod and task."""
    state = state_dir()
    pid = (state / "run" / f"containerd-{node}.pid").read_text().strip()
    # its socket where the node's namespace has it (scripts/k8s-testbed.d/real-nodes, nsctr)
    ctr = ["nsenter", f"--mount=/proc/{pid}/ns/mnt", "--", str(state / "bin" / "ctr"),
           "--address", "/run/containerd/containerd.sock", "-n", "k8s.io"]

    def said(*args: str, check: bool = True) -> str:
        return subprocess.run([*ctr, *args], capture_output=True, text=True, check=check,
                              timeout=60).stdout

    tasks = {line.split()[0]: line.split()[2] for line in said("tasks", "ls").splitlines()[1:]
             if len(line.split()) >= 3}
    out = []
    for cid in said("containers", "ls", "-q").split():
        info = said("containers", "info", cid, check=False)
        if not info.strip():
            continue  # removed since the list (the kubelet's garbage collection)
        labels = json.loads(info).get("Labels") or {}
        out.append(Container(cid, labels.get("io.kubernetes.pod.name", ""), tasks.get(cid)))
    return out


def _cordon(node: str, on: bool) -> None:
    kubectl("cordon" if on else "uncordon", node, check=on)


# -- scenario 5: a lost node -------------------------------------------------------------------


def test_a_lost_real_node_is_fenced_and_the_replacement_waits_for_the_old_pod(
        cli: Dispatch, namespace: str, real_runtime: str, app: App) -> None:
    # A 1-node job on real-node-1 (real-node-2 cordoned until the pod is bound there); its
    # kubelet is killed (the container runs on, as on a real dead node). dispatch reads
    # node-lost, and past the window stops the TrainJob and resubmits behind a closed gate;
    # the old pod stays Terminating while no kubelet can end it, so the gate stays closed
    # until restore-node lets the kubelet kill it (S11). The replacement runs on real-node-2
    # (real-node-1 cordoned by the person who lost it).
    cli.env["DISPATCH_KUBEFLOW_NODE_LOSS_WINDOW"] = "20s"
    lost = False
    _cordon(NODE_2, True)
    proc = cli.spawn("run", str(real_spec(cli, namespace, "lost", app.command("submission-1-long"),
                                          real_runtime, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    try:
        st = cli.wait_for("lost", lambda s: s["state"] == "running" and bool(s["objects"]),
                          timeout=180)
        first = st["objects"][-1].split("/")[-1]
        (old,) = ready_pods(namespace, f"{JOBSET}={first}")
        assert old["spec"]["nodeName"] == NODE_1, old["spec"]
        app.wait("start", sub="1")
        _cordon(NODE_2, False)
        subprocess.run([str(TESTBED), "lose-node", NODE_1], check=True, timeout=120)
        lost = True
        _cordon(NODE_1, True)
        # fenced and resubmitted behind the gate: committed, so waited for
        st = cli.wait_for("lost", lambda s: s["submissions"] >= 2 and len(s["objects"]) >= 2,
                          timeout=300)
        second = st["objects"][-1].split("/")[-1]
        story = _history(cli, "lost")
        stops = _of(story, "StopRequested")
        assert stops and stops[0]["event"]["cause"]["kind"] == "node-lost", story
        ended = [h["event"] for h in _of(story, "ExecutionEnded")
                 if h["event"]["submission"] == 1]
        assert [e["cause"]["kind"] for e in ended] == ["node-lost"], ended
        assert "node-lost" in causes_in_history(cli, "lost")
        # The old pod cannot end while its node has no kubelet: the gate stays closed.
        (still,) = [p for p in _pods_of(namespace, first) if p["metadata"]["name"]
                    == old["metadata"]["name"]]
        assert still["metadata"].get("deletionTimestamp"), still["metadata"]
        assert not app.said("sigterm"), app.events()  # the process still runs there
        assert not _of(_history(cli, "lost"), "GateOpened"), _history(cli, "lost")
        gated = json.loads(kubectl("get", "trainjob", second, "-n", namespace, "-o",
                                   "json").stdout)
        assert gated["spec"].get("suspend") is True, gated["spec"]
        assert not _pods_of(namespace, second)
        said = cli.status("lost")
        assert said["state"] in ("recovering", "pending"), said
        # The node comes back: its kubelet ends the old pod (SIGTERM reaches the process),
        # the pod goes, and only then the gate opens.
        restored = datetime.now(UTC)
        subprocess.run([str(TESTBED), "restore-node", NODE_1], check=True, timeout=120)
        lost = False
        final, err = _finish(proc)
    finally:
        if lost:
            subprocess.run([str(TESTBED), "restore-node", NODE_1], check=False, timeout=120)
        _cordon(NODE_1, False)
        _cordon(NODE_2, False)
        if proc.poll() is None:
            proc.terminate()
            proc.wait(timeout=60)
    assert final["state"] == "succeeded" and final["submissions"] == 2, (final, err[-3000:])
    (term,) = app.said("sigterm", sub="1")
    story = _history(cli, "lost")
    (gate,) = _of(story, "GateOpened")
    opened = _time(gate["at"])
    assert opened >= restored, (gate, restored)
    # the old process had ended (its SIGTERM handler wrote this just before exit 143) before
    # the record opened the gate
    assert opened.timestamp() >= term[0], (gate, term)
    starts = [h["event"] for h in _of(story, "ExecutionStarted")]
    assert [s["submission"] for s in starts] == [1, 2], starts
    # the replacement ran on real-node-2 (its pod, kept Succeeded under restartPolicy Never)
    assert [p["spec"]["nodeName"] for p in _pods_of(namespace, second)] == [NODE_2]
    (second_start,) = app.said("start", sub="2")
    assert second_start[0] >= term[0], app.events()
    assert final["budget_used"]["preempted, node-lost (resubmit)"] == 1, final


# -- scenario 7: the stock runtime (restartPolicy OnFailure): a real crash loop ---------------


@pytest.fixture
def onfailure_runtime(real_runtime: str) -> Iterator[str]:
    """The real runtime as the stock one restarts: restartPolicy OnFailure, and a
    backoffLimit of 3 (the stock 6 under the kubelet's real back-off, 10 s doubling, would
    take ten minutes), the image pulled IfNotPresent."""
    body = json.loads(kubectl("get", "clustertrainingruntime", real_runtime, "-o",
                              "json").stdout)
    name = f"{real_runtime}-onfailure-{uuid.uuid4().hex[:6]}"
    body["metadata"] = {"name": name, "labels": body["metadata"].get("labels", {})}
    for rjob in body["spec"]["template"]["spec"]["replicatedJobs"]:
        job = rjob["template"]["spec"]
        job["backoffLimit"] = 3
        pod = job["template"]["spec"]
        pod["restartPolicy"] = "OnFailure"
        for c in pod.get("containers", []):
            c["imagePullPolicy"] = "IfNotPresent"
    kubectl("apply", "-f", "-", input=json.dumps(body))
    try:
        yield name
    finally:
        kubectl("delete", "clustertrainingruntime", name, "--wait=false", check=False)


def test_a_real_crash_loop_is_recovering_with_the_real_exit_code_then_failed(
        cli: Dispatch, namespace: str, onfailure_runtime: str, app: App) -> None:
    # Three starts exit 3; the Job's backoffLimit (3 restarts) is reached when the kubelet
    # restarts it a third time, and the Job controller deletes the pod while that fourth run
    # runs (deaf to SIGTERM: 137 at the grace's end). dispatch reads recovering while the
    # kubelet backs off (the container shown terminated in a Running pod: 10 s after the
    # second crash, 20 s after the third), with the real exit code and restart count, then
    # failed with the crash's exit code and message, never the kill's 137.
    proc = cli.spawn("run", str(real_spec(cli, namespace, "loop", app.command("crash", 3),
                                          onfailure_runtime)), "--json", "--poll", "0.5")
    try:
        app.wait("exit 3", 2)
        st = cli.wait_for("loop", lambda s: s["state"] == "recovering", timeout=120)
    finally:
        final, err = _finish(proc)
    cause = st["cause"]
    assert cause["kind"] == "non-zero-exit" and cause["exit_code"] == 3, st
    assert "restartCount=" in cause["detail"] and "exitCode=3" in cause["detail"], cause
    assert "ValueError: loss is nan" in cause["detail"], cause
    assert "restarted in place by Kubernetes" in cause["note"], cause
    assert final["state"] == "failed" and kind(final) == "non-zero-exit", (final, err[-3000:])
    assert final["cause"]["exit_code"] == 3, final
    assert final["submissions"] == 1
    assert final["application_error"]["message"].startswith("ValueError: loss is nan"), final


# -- scenario 8: cancel -----------------------------------------------------------------------


def test_a_cancel_reaches_the_processes_and_leaves_no_pod_or_container(
        cli: Dispatch, namespace: str, real_runtime: str, app: App) -> None:
    proc = cli.spawn("run", str(real_spec(cli, namespace, "can", app.command("run", 600),
                                          real_runtime, nodes=2)), "--json", "--poll", "0.5")
    try:
        st = cli.wait_for("can", lambda s: s["state"] == "running" and bool(s["objects"]),
                          timeout=180)
        trainjob = st["objects"][-1].split("/")[-1]
        pods = ready_pods(namespace, f"{JOBSET}={trainjob}", count=2)
        names = {p["metadata"]["name"] for p in pods}
        app.wait("start", 2)
        cli("cancel", "can", check=True)
    finally:
        final, err = _finish(proc)
    assert final["state"] == "cancelled", (final, err[-3000:])
    # SIGTERM reached both processes (each wrote it before exit 143)
    assert sorted(e[2] for e in app.said("sigterm")) == ["0", "1"], app.events()
    # cancelled is committed once the pods are gone (S11 for a cancel too)
    assert not _pods_of(namespace, trainjob)
    # no container of theirs left in either node's containerd, nor a task: the kubelet
    # removes a deleted pod's containers (and their sandboxes) from containerd
    left: list[Container] = []
    deadline = time.monotonic() + 180
    while True:
        left = [c for n in (NODE_1, NODE_2) for c in node_containers(n) if c.pod in names]
        assert not [c for c in left if c.task == "RUNNING"], left
        if not left or time.monotonic() > deadline:
            break
        time.sleep(2)
    assert not left, left


# -- scenario 9: a person deletes a pod; the time limit -----------------------------------------


def test_a_person_deleting_one_rank_is_not_an_application_error(
        cli: Dispatch, namespace: str, real_runtime: str, app: App) -> None:
    # restartPolicy Never, backoffLimit 0: the Job fails when rank 0's pod ends. Rank 0's
    # process got SIGTERM from the deletion and exited 143: the deletion's end, not the
    # application's: unknown with the deletion in the words, no application error.
    proc = cli.spawn("run", str(real_spec(cli, namespace, "rank", app.command("run", 600),
                                          real_runtime, nodes=2, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    try:
        st = cli.wait_for("rank", lambda s: s["state"] == "running" and bool(s["objects"]),
                          timeout=180)
        trainjob = st["objects"][-1].split("/")[-1]
        pods = ready_pods(namespace, f"{JOBSET}={trainjob}", count=2)
        app.wait("start", 2)
        (rank0,) = [p["metadata"]["name"] for p in pods
                    if p["metadata"]["labels"].get("batch.kubernetes.io/job-completion-index")
                    == "0"]
        kubectl("delete", "pod", rank0, "-n", namespace, "--wait=false")
    finally:
        final, err = _finish(proc)
    assert final["state"] == "failed" and kind(final) == "unknown", (final, err[-3000:])
    assert final["cause"]["exit_code"] == 143, final
    # the pod named is one whose deletion ended it: rank 0's (the person's) or rank 1's (the
    # Job controller's, after the Job failed), whichever ended first; both often end in the
    # same second, and Kubernetes' timestamps are whole seconds
    assert trainjob in final["cause"]["detail"] and "deletionTimestamp" in final["cause"]["detail"]
    assert "deleted" in final["cause"]["note"], final["cause"]
    assert not final.get("application_error"), final
    assert final["submissions"] == 1  # unknown: no rule resubmits it
    assert "non-zero-exit" not in causes_in_history(cli, "rank")
    # SIGTERM reached both processes: rank 0's from the person, rank 1's from the Job
    # controller (which counts a pod being deleted as failed at once, so rank 1 may be first)
    assert sorted(e[2] for e in app.said("sigterm")) == ["0", "1"], app.events()


def test_the_time_limit_on_real_containers_is_time_limit_without_an_application_error(
        cli: Dispatch, namespace: str, real_runtime: str, app: App) -> None:
    # The Job's activeDeadlineSeconds: the Job controller deletes the pod; the process, deaf
    # to SIGTERM, is killed at the grace's end (137).
    code, st = run(cli, real_spec(cli, namespace, "tl", app.command("ignore", 600),
                                  real_runtime, time_limit="8s"), timeout=400)
    assert st["state"] == "failed" and kind(st) == "time-limit", st
    assert not st.get("application_error"), st
    assert st["submissions"] == 1
    assert app.said("start"), app.events()
    trainjob = st["objects"][-1].split("/")[-1]
    alive = [p["metadata"]["name"] for p in _pods_of(namespace, trainjob)
             if p["status"].get("phase") in ("Pending", "Running")
             and not p["metadata"].get("deletionTimestamp")]
    assert not alive, alive


# -- the misreadings a held-out run found, again on real nodes ---------------------------------


@pytest.mark.parametrize("pull", ["Never", "IfNotPresent"])
def test_an_image_a_real_kubelet_cannot_pull_never_starts_an_execution(
        cli: Dispatch, namespace: str, real_runtime: str, onfailure_runtime: str,
        pull: str) -> None:
    # The real runtime pulls Never (ErrImageNeverPull); the stock-like one IfNotPresent, and
    # no registry is reachable (ErrImagePull, then ImagePullBackOff). The kubelet sets each
    # pod's status.startTime when it admits it, before any pull: no execution starts.
    runtime = real_runtime if pull == "Never" else onfailure_runtime
    waiting = {"Never": {"ErrImageNeverPull"},
               "IfNotPresent": {"ErrImagePull", "ImagePullBackOff"}}[pull]
    proc = cli.spawn("run", str(real_spec(
        cli, namespace, "pull", ["python3", "-c", "pass"], runtime, nodes=2,
        kubeflow={"image": "dispatch-testbed.invalid/no-such-image:1"})),
        "--json", "--poll", "0.5")
    try:
        st = cli.wait_for("pull", lambda s: kind(s) == "launch-failed"
                          and "2 of 2 pods placed" in str(s["cause"].get("note")), timeout=180)
        assert st["state"] == "pending", st
        assert any(w in st["cause"]["detail"] for w in waiting), st["cause"]
        trainjob = st["objects"][-1].split("/")[-1]
        pods = _pods_of(namespace, trainjob)
        assert len(pods) == 2 and all(p["status"].get("startTime") for p in pods), pods
        assert all(p["spec"]["nodeName"] in (NODE_1, NODE_2) for p in pods), pods
        assert not _of(_history(cli, "pull"), "ExecutionStarted")
        cli("cancel", "pull", check=True)
    finally:
        final, err = _finish(proc)
    assert final["state"] == "cancelled", (final, err[-3000:])
    assert not _of(_history(cli, "pull"), "ExecutionStarted")
    (group,) = cli.json("goodput", "pull")["groups"]
    assert not [p for p in group["parts"] if p["phase"] == "running"], group["parts"]


# dispatch reads a node with this taint as lost, whatever its effect; PreferNoSchedule keeps
# pods schedulable there, and on a Ready node no controller acts on it.
STALE = "node.kubernetes.io/out-of-service"


@pytest.fixture
def stale_real_taints() -> Iterator[str]:
    """Both real nodes carry a lost-node taint added ten minutes ago (what a node just
    restored still carries for a moment), taken off again after the test."""
    added = (datetime.now(UTC) - timedelta(minutes=10)).strftime("%Y-%m-%dT%H:%M:%SZ")
    before = {n: json.loads(kubectl("get", "node", n, "-o", "json").stdout)["spec"].get("taints")
              for n in (NODE_1, NODE_2)}
    try:
        for name, taints in before.items():
            mine = {"key": STALE, "value": "issue-46", "effect": "PreferNoSchedule",
                    "timeAdded": added}
            kubectl("patch", "node", name, "--type", "merge",
                    "-p", json.dumps({"spec": {"taints": [*(taints or []), mine]}}))
        yield added
    finally:
        for name, taints in before.items():
            kubectl("patch", "node", name, "--type", "merge",
                    "-p", json.dumps({"spec": {"taints": taints}}), check=False)


def test_a_run_on_a_real_node_lost_before_it_started_gets_a_whole_window(
        cli: Dispatch, namespace: str, real_runtime: str, app: App,
        stale_real_taints: str) -> None:
    # The node reads lost since ten minutes before the job; the window (20 s) counts from the
    # run's own first moment there, so the 6 s run ends inside it: never fenced.
    cli.env["DISPATCH_KUBEFLOW_NODE_LOSS_WINDOW"] = "20s"
    code, st = run(cli, real_spec(cli, namespace, "stale", app.command("run", 6), real_runtime,
                                  policy=RESUBMIT), timeout=300)
    assert code == 0 and st["state"] == "succeeded", st
    assert st["submissions"] == 1, st
    assert app.said("done"), app.events()
    story = _history(cli, "stale")
    assert [h["event"]["cause"]["kind"] for h in _of(story, "ExecutionEnded")] == ["none"], story
    assert not _of(story, "StopRequested"), story


def test_a_persons_suspend_of_a_real_run_ends_its_execution(
        cli: Dispatch, namespace: str, real_runtime: str, app: App) -> None:
    # The suspend makes the Job controller delete the pod; the kubelet's SIGTERM reaches the
    # process (143). The record ends execution 0 (held, not final); the run after the resume
    # (a new pod: its first run ends in 3 s) is execution 1.
    proc = cli.spawn("run", str(real_spec(cli, namespace, "sus", app.command("first-long"),
                                          real_runtime, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    try:
        st = cli.wait_for("sus", lambda s: s["state"] == "running" and bool(s["objects"]),
                          timeout=180)
        trainjob = st["objects"][-1].split("/")[-1]
        ready_pods(namespace, f"{JOBSET}={trainjob}")
        app.wait("start")
        # committed first: the execution's start (else there is no running execution to end)
        deadline = time.monotonic() + 120
        while not _of(_history(cli, "sus"), "ExecutionStarted"):
            assert time.monotonic() < deadline, _history(cli, "sus")
            time.sleep(0.5)
        kubectl("patch", "trainjob", trainjob, "-n", namespace, "--type", "merge",
                "-p", json.dumps({"spec": {"suspend": True}}))
        held = cli.wait_for("sus", lambda s: s["state"] == "held", timeout=180)
        assert held["cause"]["provenance"] == "scheduler", held
        app.wait("sigterm")
        kubectl("wait", "pod", "-n", namespace, "-l", f"{JOBSET}={trainjob}",
                "--for=delete", "--timeout=180s", timeout=210, check=False)
        kubectl("patch", "trainjob", trainjob, "-n", namespace, "--type", "merge",
                "-p", json.dumps({"spec": {"suspend": False}}))
    finally:
        final, err = _finish(proc)
    assert final["state"] == "succeeded" and final["submissions"] == 1, (final, err[-3000:])
    kinds = causes_in_history(cli, "sus")
    assert not {"node-lost", "preempted", "non-zero-exit", "unknown"} & set(kinds), kinds
    story = _history(cli, "sus")
    ends = [h["event"] for h in _of(story, "ExecutionEnded")]
    starts = [h["event"] for h in _of(story, "ExecutionStarted")]
    assert [(e["execution"], e["cause"]["kind"], e.get("final", True)) for e in ends] == [
        (0, "held", False), (1, "none", True)], ends
    assert [e["execution"] for e in starts] == [0, 1], starts
    held_at = _time(ends[0]["cause"]["at"])
    (term,) = app.said("sigterm")
    # the second run started after the process of the first got its SIGTERM
    assert _time(starts[1]["started"]).timestamp() >= int(term[0]), (starts, term)
    assert _time(starts[0]["started"]) <= held_at <= _time(starts[1]["started"]), (starts, ends)
    (group,) = cli.json("goodput", "sus")["groups"]
    parts = {(p["phase"], p["cause"]): p for p in group["parts"]}
    assert parts[("running", "none")]["seconds"] > 0, parts
