"""A read the API server refuses (RBAC short of pods or nodes) is never silent: logged once
per collection in the API server's words with what it costs, counted for /metrics, listed by
the backend (and `supervise --once`), and said again when it is allowed again."""

from __future__ import annotations

import logging
import time
from collections import Counter
from pathlib import Path

import pytest
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
        assert refused == ['kubeflow: Node in cluster: 403 Forbidden: nodes is forbidden: '
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
