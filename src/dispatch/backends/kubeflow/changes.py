"""Which TrainJobs a kubeflow look must map again, from the informer's watch events (issue 49).

The informer sees every change to the objects discover() reads as a watch event. ``Touched``
(fed by the informer under its lock) names, per event, the TrainJob the changed object
belongs to: a TrainJob or JobSet by its name, a Job or pod by its JobSet-name label (the old
and the new object's both, a relabelled object leaves one and joins another). What it cannot
pin to one TrainJob widens: a Warning Event touches every TrainJob of its namespace (any may
be the one it concerns, events.creation_failure), a Node whose object changed (its
resourceVersion aside) touches every TrainJob, and a LIST of any collection (a first one, a
re-LIST after a gap or a 410) touches everything, since what changed during the gap is not
known.

``Reports`` keeps, per ref, the report a look last mapped from objects that have not changed
since, when that report reads nothing but those objects: not one that reads ``now``, files or
logs (a shared_dir's progress and error files, a failed end's log tail, a node-loss window),
nor one withheld for its evidence or a blind look (those are never kept). A look maps again
every TrainJob without a kept report; the others it answers with the kept one, which is what
mapping them again would give.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dispatch.backends.base import ChangeJournal
from dispatch.backends.kubeflow.objects import JOBSET_NAME_LABEL, labels, meta, name_of
from dispatch.backends.kubeflow.shared_files import shared_dir_of
from dispatch.core.model import CauseKind, Changes, ObjectReport, State

if TYPE_CHECKING:
    from dispatch.backends.kubeflow.informer import Watched


@dataclass
class Touched:
    """What changed since the last ``take``: ``everything`` (a LIST, a Node), else the refs
    (namespace, name) and the whole namespaces touched."""

    everything: bool = True  # nothing taken yet: the first look maps everything
    refs: set[tuple[str, str]] = field(default_factory=set)
    namespaces: set[str] = field(default_factory=set)

    def relisted(self, watched: Watched) -> None:
        self.everything = True

    def changed(self, watched: Watched, old: dict[str, Any] | None,
                new: dict[str, Any] | None) -> None:
        kind = watched.res._api_info.resource.kind
        if kind == "Node":
            if _without_version(old) != _without_version(new):
                self.everything = True
            return
        ns = watched.namespace or ""
        if kind == "Event":
            self.namespaces.add(ns)
            return
        for obj in (old, new):
            if obj is None:
                continue
            if kind in ("TrainJob", "JobSet"):
                self.refs.add((ns, name_of(obj)))
            else:  # Job, Pod: the JobSet (named as its TrainJob) they belong to
                owner = labels(obj).get(JOBSET_NAME_LABEL)
                if isinstance(owner, str):
                    self.refs.add((ns, owner))

    def take(self) -> Touched:
        taken = Touched(self.everything, self.refs, self.namespaces)
        self.everything, self.refs, self.namespaces = False, set(), set()
        return taken


def _without_version(obj: dict[str, Any] | None) -> Any:
    if obj is None:
        return None
    return {**obj, "metadata": {k: v for k, v in meta(obj).items() if k != "resourceVersion"}}


class Reports:
    """The reports kept between looks (see the module docstring), by ref."""

    def __init__(self) -> None:
        self.kept: dict[str, ObjectReport] = {}
        self.mapped = 0  # TrainJobs mapped, all looks together (tests, benchmarks)

    def forget(self, touched: Touched | None) -> None:
        """Drop what ``touched`` names; None (a look that cannot tell): everything."""
        if touched is None or touched.everything:
            self.kept.clear()
            return
        for ns, name in touched.refs:
            self.kept.pop(f"{ns}/{name}", None)
        if touched.namespaces:
            self.kept = {r: k for r, k in self.kept.items()
                         if r.partition("/")[0] not in touched.namespaces}

    def keep(self, trainjob: Any, report: ObjectReport) -> None:
        if _reads_only_objects(trainjob, report):
            self.kept[report.ref] = report
        else:
            self.kept.pop(report.ref, None)

    def prune(self, seen: set[str]) -> None:
        for ref in [r for r in self.kept if r not in seen]:
            del self.kept[ref]


def _reads_only_objects(trainjob: Any, report: ObjectReport) -> bool:
    """Mapping the same objects again gives the same report: it read no file, no log, no
    clock (shared_files.with_shared_files, FailedPodLogs, fence.node_lost's window)."""
    return not (shared_dir_of(trainjob) is not None or report.state is State.FAILED
                or report.cause.kind is CauseKind.NODE_LOST or report.lost_since is not None)


class Answers:
    """The previous look's reports, by ref, and what changed since (Discovery.changes)."""

    def __init__(self) -> None:
        self.last: dict[str, ObjectReport] = {}
        self.journal = ChangeJournal()

    def changes(self, reports: list[ObjectReport]) -> Changes | None:
        """Name the refs and tokens whose report differs from the previous look's (appeared,
        changed, went away): compared as answered, whichever way the look read."""
        answered = {r.ref: r for r in reports}
        for ref in answered.keys() | self.last.keys():
            old, new = self.last.get(ref), answered.get(ref)
            if old is not new and old != new:
                self.journal.note(ref, old.token if old else None, new.token if new else None)
        self.last = answered
        return self.journal.take()
