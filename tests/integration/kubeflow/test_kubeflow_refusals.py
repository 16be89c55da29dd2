"""A read the API server refuses (RBAC short of pods or nodes) is never silent: logged once
per collection in the API server's words with what it costs, counted for /metrics, listed by
the backend (and `supervise --once`), and said again when it is allowed again."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
import yaml
from kubeflow_support import Clock, make_backend
from test_kubeflow_scenarios import NODES, submit

from dispatch.backends.kubeflow.backend import KubeflowBackend
from dispatch.backends.kubeflow.client import ApiAnswer
from dispatch.backends.kubeflow.look import NODES as LOOK_NODES
from dispatch.backends.kubeflow.refusals import Refusals
from dispatch.http.metrics import SchedulerCalls
from kube_fake import FakeApiServer
from kube_fake import trainer as tr

LOGGER = "dispatch.backends.kubeflow"


def relisted(backend: KubeflowBackend, refused: set[str]) -> None:
    """With the informer: make every collection list again and wait until the ones named
    ``refused`` hold a refusal and the others a list (what the next discover reads)."""
    inf = backend.informer
    if inf is None:
        return
    with inf.cond:
        for r in inf._reflectors.values():
            r.resync()
        deadline = time.monotonic() + 30
        while not all((r.refused is not None) == (r.watched.what in refused)
                      for r in inf._reflectors.values()):
            assert time.monotonic() < deadline, "the informer never listed again"
            inf.cond.wait(0.1)


def refusal_lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.mark.parametrize("informer", [True, False], ids=["informer", "lists"])
def test_refused_nodes_and_pods_are_logged_once_counted_and_listed(
        fake: FakeApiServer, tmp_path: Path, clock: Clock, informer: bool,
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger=LOGGER)
    for n in NODES:
        fake.put(tr.node(n))
    backend: KubeflowBackend = make_backend(fake, tmp_path, clock, informer=informer)
    try:
        token, ns, name = submit(backend)
        tr.materialize(fake, ns, name, NODES)
        fake.denied = {("list", "", "nodes"), ("watch", "", "nodes"),
                       ("list", "", "pods"), ("watch", "", "pods")}
        relisted(backend, {"Node in cluster", f"Pod in {ns}"})
        found = KubeflowBackend.discover(backend, [token], [])
        assert not found.complete  # the pods refused: an incomplete look, as before
        current = backend.refusals.current()
        assert set(current) == {"Node in cluster", f"Pod in {ns}"}
        assert current["Node in cluster"] == (
            '403 Forbidden: nodes is forbidden: User "fake" cannot list resource "nodes" in '
            'API group "" at the cluster scope')
        lines = refusal_lines(caplog)
        assert len(lines) == 2, lines
        nodes = next(line for line in lines if "Node in cluster" in line)
        assert 'User "fake" cannot' in nodes and "pods' conditions" in nodes
        assert backend.refusals.counts == Counter({"nodes": 1, "pods": 1})
        # The same as data, which the active supervisor publishes (issue 47 item 4).
        report = backend.refused_reads()
        assert [(r.resource, r.verb, r.words) for r in report] == [
            ("Node in cluster", "list", current["Node in cluster"]),
            (f"Pod in {ns}", "list", current[f"Pod in {ns}"])]
        assert "pods' conditions" in report[0].cost and report[0].since.tzinfo is not None

        for _ in range(3):  # refused again: not logged again, not counted again
            KubeflowBackend.discover(backend, [token], [])
        assert len(refusal_lines(caplog)) == 2
        assert backend.refusals.counts == Counter({"nodes": 1, "pods": 1})
        assert backend.refused_reads() == report  # since when: the first refusal's time

        fake.denied = set()
        relisted(backend, set())
        found = KubeflowBackend.discover(backend, [token], [])
        assert backend.refusals.current() == {}
        assert backend.refused_reads() == []
        assert found.complete
        again = [line for line in refusal_lines(caplog) if "allows reading" in line]
        assert sorted(again) == sorted([
            "kubeflow: the API server allows reading Node in cluster again",
            f"kubeflow: the API server allows reading Pod in {ns} again"])
    finally:
        backend.close()


def test_refusals_reach_the_metric(fake: FakeApiServer, tmp_path: Path, clock: Clock) -> None:
    calls = SchedulerCalls()
    backend = calls.wrap(lambda _n: make_backend(fake, tmp_path, clock, informer=False))(
        "kubeflow")
    try:
        fake.denied = {("list", "", "nodes")}
        backend.discover([], [])
        backend.discover([], [])
        assert calls.refusals() == {("kubeflow", "nodes"): 1}
    finally:
        backend.close()


def test_supervise_once_lists_what_is_refused(fake: FakeApiServer, tmp_path: Path,
                                              clock: Clock) -> None:
    from dispatch.cli.supervisors import once_lines, refused_reads

    backend = make_backend(fake, tmp_path, clock, informer=False)
    try:
        fake.denied = {("list", "", "nodes")}
        backend.discover([], [])
        refused = refused_reads(lambda _n: backend, ["kubeflow:fake", "kubeflow"])
        assert refused == ['kubeflow: list Node in cluster: 403 Forbidden: nodes is forbidden: '
                           'User "fake" cannot list resource "nodes" in API group "" at the '
                           'cluster scope']
        lines = once_lines({"jobs": 0, "decisions": 0, "unreachable": [], "errors": [],
                            "scopes": {}, "refused": refused})
        assert lines[-1] == f"refused: {refused[0]}"
    finally:
        backend.close()


def test_the_report_says_which_verb_was_refused_and_since_the_first_refusal() -> None:
    """A watch refused after its list was allowed (the informer tags the answer "watch")
    is reported as a watch; seen again, its "since" stays the first refusal's time."""
    refusals = Refusals()
    err = ApiAnswer(403, "Forbidden", 'nodes is forbidden: User "u" cannot watch resource '
                    '"nodes"')
    err.verb = "watch"
    refusals.seen({LOOK_NODES: err}, {LOOK_NODES})
    [first] = refusals.report()
    assert (first.resource, first.verb) == ("Node in cluster", "watch")
    assert first.words == ('403 Forbidden: nodes is forbidden: User "u" cannot watch '
                           'resource "nodes"')
    assert "pods' conditions" in first.cost
    refusals.seen({LOOK_NODES: ApiAnswer(403, "Forbidden", "again")}, {LOOK_NODES})
    [again] = refusals.report()
    assert (again.verb, again.words, again.since) == ("list", "403 Forbidden: again",
                                                      first.since)
    refusals.seen({}, {LOOK_NODES})
    assert refusals.report() == []


