"""Which TrainJobs a watch event names (backends/kubeflow/changes.py), through the reflector's
own event handling (no thread, no API server: events applied as a watch would deliver them)."""

from __future__ import annotations

from typing import Any, cast

from dispatch.backends.kubeflow.changes import Touched
from dispatch.backends.kubeflow.client import KubeClient
from dispatch.backends.kubeflow.informer import Informer, Reflector
from dispatch.backends.kubeflow.look import NODES, collections_of, events_of
from dispatch.backends.kubeflow.objects import JOBSET_NAME_LABEL


def applied(watched: Any, known: list[dict[str, Any]],
            *events: tuple[str, dict[str, Any]]) -> Touched:
    """What ``events`` touch, on a cache that already holds ``known`` (taken before)."""
    touched = Touched()
    informer = Informer(cast(KubeClient, None), touched=touched)
    reflector = Reflector(informer, watched)
    with informer.cond:
        for obj in known:
            reflector._apply("ADDED", obj)
        touched.take()
        for etype, obj in events:
            reflector._apply(etype, obj)
        return touched.take()


def node(name: str, rv: str, ready: str = "True") -> dict[str, Any]:
    return {"metadata": {"name": name, "resourceVersion": rv},
            "status": {"conditions": [{"type": "Ready", "status": ready}]}}


def pod(name: str, jobset: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "team", "resourceVersion": rv,
                         "labels": {JOBSET_NAME_LABEL: jobset}}, "status": {"phase": "Running"}}


def test_a_deleted_node_touches_everything_even_when_it_went_unchanged() -> None:
    """The API server's DELETED carries the node as it last was: its going is the change."""
    n1 = node("n1", "5")
    assert not applied(NODES, [n1], ("MODIFIED", node("n1", "6"))).everything  # a heartbeat
    assert applied(NODES, [n1], ("DELETED", node("n1", "7"))).everything
    assert applied(NODES, [n1], ("MODIFIED", node("n1", "6", "Unknown"))).everything


def test_a_pod_touches_its_jobsets_trainjob_and_an_event_its_namespace() -> None:
    pods = collections_of("team")[3]
    t = applied(pods, [pod("p", "a", "1")], ("MODIFIED", pod("p", "b", "2")))  # relabelled
    assert (t.everything, t.refs, t.namespaces) == (False, {("team", "a"), ("team", "b")}, set())
    t = applied(pods, [], ("DELETED", pod("q", "c", "3")))  # never listed: named as it went
    assert t.refs == {("team", "c")}
    t = applied(events_of("team"), [], ("ADDED", {"metadata": {"name": "e", "namespace": "team"}}))
    assert (t.refs, t.namespaces) == (set(), {"team"})
