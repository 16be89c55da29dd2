"""Pod logs through the API server: the stand-in serves ``pods/{name}/log`` as the real one
does, the backend reads each pod's log incrementally, and ``dispatch logs`` (the Python API,
``-f`` across a resubmission, the HTTP endpoint) shows a kubeflow job's output."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from test_kubeflow_scenarios import NODES, fail, submit

import dispatch
from dispatch.backends.kubeflow import KubeflowBackend
from dispatch.backends.kubeflow.podlogs import PodLog
from dispatch.core.model import State
from kube_fake import FakeApiServer
from kube_fake import trainer as tr

WAIT_S = 60.0  # an upper bound for a slow shared machine, never a timing assertion


def until(what: str, ok: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not ok():
        if time.monotonic() > deadline:
            raise AssertionError(f"never: {what}")
        time.sleep(0.05)


def lines_of(
    reader: PodLog, cursor: str | None, final: bool = False
) -> tuple[list[str], str | None]:
    got = reader.read(cursor, final=final)
    return got.data.decode().splitlines(), got.cursor


@pytest.fixture
def running(fake: FakeApiServer, backend: KubeflowBackend) -> tuple[str, list[str]]:
    for n in NODES:
        fake.put(tr.node(n))
    _, ns, name = submit(backend)
    return f"{ns}/{name}", tr.materialize(fake, ns, name, NODES)


# -- the stand-in answers as the API server does ---------------------------------------------


def test_the_stand_in_serves_pod_logs_as_text_and_refuses_with_a_status(
    fake: FakeApiServer, backend: KubeflowBackend
) -> None:
    fake.put(tr.node("n1"))
    _, ns, name = submit(backend)
    (pod,) = tr.materialize(fake, ns, name, ["n1"], phase="Pending")
    base = f"{fake.url}/api/v1/namespaces/{ns}/pods"
    waiting = httpx2.get(f"{base}/{pod}/log")
    assert waiting.status_code == 400
    assert waiting.json()["kind"] == "Status" and waiting.json()["reason"] == "BadRequest"
    assert waiting.json()["message"] == (
        f'container "node" in pod "{pod}" is not available')
    missing = httpx2.get(f"{base}/no-such-pod/log")
    assert missing.status_code == 404 and missing.json()["reason"] == "NotFound"
    (pod,) = tr.materialize(fake, ns, name, ["n1"])  # the kubelet started it
    fake.write_log(ns, pod, "hello\nworld\n", at="2026-03-01T10:00:01.5Z")
    ok = httpx2.get(f"{base}/{pod}/log", params={"timestamps": "true"})
    assert ok.status_code == 200 and ok.headers["content-type"] == "text/plain"
    assert ok.text == ("2026-03-01T10:00:01.5Z hello\n2026-03-01T10:00:01.5Z world\n")
    assert httpx2.get(f"{base}/{pod}/log", params={"limitBytes": "3"}).text == "hel"
    later = httpx2.get(f"{base}/{pod}/log", params={"sinceTime": "2026-03-01T10:00:02Z"})
    assert later.text == ""
    # sinceTime reaches the kubelet at whole seconds: 10:00:01.9 still gives 10:00:01.5
    same = httpx2.get(f"{base}/{pod}/log", params={"sinceTime": "2026-03-01T10:00:01.9Z"})
    assert same.text == "hello\nworld\n"
    bad = httpx2.get(f"{base}/{pod}/log", params={"container": "sidecar"})
    assert bad.status_code == 400 and "not valid" in bad.json()["message"]


def test_a_container_waiting_to_start_is_refused_with_the_kubelets_words(
    fake: FakeApiServer, running: tuple[str, list[str]]
) -> None:
    ref, pods = running
    ns = ref.split("/")[0]
    current = fake.get("Pod", ns, pods[0])
    assert current is not None
    statuses = current["status"]["containerStatuses"]
    statuses[0]["state"] = {"waiting": {"reason": "ContainerCreating"}}
    fake.update("Pod", ns, pods[0], {"status": {"containerStatuses": statuses}})
    r = httpx2.get(f"{fake.url}/api/v1/namespaces/{ns}/pods/{pods[0]}/log")
    assert r.status_code == 400
    assert r.json()["message"] == (
        f'container "node" in pod "{pods[0]}" is waiting to start: ContainerCreating')


# -- the backend's readers --------------------------------------------------------------------


def test_logs_are_one_reader_per_pod_node_0_first_and_read_incrementally(
    fake: FakeApiServer, backend: KubeflowBackend, running: tuple[str, list[str]]
) -> None:
    ref, pods = running
    ns = ref.split("/")[0]
    readers = backend.logs(ref)
    assert [r.label for r in readers] == pods  # node 0 first
    assert len({r.key for r in readers}) == 2
    first, second = readers
    assert lines_of(first, None) == ([], None)  # nothing printed yet: no error
    fake.write_log(ns, pods[0], "step 1\nstep 2\n")
    fake.write_log(ns, pods[1], "rank 1 up\n")
    got, cursor = lines_of(first, None)
    assert got == ["step 1", "step 2"]
    assert lines_of(second, None)[0] == ["rank 1 up"]
    fake.write_log(ns, pods[0], "step 3\nhalf a li")
    got, cursor = lines_of(first, cursor)
    assert got == ["step 3"]  # a line still being written waits for its end
    fake.write_log(ns, pods[0], "ne\n")
    got, cursor = lines_of(first, cursor)
    assert got == ["half a line"]
    assert lines_of(first, cursor)[0] == []  # nothing new: nothing again
    asked = [r.query for r in fake.requests if r.path.endswith(f"/pods/{pods[0]}/log")]
    assert all(q.get("timestamps") == "true" for q in asked)
    assert "sinceTime" not in asked[0] and all("sinceTime" in q for q in asked[2:])


def test_lines_within_one_second_and_with_one_stamp_are_each_given_once(
    fake: FakeApiServer, backend: KubeflowBackend, running: tuple[str, list[str]]
) -> None:
    ref, pods = running
    ns = ref.split("/")[0]
    reader = backend.logs(ref)[0]
    fake.write_log(ns, pods[0], "a\nb\n", at="2026-03-01T10:00:05.000000100Z")
    got, cursor = lines_of(reader, None)
    assert got == ["a", "b"]
    fake.write_log(ns, pods[0], "c\n", at="2026-03-01T10:00:05.000000100Z")  # the same stamp
    fake.write_log(ns, pods[0], "d\n", at="2026-03-01T10:00:05.7Z")  # the same second
    got, cursor = lines_of(reader, cursor)
    assert got == ["c", "d"]
    fake.write_log(ns, pods[0], "e\n", at="2026-03-01T10:00:06Z")
    assert lines_of(reader, cursor)[0] == ["e"]


def test_a_long_log_comes_in_pages_and_a_final_read_gives_the_last_unended_line(
    fake: FakeApiServer, backend: KubeflowBackend, running: tuple[str, list[str]]
) -> None:
    ref, pods = running
    ns = ref.split("/")[0]
    text = "".join(f"line {i}\n" for i in range(200)) + "no end"
    fake.write_log(ns, pods[0], text)
    small = PodLog(backend.kube, ns, pods[0], "uid", "node", limit_bytes=200)
    got, cursor = lines_of(small, None)
    assert got == [f"line {i}" for i in range(200)]
    pages = [r for r in fake.requests if r.path.endswith(f"/pods/{pods[0]}/log")]
    assert len(pages) > 1
    assert lines_of(small, cursor, final=True)[0] == ["no end"]


def test_a_line_longer_than_the_most_is_cut_and_the_log_goes_on_after_it(
    fake: FakeApiServer, backend: KubeflowBackend, running: tuple[str, list[str]]
) -> None:
    ref, pods = running
    ns = ref.split("/")[0]
    fake.write_log(ns, pods[0], "before\n", at="2026-03-01T10:00:01Z")
    fake.write_log(ns, pods[0], "x" * 1000 + "\n", at="2026-03-01T10:00:02Z")
    fake.write_log(ns, pods[0], "after\n", at="2026-03-01T10:00:03Z")
    small = PodLog(backend.kube, ns, pods[0], "uid", "node", limit_bytes=50, most_bytes=200)
    got, cursor = lines_of(small, None)
    assert got[0] == "before" and got[-1] == "after" and len(got) == 3
    assert set(got[1]) == {"x"} and len(got[1]) < 1000  # cut at the most a page may hold


def test_a_pod_not_started_or_gone_reads_as_nothing(
    fake: FakeApiServer, backend: KubeflowBackend
) -> None:
    fake.put(tr.node("n1"))
    _, ns, name = submit(backend)
    (pod,) = tr.materialize(fake, ns, name, ["n1"], phase="Pending")
    (reader,) = backend.logs(f"{ns}/{name}")
    assert lines_of(reader, None, final=True) == ([], None)
    fake.remove("Pod", ns, pod)
    assert lines_of(reader, None, final=True) == ([], None)
    assert backend.logs(f"{ns}/{name}") == []


# -- through the service: the Python API, -f across a resubmission, HTTP -----------------------


@pytest.fixture
def kube_env(
    fake: FakeApiServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The registry's kubeflow backend pointed at the stand-in; returns the store path."""
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team")
    monkeypatch.setenv("DISPATCH_KUBECONFIG", str(kubeconfig))
    monkeypatch.setenv("DISPATCH_K8S_NAMESPACE", "team")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DISPATCH_STORE", raising=False)
    for n in NODES:
        fake.put(tr.node(n))
    yield str(tmp_path / "record.sqlite3")