def _cli(tmp: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dispatch.cli", *args], env=env, cwd=tmp,
                          text=True, capture_output=True, timeout=120)


def test_a_supervisor_refused_the_nodes_says_so_in_supervisors_and_in_status(
        fake: FakeApiServer, tmp_path: Path) -> None:
    """Issue 47 item 4 through the real CLI: the active `supervise` publishes what the API
    server refuses it; `dispatch supervisors` lists it under the scope and `dispatch status`
    of the scope's unfinished job names it in a note, with the API server's words."""
    for n in NODES:
        fake.put(tr.node(n))
    config = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team-a")
    env = {k: v for k, v in os.environ.items()
           if k not in ("KUBECONFIG", "DISPATCH_KUBECONFIG", "DISPATCH_K8S_CONTEXT",
                        "DISPATCH_K8S_NAMESPACE", "KUBERNETES_SERVICE_HOST")}
    env.update({"DISPATCH_STORE": str(tmp_path / "record.sqlite3"),
                "HOME": str(tmp_path / "home"), "XDG_STATE_HOME": str(tmp_path / "state"),
                "DISPATCH_KUBECONFIG": str(config)})
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump({
        "name": "refused-nodes", "backend": "kubeflow", "nodes": 1, "command": ["true"],
        "kubeflow": {"runtime": "torch-distributed"}}))
    done = _cli(tmp_path, env, "submit", "--json", "spec.yaml")
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)["job"]
    fake.denied = {("list", "", "nodes"), ("watch", "", "nodes")}
    sup = subprocess.Popen([sys.executable, "-m", "dispatch.cli", "supervise", "--poll", "0.2",
                            "--lease", "2"], env=env, cwd=tmp_path,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:  # the committed presence row, once the supervisor has published it
            rows = json.loads(_cli(tmp_path, env, "supervisors", "--json").stdout)
            refused = [x for r in rows for x in r["refusals"]]
            if refused:
                break
            assert time.monotonic() < deadline, rows
            time.sleep(0.2)
        [row] = [r for r in rows if r["refusals"]]
        assert row["scope"].startswith("kubeflow:") and row["holder"].endswith(f":{sup.pid}")
        [nodes] = refused
        assert (nodes["resource"], nodes["verb"]) == ("Node in cluster", "list")
        assert 'User "fake" cannot list resource "nodes"' in nodes["words"], nodes
        table = " ".join(_cli(tmp_path, env, "supervisors").stdout.split())
        assert f"refused to {row['holder']} in {row['scope']}: list Node in cluster" in table
        status = _cli(tmp_path, env, "status", "--json", job)
        [note] = json.loads(status.stdout)["notes"]
        assert note.startswith("the kubeflow scheduler refuses `list Node in cluster` to the "
                               "supervisor's identity since "), note
        assert 'User "fake" cannot list resource "nodes"' in note
        assert note.endswith("; see `dispatch doctor --backend kubeflow`"), note
    finally:
        sup.terminate()
        sup.wait(60)
