"""Issue 35's scenarios: dispatch end to end (the real CLI, a real SQLite record) against the
real control plane: Trainer v2 and JobSet over the real Job controller, scheduler and node
lifecycle, with KWOK nodes whose "containers" do what each job's env asks
(scripts/k8s-testbed.d/pod-stages.yaml). The identity is the testbed's least-privilege one."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from k8s_helpers import TESTBED, items, kubectl
from tests.e2e.conftest import Dispatch

RESUBMIT = {"rules": [{"on": ["preempted", "node-lost"], "action": "resubmit", "budget": 2},
                      {"on": ["non-zero-exit"], "action": "resubmit", "budget": 1}]}


@pytest.fixture
def cli(tmp_path: Path, namespace: str) -> Iterator[Dispatch]:
    d = Dispatch(tmp_path)
    d.env["DISPATCH_KUBEFLOW_NODE_LOSS_WINDOW"] = "90s"
    try:
        yield d
    finally:
        d.close()
        for name in [p.stem for p in tmp_path.glob("*.yaml")]:
            done = d("status", name, "--json")
            if done.returncode == 0:
                for ref in json.loads(done.stdout).get("objects", []):
                    kubectl("delete", "trainjob", ref.split("/")[-1], "-n", namespace,
                            "--wait=false", check=False)


def spec(d: Dispatch, namespace: str, name: str, env: dict[str, str], *, nodes: int = 1,
         **fields: Any) -> Path:
    return d.spec(name, ["python", "train.py"], backend="kubeflow", nodes=nodes, env=env,
                  kubeflow={"namespace": namespace, "runtime": "torch-distributed"}, **fields)


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
        kubectl("wait", "pod", "-n", namespace, "-l", selector, "--for=condition=Ready",
                "--timeout=120s")
        (pod,) = items("pods", namespace, selector)
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
