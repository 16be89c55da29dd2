"""Issue 35's faults on the real control plane: the API server restarted under dispatch's
watches, etcd compacted under them, the API server stalled (stopped, its connections open,
no bookmark), and the controllers killed and restarted mid-job. The informer recovers; the
job's end is read once, right, and nothing is submitted twice; a look that cannot be completed
is reported as such, never as an ended job (S16)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from typing import Any

import pytest
from k8s_helpers import TESTBED, component_pid, etcd_compact, kubectl
from test_kubeflow_real import DISPATCH_RUNTIME, RESUBMIT, kind, spec
from tests.e2e.conftest import Dispatch

from dispatch.backends.kubeflow.client import ClientSettings, KubeClient, PodRes, WatchExpired
from dispatch.backends.kubeflow.look import IN_A_JOBSET


def _succeeded_once(proc: subprocess.Popen[str],
                    timeout: float = 240) -> tuple[dict[str, Any], str]:
    """The `run`'s final status (succeeded, submitted once, never recovering) and its stderr."""
    out, err = proc.communicate(timeout=timeout)
    final: dict[str, Any] = json.loads(out)
    assert final["state"] == "succeeded" and kind(final) == "none", (final, err[-2000:])
    assert final["submissions"] == 1
    assert not [h for h in final["history"] if h["state"] == "recovering"], final["history"]
    return final, err


@pytest.mark.parametrize("components", [
    ("kube-apiserver",),
    ("trainer", "jobset", "kube-controller-manager"),
], ids=["apiserver", "controllers"])
def test_a_restart_mid_job_loses_nothing_and_submits_once(
        cli: Dispatch, namespace: str, components: tuple[str, ...]) -> None:
    name = "fault-" + components[0].split("-")[-1]
    proc = cli.spawn("run", str(spec(cli, namespace, name, {"DISPATCH_TESTBED_SECONDS": "25"},
                                     runtime=DISPATCH_RUNTIME, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    cli.wait_for(name, lambda s: s["state"] == "running" and bool(s["objects"]), timeout=120)
    subprocess.run([str(TESTBED), "restart", *components], check=True, timeout=180)
    _succeeded_once(proc)


def test_etcd_compacted_under_the_watches_loses_nothing_and_submits_once(
        cli: Dispatch, namespace: str) -> None:
    proc = cli.spawn("run", str(spec(cli, namespace, "compact",
                                     {"DISPATCH_TESTBED_SECONDS": "30"},
                                     runtime=DISPATCH_RUNTIME, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    cli.wait_for("compact", lambda s: s["state"] == "running" and bool(s["objects"]),
                 timeout=120)
    # A version the watches held, then etcd's history up to now is gone, and the API server
    # restarts on the compacted store (its watch cache starts after the compaction).
    held = json.loads(kubectl("get", "--raw", f"/api/v1/namespaces/{namespace}/pods?limit=1")
                      .stdout)["metadata"]["resourceVersion"]
    assert etcd_compact() >= int(held)
    subprocess.run([str(TESTBED), "restart", "kube-apiserver"], check=True, timeout=180)
    # The real server's answer to a watch from before the compaction (a 200 stream whose one
    # event is a Status 410 Expired) is what dispatch's client reads as WatchExpired, the
    # informer's cue for a fresh LIST.
    kube = KubeClient(ClientSettings(kubeconfig=os.environ["DISPATCH_KUBECONFIG"]))
    try:
        with pytest.raises(WatchExpired, match="too old resource version"):
            stream = kube.open_watch(PodRes, namespace, dict(IN_A_JOBSET), held, 5)
            list(stream.events())
    finally:
        kube.close()
    _succeeded_once(proc)


def test_a_stalled_api_server_is_an_incomplete_look_never_an_end(
        cli: Dispatch, namespace: str) -> None:
    # SIGSTOP: the API server keeps every connection open and says nothing, no bookmark, no
    # error; a watch cannot tell that from a quiet cluster. The informer asks the server when
    # every watch has been silent for its stall bound, and a look it cannot complete raises.
    proc = cli.spawn("--debug", "run", str(spec(cli, namespace, "stall",
                                                {"DISPATCH_TESTBED_SECONDS": "20"},
                                                runtime=DISPATCH_RUNTIME, policy=RESUBMIT)),
                     "--json", "--poll", "0.5")
    cli.wait_for("stall", lambda s: s["state"] == "running" and bool(s["objects"]),
                 timeout=120)
    # status's "running" is its own look; the count below is of the record, so wait for the
    # supervisor's commit of the start (it came after the count in CI-like runs: 4 == 3)
    before = len(_history_with(cli, "stall", "ExecutionStarted"))
    apiserver = component_pid("kube-apiserver")
    os.kill(apiserver, signal.SIGSTOP)
    try:
        # A reader's own look cannot be completed: said so, the record's state kept.
        seen = cli.status("stall")
        assert seen["state"] == "running" and seen["scheduler"] != "ok", seen
        assert seen["scheduler_problem"], seen
        # The supervisor's own looks: incomplete, and said so (its log), rather than answered
        # from a cache that has stopped moving; it committed nothing while it could not see.
        said = _stderr_until(proc, "does not answer")
        assert "no watch event or bookmark for" in said[-1], said
        assert len(cli.json("history", "stall")) == before
    finally:
        os.kill(apiserver, signal.SIGCONT)
    final, _ = _succeeded_once(proc)
    assert final["objects"] == seen["objects"]


def _history_with(cli: Dispatch, job: str, kind: str, bound_s: float = 120) -> list[Any]:
    """The job's committed history once it holds an event of type ``kind`` (a bound for a
    hung supervisor, never a timing assertion)."""
    deadline = time.monotonic() + bound_s
    while True:
        story = cli.json("history", job)
        if any(h["type"] == kind for h in story):
            return list(story)
        if time.monotonic() > deadline:
            raise AssertionError(f"no {kind} committed for {job}: {story}")
        time.sleep(0.2)


def _stderr_until(proc: subprocess.Popen[str], words: str, bound_s: float = 120) -> list[str]:
    """The lines ``proc`` writes to stderr, up to the first holding ``words`` (a bound for a
    hung process, never a timing assertion)."""
    assert proc.stderr is not None
    lines: list[str] = []
    timer = threading.Timer(bound_s, proc.kill)
    timer.start()
    try:
        for line in proc.stderr:
            lines.append(line)
            if words in line:
                return lines
    finally:
        timer.cancel()
    raise AssertionError(f"the process never said {words!r}: {''.join(lines)[-3000:]}")
