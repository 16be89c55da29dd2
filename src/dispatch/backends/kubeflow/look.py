"""One discover()'s raw objects, however they are read: the informer's cache (no request on a
steady tick) or lists per tick (5 per namespace, with its Warning Events, + 1 for the nodes)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from dispatch.backends.kubeflow.changes import Touched
from dispatch.backends.kubeflow.client import (
    ApiAnswer,
    EventRes,
    JobRes,
    JobSetRes,
    KubeClient,
    NodeRes,
    PodRes,
    TrainJobRes,
)
from dispatch.backends.kubeflow.informer import Informer, Watched
from dispatch.backends.kubeflow.objects import JOBSET_NAME_LABEL, MANAGED_LABEL, labels, name_of

MANAGED = ((MANAGED_LABEL, "true"),)
IN_A_JOBSET = ((JOBSET_NAME_LABEL, None),)
NODES = Watched(NodeRes, None)
WARNINGS = (("type", "Warning"),)


def events_of(namespace: str) -> Watched:
    """The Warning Events of a namespace: one collection for all its jobs (M5)."""
    return Watched(EventRes, namespace, (), WARNINGS)


def collections_of(namespace: str) -> tuple[Watched, Watched, Watched, Watched]:
    """What discover() reads in one namespace: TrainJobs, JobSets, Jobs, Pods."""
    return (
        Watched(TrainJobRes, namespace, MANAGED),
        Watched(JobSetRes, namespace, MANAGED),
        Watched(JobRes, namespace, IN_A_JOBSET),
        Watched(PodRes, namespace, IN_A_JOBSET),
    )


@dataclass
class Look:
    """The raw objects of one discover(), however they were read."""

    trainjobs: list[dict[str, Any]] = field(default_factory=list)
    jobsets: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    jobs: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    pods: dict[tuple[str, str], list[dict[str, Any]]] = field(default_factory=dict)
    nodes: list[dict[str, Any]] = field(default_factory=list)
    events: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # namespace -> Warnings
    refused: set[str] = field(default_factory=set)  # namespaces we were not allowed to see
    nodes_refused: bool = False  # the node list was refused (RBAC, or a restarting server)
    # Each collection read and each one refused, with the API server's answer (refusals.py)
    asked: set[Watched] = field(default_factory=set)
    refusals: dict[Watched, ApiAnswer] = field(default_factory=dict)
    # What changed since the informer's previous view (changes.py); None: lists, cannot tell
    touched: Touched | None = None

    def add(
        self,
        ns: str,
        trainjobs: list[dict[str, Any]],
        jobsets: list[dict[str, Any]],
        jobs: list[dict[str, Any]],
        pods: list[dict[str, Any]],
    ) -> None:
        self.trainjobs.extend(trainjobs)
        for js in jobsets:
            self.jobsets[(ns, name_of(js))] = js
        for job in jobs:
            self.jobs.setdefault((ns, str(labels(job).get(JOBSET_NAME_LABEL))), []).append(job)
        for pod in pods:
            self.pods.setdefault((ns, str(labels(pod).get(JOBSET_NAME_LABEL))), []).append(pod)


def look_listed(kube: KubeClient, namespaces: set[str]) -> Look:
    """Lists per tick: 5 per namespace (with its Warning Events) + 1 for the nodes."""
    look = Look()
    for ns in sorted(namespaces):
        found = []
        for w in collections_of(ns):
            look.asked.add(w)
            try:
                found.append(kube.list(w.res, ns, dict(w.labels)))
            except ApiAnswer as err:
                # Refused (403, CRD missing): an incomplete look, never a made-up answer.
                look.refusals[w] = err
                look.refused.add(ns)
                break
        if ns in look.refused:
            continue
        look.add(ns, *found)
        ev = events_of(ns)
        look.asked.add(ev)
        try:
            look.events[ns] = kube.list(ev.res, ns, {}, dict(ev.fields))
        except ApiAnswer as err:
            look.refusals[ev] = err
            look.events[ns] = []  # Events may be forbidden: the rest still maps
    look.asked.add(NODES)
    try:
        look.nodes = kube.list(NodeRes, None, {})
    except ApiAnswer as err:
        look.refusals[NODES] = err
        look.nodes, look.nodes_refused = [], True  # may be forbidden; disruptions still fence
    return look

def look_cached(informer: Informer, namespaces: set[str]) -> Look | None:
    """The informer's cache: no request on a steady tick. None: the cache does not show
    our own writes yet (the caller lists this tick)."""
    wanted = {ns: collections_of(ns) for ns in sorted(namespaces)}
    events = [events_of(ns) for ns in wanted]
    view = informer.view([w for ws in wanted.values() for w in ws] + events + [NODES])
    if view is None:
        return None
    look = Look()
    look.asked = {*(w for ws in wanted.values() for w in ws), *events, NODES}
    look.refusals = dict(view.refused)
    for ns, ws in wanted.items():
        if any(w in view.refused for w in ws):
            look.refused.add(ns)
            continue
        tjs, jss, jobs, pods = (view.objects[w] for w in ws)
        look.add(ns, tjs, jss, jobs, pods)
        look.events[ns] = view.objects.get(events_of(ns), [])  # refused: as nodes
    look.nodes = view.objects.get(NODES, [])  # refused nodes: as with lists
    look.nodes_refused = NODES in view.refused
    look.touched = view.touched
    return look
