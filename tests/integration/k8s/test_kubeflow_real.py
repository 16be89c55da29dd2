"""Issue 35's scenarios: dispatch end to end (the real CLI, a real SQLite record) against the
real control plane: Trainer v2 and JobSet over the real Job controller, scheduler and node
lifecycle, with KWOK nodes whose "containers" do what each job's env asks
(scripts/k8s-testbed.d/pod-stages.yaml). The identity is the testbed's least-privilege one."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from k8s_helpers import TESTBED, kubectl, ready_pods
from tests.e2e.conftest import Dispatch

RESUBMIT = {"rules": [{"on": ["preempted", "node-lost"], "action": "resubmit", "budget": 2},
                      {"on": ["non-zero-exit"], "action": "resubmit", "budget": 1}]}


def spec(d: Dispatch, namespace: str, name: str, env: dict[str, str], *, nodes: int = 1,
         runtime: str = "torch-distributed", kubeflow: dict[str, Any] | None = None,
         **fields: Any) -> Path:
    section = {"namespace": namespace, "runtime": runtime, **(kubeflow or {})}
    return d.spec(name, ["python", "train.py"], backend="kubeflow", nodes=nodes, env=env,
                  kubeflow=section, **fields)


# The testbed's runtime with Kubernetes' own restarts off (restartPolicy Never, backoffLimit 0)
# and the low priority class: docs/kubeflow.md "Who restarts what".
DISPATCH_RUNTIME = "dispatch-torch"


def run(d: Dispatch, path: Path, timeout: float = 300) -> tuple[int, dict[str, Any]]:
    done = d("run", str(path), "--json", "--poll", "0.5", timeout=timeout)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {done.returncode}\n{done.stdout}\n{done.stderr}") from None


def kind(st: dict[str, Any]) -> str | None:
    return st["cause"]["kind"] if st.get("cause") else None


def causes_in_history(d: Dispatch, name: str) -> list[str]:
    return [h["cause"]["kind"] for h in d.status(name)["history"] if h.get("cause")]


def test_success(cli: Dispatch, namespace: str) -> None:
    code, st = run(cli, spec(cli, namespace, "ok", {"DISPATCH_TESTBED_SECONDS": "2"}, nodes=2))
    assert code == 0, st
    assert st["state"] == "succeeded" and kind(st) == "none"
    assert st["backend"] == "kubeflow"


def test_exit_3_is_a_non_zero_exit_with_its_code_never_a_lost_node(
        cli: Dispatch, namespace: str) -> None:
    # The stock runtime: JobSet's webhook defaults the pods to restartPolicy OnFailure, so the
    # container crash-loops in place until the Job's backoffLimit, and the Job controller
    # deletes the pod before JobSet and the TrainJob say Failed. The exit code and the
    # termination message must survive that, and the rule's budget must be what is spent.
    code, st = run(cli, spec(cli, namespace, "exit3", {"DISPATCH_TESTBED_SECONDS": "1",
                                                       "DISPATCH_TESTBED_EXIT": "3",
                                                       "DISPATCH_TESTBED_MESSAGE": "loss is nan"},
                             policy=RESUBMIT))
    assert code != 0
    assert st["state"] == "failed" and kind(st) == "non-zero-exit", st
    assert st["cause"]["exit_code"] == 3, st
    assert st["submissions"] == 2  # the rule's budget of 1, spent once
    recov = [h for h in st["history"] if h["state"] == "recovering"]
    assert recov and all(h["cause"]["kind"] == "non-zero-exit" for h in recov), recov
    assert "node-lost" not in causes_in_history(cli, "exit3")
    app = st["application_error"]
    assert app["exit_code"] == 3 and app["message"] == "loss is nan", app
    assert app["source"] == "termination-message"


def test_oom_killed_is_out_of_memory(cli: Dispatch, namespace: str) -> None:
    code, st = run(cli, spec(cli, namespace, "oom", {"DISPATCH_TESTBED_SECONDS": "1",
                                                    "DISPATCH_TESTBED_OOM": "1"}))
    assert st["state"] == "failed" and kind(st) == "out-of-memory", st


def test_an_image_error_is_launch_failed_while_kubernetes_retries(
        cli: Dispatch, namespace: str) -> None:
    # The kubelet keeps retrying a pull: the job stays pending with cause launch-failed and
    # the kubelet's words (a rule may act on it; none here), until a person cancels it.
    proc = cli.spawn("run", str(spec(cli, namespace, "img",
                                     {"DISPATCH_TESTBED_IMAGE_ERROR": "1"})),
                     "--json", "--poll", "0.5")
    st = cli.wait_for("img", lambda s: kind(s) == "launch-failed", timeout=120)
    assert st["state"] == "pending"
    assert "ErrImagePull" in st["cause"]["detail"]
    cli("cancel", "img", check=True)
    out, err = proc.communicate(timeout=120)
    final = json.loads(out)
    assert final["state"] == "cancelled", final


def test_a_lost_node_is_node_lost_then_resubmitted(cli: Dispatch, namespace: str) -> None:
    path = spec(cli, namespace, "lost", {"DISPATCH_TESTBED_SECONDS": "600"}, policy=RESUBMIT)
    proc = cli.spawn("run", str(path), "--json", "--poll", "0.5")
    node = None
    try:
        st = cli.wait_for("lost", lambda s: s["state"] == "running" and bool(s["objects"]),
                          timeout=120)
        trainjob = st["objects"][-1].split("/")[-1]
        selector = f"jobset.sigs.k8s.io/jobset-name={trainjob}"
        (pod,) = ready_pods(namespace, selector)
        node = pod["spec"]["nodeName"]
        subprocess.run([str(TESTBED), "lose-node", node], check=True)
        st = cli.wait_for("lost", lambda s: s["submissions"] >= 2, timeout=240)
    finally:
        if node:
            subprocess.run([str(TESTBED), "restore-node", node], check=False)
        proc.terminate()
        proc.wait(timeout=60)
    kinds = causes_in_history(cli, "lost")
    assert "node-lost" in kinds, st["history"]
    assert "non-zero-exit" not in kinds
    # The stock runtime's Job (backoffLimit 6) replaced the evicted pod on another node while
    # the old one was still Terminating on the lost node: a restart Kubernetes made, in the
    # record as the first submission's execution 0 ended (node-lost, not final) and its
    # execution 1 started, before dispatch's rule resubmitted.
    story = cli.json("history", "lost")
    ended = [h["event"] for h in story if h["type"] == "ExecutionEnded"
             and h["event"]["submission"] == 1 and h["event"]["execution"] == 0]
    assert ended and ended[0]["cause"]["kind"] == "node-lost", story
    assert ended[0]["final"] is False and "a restart Kubernetes made" in ended[0]["cause"]["note"]
    assert [h for h in story if h["type"] == "ExecutionStarted"
            and h["event"]["submission"] == 1 and h["event"]["execution"] == 1], story


def test_exit_3_on_a_runtime_without_native_restarts_fails_at_once(
        cli: Dispatch, namespace: str) -> None:
    code, st = run(cli, spec(cli, namespace, "exit3n", {"DISPATCH_TESTBED_SECONDS": "1",
                                                        "DISPATCH_TESTBED_EXIT": "3",
                                                        "DISPATCH_TESTBED_MESSAGE": "bad batch"},
                             runtime=DISPATCH_RUNTIME))
    assert st["state"] == "failed" and kind(st) == "non-zero-exit", st
    assert st["cause"]["exit_code"] == 3 and st["submissions"] == 1
    assert st["application_error"]["message"] == "bad batch"
    # The application's error where people scan: ls, and the HTTP API's row (same service).
    rows = cli.json("ls", "--all")
    (row,) = [r for r in (rows if isinstance(rows, list) else rows["jobs"])
              if r["name"] == "exit3n"]
    assert "bad batch" in json.dumps(row)


def test_the_time_limit_is_time_limit(cli: Dispatch, namespace: str) -> None:
    code, st = run(cli, spec(cli, namespace, "tl", {"DISPATCH_TESTBED_SECONDS": "600"},
                             runtime=DISPATCH_RUNTIME, time_limit="6s"))
    assert st["state"] == "failed" and kind(st) == "time-limit", st
    # the deadline's SIGTERM is Kubernetes', not the application's error
    assert not st.get("application_error"), st


def test_a_person_deleting_the_trainjob_is_cancelled_never_resubmitted(
        cli: Dispatch, namespace: str) -> None:
    proc = cli.spawn("run", str(spec(cli, namespace, "del", {"DISPATCH_TESTBED_SECONDS": "600"},
                                     runtime=DISPATCH_RUNTIME, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    st = cli.wait_for("del", lambda s: s["state"] == "running" and bool(s["objects"]),
                      timeout=120)
    kubectl("delete", "trainjob", st["objects"][-1].split("/")[-1], "-n", namespace)
    out, err = proc.communicate(timeout=180)
    final = json.loads(out)
    assert final["state"] == "cancelled", final
    assert final["submissions"] == 1  # S14: never resubmitted


def test_more_nodes_than_the_cluster_has_is_pending_with_the_schedulers_words(
        cli: Dispatch, namespace: str) -> None:
    # the four placed pods run on (600 s): the fifth stays unschedulable, a lasting state,
    # not the two seconds KWOK's default run would leave before freeing a node
    proc = cli.spawn("run", str(spec(cli, namespace, "big", {"DISPATCH_TESTBED_SECONDS": "600"},
                                     nodes=5,
                                     runtime=DISPATCH_RUNTIME,
                                     kubeflow={"resourcesPerNode": {"requests": {"cpu": "8"}}})),
                     "--json", "--poll", "0.5")
    st = cli.wait_for("big", lambda s: bool(s.get("cause")) and "Unschedulable" in
                      s["cause"].get("detail", ""), timeout=120)
    assert st["state"] == "pending", st
    cli("cancel", "big", check=True)
    out, _ = proc.communicate(timeout=120)
    assert json.loads(out)["state"] == "cancelled"


def test_a_trainjob_the_webhooks_reject_is_bad_input_at_submit(
        cli: Dispatch, namespace: str) -> None:
    done = cli("submit", str(spec(cli, namespace, "nort", {}, runtime="no-such-runtime")))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "no-such-runtime" in done.stderr


def test_a_real_preemption_is_recovered_without_spending_the_failure_budget(
        cli: Dispatch, namespace: str) -> None:
    # dispatch's job holds one whole node (8 CPUs) at the low priority; a person's Job of the
    # high priority class asks for all four nodes: the scheduler preempts dispatch's pod.
    proc = cli.spawn("run", str(spec(cli, namespace, "pre", {"DISPATCH_TESTBED_SECONDS": "600"},
                                     runtime=DISPATCH_RUNTIME, policy=RESUBMIT,
                                     kubeflow={"resourcesPerNode": {"requests": {"cpu": "8"}}})),
                     "--json", "--poll", "0.5")
    hog = "hog-" + str(id(proc))[-6:]
    try:
        st = cli.wait_for("pre", lambda s: s["state"] == "running" and bool(s["objects"]),
                          timeout=120)
        trainjob = st["objects"][-1].split("/")[-1]
        ready_pods(namespace, f"jobset.sigs.k8s.io/jobset-name={trainjob}")
        kubectl("apply", "-f", "-", input=json.dumps({
            "apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": hog, "namespace": namespace},
            "spec": {"parallelism": 4, "completions": 4, "backoffLimit": 0,
                     "template": {"spec": {
                         "restartPolicy": "Never", "priorityClassName": "dispatch-testbed-high",
                         "containers": [{"name": "c", "image": "busybox",
                                         "env": [{"name": "DISPATCH_TESTBED_SECONDS",
                                                  "value": "8"}],
                                         "resources": {"requests": {"cpu": "8"}}}]}}}}))
        st = cli.wait_for("pre", lambda s: s["submissions"] >= 2, timeout=240)
        st = cli.wait_for("pre", lambda s: s["state"] == "running", timeout=240)
    finally:
        kubectl("delete", "job", hog, "-n", namespace, "--wait=false", check=False)
        cli("cancel", "pre")
        proc.communicate(timeout=120)
    recov = [h for h in st["history"] if h["state"] == "recovering"]
    assert [h["cause"]["kind"] for h in recov] == ["preempted"], st["history"]
    assert "PreemptionByScheduler" in recov[0]["cause"]["detail"]
    # S9: a preemption never spends the failure budget.
    used = st["budget_used"]  # keyed by the rule's name, "non-zero-exit (resubmit)"
    assert used == {"preempted, node-lost (resubmit)": 1, "non-zero-exit (resubmit)": 0}, used