def kube_spec(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "backend": "kubeflow", "command": ["torchrun", "train.py"],
            "nodes": len(NODES), "kubeflow": {"runtime": "torch-distributed",
                                              "image": "trainer:1"}, **fields}


def new_trainjob(fake: FakeApiServer, seen: set[str]) -> str:
    found: list[str] = []

    def appeared() -> bool:
        found[:] = [tj["metadata"]["name"] for tj in fake.all("TrainJob")
                    if tj["metadata"]["name"] not in seen
                    and not tj["spec"].get("suspend")
                    and not tj["metadata"].get("deletionTimestamp")]
        return bool(found)

    until("a new, ungated TrainJob", appeared)
    seen.add(found[0])
    return found[0]


def succeed(fake: FakeApiServer, ns: str, name: str, pods: list[str]) -> None:
    for pod in pods:
        tr.terminate(fake, ns, pod, reason="Completed", exit_code=0, phase="Succeeded")
    done = tr.cond("Complete", reason="JobSetCompleted", message="jobset completed", at=tr.T2)
    tr.set_conditions(fake, "JobSet", ns, name, done)
    tr.set_conditions(fake, "TrainJob", ns, name, done)
    tr.finish_jobs_status(fake, ns, name, succeeded=1, failed=0)


def test_logs_follow_reads_pod_logs_across_a_resubmission(
    fake: FakeApiServer, kube_env: str
) -> None:
    policy = {"rules": [{"on": ["preempted"], "action": "resubmit", "budget": 1}]}
    job = dispatch.submit(kube_spec("kf-logs", policy=policy), store=kube_env)
    seen: set[str] = set()
    first = new_trainjob(fake, seen)
    pods1 = tr.materialize(fake, "team", first, NODES)
    waited: list[dispatch.Status] = []
    waiter = threading.Thread(target=lambda: waited.append(job.wait(timeout=WAIT_S, poll=0.1)))
    lines: list[str] = []
    follower = threading.Thread(target=lambda: lines.extend(job.logs(follow=True)))
    waiter.start()
    follower.start()
    try:
        fake.write_log("team", pods1[0], "rank 0: step 1\n")
        fake.write_log("team", pods1[1], "rank 1: step 1\n")
        until("both pods' first lines", lambda: len(lines) >= 2)
        fake.write_log("team", pods1[0], "rank 0: step 2\n")
        until("the next line", lambda: len(lines) >= 3)
        tr.add_pod_condition(fake, "team", pods1[0], tr.builtin_cond(
            "DisruptionTarget", reason="PreemptionByScheduler",
            message="Preempted in order to admit critical pod"))
        tr.terminate(fake, "team", pods1[0], reason="Error", exit_code=143)
        fail(fake, "team", first)
        second = new_trainjob(fake, seen)
        pods2 = tr.materialize(fake, "team", second, NODES)
        fake.write_log("team", pods2[0], "rank 0: resumed\nrank 0: done\n")
        fake.write_log("team", pods2[1], "rank 1: done")  # the last words, with no line end
        succeed(fake, "team", second, pods2)
    finally:
        waiter.join(WAIT_S)
        follower.join(WAIT_S)
    assert waited and waited[0].state is State.SUCCEEDED and waited[0].submissions == 2
    assert not follower.is_alive()
    assert lines == [
        f"[{pods1[0]}] rank 0: step 1",
        f"[{pods1[1]}] rank 1: step 1",
        f"[{pods1[0]}] rank 0: step 2",
        "== dispatch: submission 2 after preempted",
        f"[{pods2[0]}] rank 0: resumed",
        f"[{pods2[0]}] rank 0: done",
        f"[{pods2[1]}] rank 1: done",
    ]
    # read again without following: the latest submission's pods, whole
    assert list(job.logs()) == lines[-3:]
    asked = [r.query for r in fake.requests if r.path.endswith(f"/pods/{pods1[0]}/log")]
    assert any("sinceTime" in q for q in asked)  # following asked only for what was new


def test_the_http_endpoint_serves_a_kubeflow_jobs_pod_logs(
    fake: FakeApiServer, kube_env: str, tmp_path: Path
) -> None:
    from tests.integration.http.serve_harness import Served

    job = dispatch.submit(kube_spec("kf-http"), store=kube_env)
    name = new_trainjob(fake, set())
    pods = tr.materialize(fake, "team", name, NODES)
    fake.write_log("team", pods[0], "from rank 0\n")
    fake.write_log("team", pods[1], "from rank 1\n")
    served = Served(tmp_path, env={"DISPATCH_STORE": kube_env,
                                   "DISPATCH_KUBECONFIG": str(tmp_path / "kubeconfig"),
                                   "DISPATCH_K8S_NAMESPACE": "team"})
    try:
        r = served.client.get(f"/api/jobs/{job.id}/logs")
        assert r.status_code == 200, r.text
        assert r.text == f"[{pods[0]}] from rank 0\n[{pods[1]}] from rank 1\n"
    finally:
        served.close()
