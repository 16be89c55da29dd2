"""KubeflowBackend: TrainJobs (trainer.kubeflow.org/v1alpha1) behind dispatch's Backend protocol.

The imperative shell around ``mapping`` (pure) and ``manifest`` (pure). Choices, and why:

- Discovery reads a **list+watch cache** (``informer``, docs/semantics.md#p2) by default: per
  namespace one collection each of TrainJobs (``dispatch.io/managed=true``), JobSets (same
  label, set through the TrainJob's runtimePatches), Jobs and Pods
  (``jobset.sigs.k8s.io/jobset-name`` exists) and Warning Events (``type=Warning``: one
  collection for all its jobs, for the failures only an Event tells, ``events``), plus Nodes
  cluster-wide, each listed once and then watched (``look``). A steady ``discover`` makes no
  request at all, and a pod that fails is in the cache as soon as its watch event arrives, not
  a poll interval later. It is the default because it is what the supervisor's loop wants and
  it falls back safely: a cache that is not synced (never listed, or its watch broken for
  longer than ``stale_after_s``) raises ``SchedulerUnreachable`` rather than answer (R3), and a
  cache that does not yet show this process's own create / delete / ungate after ``settle_s``
  is not read that tick (plain lists are, and the cache re-lists).
  ``informer=False`` keeps the **lists per tick**: ``5 x namespaces + 1`` requests per
  ``discover``, constant in the number of jobs, and no background threads (one-shot tools).
- Stop and cancel delete with **background** propagation: Trainer v2.3.0 re-applies the JobSet
  of a TrainJob being deleted (its reconciler never looks at deletionTimestamp), so under
  foreground propagation the garbage collector and Trainer loop for ever and the TrainJob never
  goes (seen on the real control plane). "The old object ended" (S11: the replacement's gate
  opens only then) still means its pods are really gone: a TrainJob that is gone while pods
  labelled with its JobSet's name remain (pods stuck Terminating on a lost node included) is
  reported alive, its pods named, until the last one is gone (``report_pods_left``).
- The gate is ``spec.suspend``; ``open_gate`` merge-patches it to false.
- A TrainJob we bound that the API server no longer has is reported cancelled, cause
  cancelled, provenance actor. dispatch's stop annotates the TrainJob (``dispatch.io/stop``)
  before deleting it (S14): the actor is "dispatch" when this process deleted it or saw it
  deleting with that annotation, "unknown" when it was seen deleting without it (someone
  else's delete: a person's cancel, final), else None (gone between two looks).
- ``logs`` reads each pod's log through the API server (``podlogs``): incremental by
  timestamp, a pod not started or gone reads as empty.
- ``lost_since`` is the earliest time the API server gives (taint timeAdded, Ready or
  FailureTarget lastTransitionTime); without one it is when this process first saw the loss,
  remembered across ticks so the fence's window does not restart each tick.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager, nullcontext
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from lightkube.types import CascadeType

from dispatch.backends.base import DryRun, Submission, SubmitRejected
from dispatch.backends.kubeflow.changes import Answers, Reports, Touched
from dispatch.backends.kubeflow.client import (
    ApiAnswer,
    ClientSettings,
    KubeClient,
    PodRes,
    TrainJobRes,
    load_config,
)
from dispatch.backends.kubeflow.failed_logs import FailedPodLogs
from dispatch.backends.kubeflow.gone import SOMEONE_ELSE, deleted_by, report_gone, report_pods_left
from dispatch.backends.kubeflow.informer import Informer, InformerSettings, Predicate
from dispatch.backends.kubeflow.look import Look, collections_of, look_cached, look_listed
from dispatch.backends.kubeflow.manifest import build_trainjob, dry_run_trainjob, parse_section
from dispatch.backends.kubeflow.mapping import awaits_evidence, current_objects, report_trainjob
from dispatch.backends.kubeflow.objects import (
    GATE_ANNOTATION,
    JOBSET_NAME_LABEL,
    STOP_ANNOTATION,
    TOKEN_LABEL,
    labels,
    meta,
    name_of,
)
from dispatch.backends.kubeflow.origin import check_context
from dispatch.backends.kubeflow.pod_evidence import carry, keep_gone, with_evidence
from dispatch.backends.kubeflow.podlogs import PodLog, pod_logs
from dispatch.backends.kubeflow.pods import is_evidence
from dispatch.backends.kubeflow.refusals import Refusals
from dispatch.backends.kubeflow.shared_files import with_shared_files
from dispatch.core.model import (
    CauseKind,
    Discovery,
    ObjectReport,
    SchedulerUnreachable,
    State,
)
from dispatch.core.policy import Action, Declarations
from dispatch.core.spec import JobSpec, SpecError
from dispatch.errors import NotFound
from dispatch.support.deadline import deadline_seconds, read_deadline, tools_within

DEFAULT_NODE_LOSS_WINDOW = timedelta(minutes=5)
# How long a failed end may wait for its pods' evidence to arrive on their own watch (M11).
DEFAULT_EVIDENCE_GRACE = timedelta(seconds=10)


def _created(uid: str) -> Predicate:
    return lambda etype, obj: str(obj.get("metadata", {}).get("uid")) == uid


def _deleting(etype: str, obj: dict[str, Any]) -> bool:
    return etype == "DELETED" or bool(obj.get("metadata", {}).get("deletionTimestamp"))


def _ungated(etype: str, obj: dict[str, Any]) -> bool:
    return etype == "DELETED" or not (obj.get("spec") or {}).get("suspend")


class ObjectGone(NotFound, LookupError):
    """The TrainJob a call named does not exist (any more)."""


def parse_ref(ref: str) -> tuple[str, str]:
    namespace, sep, name = ref.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"not a kubeflow object ref (namespace/name): {ref!r}")
    return namespace, name


def interactive() -> AbstractContextManager[None]:
    """A create (admit's dry run, submit's) is bounded as a read is: within the deadline in
    force, else $DISPATCH_READ_DEADLINE from now. An unreachable API server costs `submit`
    that long, not every retry's timeout and backoff; a create cut short is safe, since the
    same token makes the same name (a repeat answers 409 AlreadyExists, ours)."""
    if deadline_seconds() is not None:
        return nullcontext()
    return tools_within(read_deadline())


def _utcnow() -> datetime:
    return datetime.now(UTC)


# The API server's answers to a dry-run create that refuse the spec itself (admit).
ADMISSION_REFUSALS = (400, 403, 404, 422)


class KubeflowBackend:
    """Kubeflow Trainer on Kubernetes. Config from ``kubeconfig`` (a file) or, when None,
    kubectl's order: $KUBECONFIG, ~/.kube/config, the in-cluster service account; ``context``
    (None: the current-context). See kubeconfig.py."""

    name = "kubeflow"

    def __init__(
        self,
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        namespaces: Iterable[str] = (),
        node_loss_window: timedelta = DEFAULT_NODE_LOSS_WINDOW,
        restart_native: bool = False,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff_s: float = 0.5,
        informer: bool = True,
        informer_settings: InformerSettings | None = None,
        evidence_grace: timedelta = DEFAULT_EVIDENCE_GRACE,
        clock: Callable[[], datetime] = _utcnow,
        client: KubeClient | None = None,
    ) -> None:
        if node_loss_window <= timedelta(0):
            raise ValueError("node_loss_window must be positive")
        self._settings = ClientSettings(
            kubeconfig=kubeconfig,
            context=context,
            timeout_s=timeout_s,
            retries=retries,
            backoff_s=backoff_s,
        )
        self._client = client
        # A TrainJob create is one request: the API server acts on it within that request's
        # timeout or never (a retry after the process is gone does not happen).
        self.submit_in_flight = timedelta(seconds=timeout_s)
        self._namespaces = set(namespaces)
        self._node_loss_window = node_loss_window
        self._restart_native = restart_native
        self._clock = clock
        self._tokens: dict[str, str] = {}  # ref -> token, for refs that disappear
        self._deleted: dict[str, str] = {}  # ref -> who in this process deleted it
        self._lost_seen: dict[str, datetime] = {}  # ref -> first seen lost
        # failed pods' log ends, read once each (bounded): their error when no message
        self._failed_logs = FailedPodLogs(lambda: self.kube)
        self._use_informer = informer
        self._informer_settings = informer_settings or InformerSettings()
        self._informer: Informer | None = None
        # Issue 49: with the informer, a look maps again only the TrainJobs whose objects
        # changed (changes.py) and says which reports changed (Discovery.changes).
        self.reports_changes = informer
        self._touched = Touched() if informer else None
        self._reports = Reports()
        self._clean_last = False  # the last look read the cache, nothing refused
        self._answers = Answers()
        # ref -> (pod uid -> the pod's failure evidence), kept past the pod's deletion (M2)
        self._evidence: dict[str, dict[str, Any]] = {}
        # ref -> when a failed end without its evidence was first seen (M11)
        self._awaiting: dict[str, datetime] = {}
        # ref -> its last state while the TrainJob was there: a job torn down reads running
        # while its pods go only if it ran (report_pods_left)
        self._last_state: dict[str, State] = {}
        self._blind_since: dict[str, datetime] = {}  # ref -> first look that lacked its nodes
        self._evidence_grace = evidence_grace
        # The API server's refusals of a look's reads: logged once each, counted (refusals.py)
        self.refusals = Refusals()
        self.refused_reads = self.refusals.report  # what the API server refuses now (refusals_of)

    # -- wiring ------------------------------------------------------------------------------

    @property
    def kube(self) -> KubeClient:
        """The API client, made on first use (so ``dry_run`` needs no cluster)."""
        if self._client is None:
            self._client = KubeClient(self._settings)
        return self._client

    @property
    def informer(self) -> Informer | None:
        """The list+watch cache, started by the first discover(); None with informer=False."""
        if self._use_informer and self._informer is None:
            self._informer = Informer(self.kube, self._informer_settings, keep_gone,
                                      carry=carry, touched=self._touched)
        return self._informer

    def _expect(self, namespace: str, name: str, seen: Predicate) -> None:
        if self._informer is not None:
            self._informer.expect(collections_of(namespace)[0], name, seen)

    def close(self) -> None:
        if self._informer is not None:
            self._informer.close()
        if self._client is not None:
            self._client.close()

    def declarations(self) -> Declarations:
        """restart is native only when the runtime's JobSet failurePolicy restarts (a flag the
        operator sets, because the runtime is the cluster's, not the spec's); requeue never."""
        native = frozenset({Action.RESTART}) if self._restart_native else frozenset()
        return Declarations(
            backend=self.name,
            native_actions=native,
            node_loss_window=self._node_loss_window,
            marks_stops=True,
        )

    def validate(self, spec: JobSpec) -> None:
        """Raise KubeflowSpecError (naming the key) when the spec's kubeflow: section is bad;
        reaches no cluster."""
        parse_section(spec.kubeflow)
        build_trainjob(Submission(job_id="0", number=1, token="0.1", spec=spec), "default")

    def ready(self) -> None:
        """A usable Kubernetes config (the client is built; no request is made)."""
        _ = self.kube

    def admit(self, spec: JobSpec) -> None:
        """The cluster's own verdict before anything is recorded: a server-side dry run of the
        TrainJob's create, which runs Trainer's and JobSet's admission webhooks and the CRD's
        validation. A refusal (400, 403, 404, 422: a webhook's denial, a runtime or namespace
        that is not there, no right to create) is bad input carrying the API server's words;
        a cluster that cannot be reached is not a refusal (the supervisor's submit retries)."""
        check_context(parse_section(spec.kubeflow).context, self._settings.kubeconfig,
                      self._settings.context, self._settings.service_account_dir)
        token = f"admit-{uuid.uuid4().hex[:12]}"
        body = build_trainjob(Submission(job_id=token, number=1, token=f"{token}.1", spec=spec),
                              self.kube.default_namespace)
        try:
            with interactive():
                self.kube.create(TrainJobRes, body, dry_run=True)
        except ApiAnswer as err:
            if err.code in ADMISSION_REFUSALS:
                raise SpecError("<spec>", "kubeflow",
                                f"the cluster refused the TrainJob: {err}") from None
            raise
        except SchedulerUnreachable:
            return

    def _default_namespace(self) -> str:
        """The namespace a TrainJob goes to when its section names none: the kubeconfig
        context's, as ``submit`` uses it. Read from the configuration (no request, no plugin
        run); a configuration that cannot be used is the error ``submit`` would give."""
        if self._client is not None:
            return self._client.default_namespace
        cfg = load_config(self._settings.kubeconfig, self._settings.context,
                          self._settings.service_account_dir)
        return getattr(cfg, "namespace", None) or "default"

    def dry_run(self, submission: Submission) -> DryRun:
        """The TrainJob that ``submit`` would create, in the namespace it would use; sends
        nothing (the kubeconfig is read for the context's namespace)."""
        return DryRun(backend=self.name,
                      documents=(dry_run_trainjob(submission, self._default_namespace),))

    def logs(self, ref: str) -> list[PodLog]:
        """The logs of the TrainJob's pods (those its JobSet labels as its own), each read
        through the API server, node 0 first (``podlogs``). One list request; the reads
        happen when the follower asks each reader."""
        namespace, name = parse_ref(ref)
        pods = self.kube.list(PodRes, namespace, {JOBSET_NAME_LABEL: name})
        return pod_logs(self.kube, namespace, pods)

    # -- actions -----------------------------------------------------------------------------

    def submit(self, submission: Submission) -> str:
        body = build_trainjob(submission, self.kube.default_namespace)
        namespace = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        ref = f"{namespace}/{name}"
        self._namespaces.add(namespace)
        try:
            with interactive():
                made = self.kube.create(TrainJobRes, body)
        except ApiAnswer as err:
            if err.code != 409:
                raise SubmitRejected(f"TrainJob {ref}: {err}") from None
            # Already there: ours (a repeated submit of the same token) or a name collision.
            with interactive():
                existing = self.kube.get(TrainJobRes, namespace, name)
            if existing is None or labels(existing).get(TOKEN_LABEL) != submission.token:
                raise SubmitRejected(
                    f"TrainJob {ref}: {err}; it does not carry token {submission.token}"
                ) from None
            made = existing
        self._expect(namespace, name, _created(str(made.get("metadata", {}).get("uid"))))
        self._tokens[ref] = submission.token
        return ref

    def _delete(self, ref: str, actor: str) -> None:
        namespace, name = parse_ref(ref)
        self._deleted[ref] = actor
        self.kube.delete(TrainJobRes, namespace, name, cascade=CascadeType.BACKGROUND)
        self._expect(namespace, name, _deleting)

    def stop(self, ref: str) -> None:
        """Annotate the TrainJob as dispatch's stop, then delete it: a deletion seen without
        the annotation is a person's, final (S14). One another already deletes keeps their
        name: the annotation is taken back and their delete stands."""
        if self._deleted.get(ref) == SOMEONE_ELSE:
            return  # seen deleted by someone else: their cancel, already under way
        namespace, name = parse_ref(ref)
        mark = {"metadata": {"annotations": {STOP_ANNOTATION: "stopped by dispatch"}}}
        try:
            marked = self.kube.merge_patch(TrainJobRes, namespace, name, mark)
        except ApiAnswer as err:
            if err.code == 404:
                return  # gone already: nothing to stop
            raise
        if meta(marked).get("deletionTimestamp") and self._deleted.get(ref) != "dispatch":
            # Someone else's delete came between our look and the mark: theirs stands.
            unmark = {"metadata": {"annotations": {STOP_ANNOTATION: None}}}
            self.kube.merge_patch(TrainJobRes, namespace, name, unmark)
            self._deleted[ref] = SOMEONE_ELSE
            return
        self._delete(ref, "dispatch")

    def cancel(self, ref: str) -> None:
        self._delete(ref, "dispatch")

    def open_gate(self, ref: str) -> None:
        namespace, name = parse_ref(ref)
        patch = {"metadata": {"annotations": {GATE_ANNOTATION: "open"}}, "spec": {"suspend": False}}
        try:
            self.kube.merge_patch(TrainJobRes, namespace, name, patch)
        except ApiAnswer as err:
            if err.code == 404:
                raise ObjectGone(f"TrainJob {ref} does not exist") from None
            raise SubmitRejected(f"TrainJob {ref}: open gate: {err}") from None
        self._expect(namespace, name, _ungated)

    # -- discovery ---------------------------------------------------------------------------

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        now = self._clock()
        wanted_tokens = set(tokens)
        wanted_refs = set(refs)
        namespaces = set(self._namespaces)
        for ref in wanted_refs:
            namespaces.add(parse_ref(ref)[0])
        if not namespaces:
            namespaces.add(self.kube.default_namespace)

        informer = self.informer
        look = look_cached(informer, namespaces) if informer is not None else None
        if look is None:
            look = look_listed(self.kube, namespaces)
        self.refusals.seen(look.refusals, look.asked)
        # Kept reports stand only between two clean cache reads (a list may be ahead of it)
        clean = look.touched is not None and not look.refusals
        self._reports.forget(look.touched if clean and self._clean_last else None)
        self._clean_last = clean

        reports: list[ObjectReport] = []
        seen_refs: set[str] = set()
        withheld = False
        for tj in look.trainjobs:
            ns = str(tj.get("metadata", {}).get("namespace", ""))
            name = name_of(tj)
            ref = f"{ns}/{name}"
            token = labels(tj).get(TOKEN_LABEL)
            if ref not in wanted_refs and token not in wanted_tokens:
                continue
            seen_refs.add(ref)
            if isinstance(token, str):
                self._tokens[ref] = token
            who = deleted_by(tj)  # the API server's word beats what this process remembers
            if who == "dispatch":
                self._deleted[ref] = who
            elif who is not None:
                self._deleted.setdefault(ref, who)
            kept_report = self._reports.kept.get(ref)
            if kept_report is not None:  # none of its objects changed: the same report
                reports.append(kept_report)
                continue
            self._reports.mapped += 1
            pods, kept = with_evidence(look.pods.get((ns, name), []), self._evidence.get(ref, {}))
            if kept:
                self._evidence[ref] = kept
            jobset = look.jobsets.get((ns, name))
            report = report_trainjob(
                tj, jobset, look.jobs.get((ns, name), []), pods, look.nodes, now,
                look.events.get(ns, []),
            )
            if self._withheld(ref, report, now) or self._blind(ref, report, look, now):
                withheld = True
                continue
            current = current_objects(jobset, pods)
            # the pods' own files in the spec's shared_dir: progress, torchelastic's error
            report = with_shared_files(report, tj, current, now,
                                       functools.partial(self._failed_logs.tail_of, ns))
            report = self._failed_logs.with_log_error(ns, report, current)
            self._last_state[ref] = report.state
            report = self._remember_loss(report)
            self._reports.keep(tj, report)
            reports.append(report)
        for ref in sorted(wanted_refs - seen_refs):
            if parse_ref(ref)[0] in look.refused:
                continue
            self._lost_seen.pop(ref, None)
            gone = report_gone(ref, self._tokens.get(ref), self._deleted.get(ref), now)
            left = [p for p in look.pods.get(parse_ref(ref), []) if not is_evidence(p)]
            reports.append(report_pods_left(gone, left, self._last_state.get(ref)) if left
                           else gone)
        known = wanted_refs | seen_refs  # once, not per ref (a look over every job)
        for ref in [r for r in self._last_state if r not in known]:
            del self._last_state[ref]
        for kept_for in (self._evidence, self._awaiting, self._blind_since):
            for ref in [r for r in kept_for if r not in seen_refs]:
                del kept_for[ref]
        self._reports.prune(seen_refs)
        changes = self._answers.changes(reports) if self.reports_changes else None
        return Discovery(at=now, objects=tuple(reports),
                         complete=not look.refused and not withheld, changes=changes)

    def _withheld(self, ref: str, report: ObjectReport, now: datetime) -> bool:
        """A failed end whose evidence has not arrived (M11: the TrainJob's Failed came on its
        watch before the pod's termination on another): not committed from this look, which is
        reported incomplete, for at most ``evidence_grace`` from when it was first seen; then
        it is committed as it reads (unknown, the scheduler's words kept)."""
        return self._within_grace(self._awaiting, ref, awaits_evidence(report), now)

    def _blind(self, ref: str, report: ObjectReport, look: Look, now: datetime) -> bool:
        """A job read node-lost by its node's condition, in a look that could not read the
        nodes (a restarting API server refuses them for a moment): not a recovery; left out
        of the look, reported incomplete, for at most ``evidence_grace``."""
        blind = (look.nodes_refused and ref in self._lost_seen and report.alive
                 and report.cause.kind is not CauseKind.NODE_LOST)
        return self._within_grace(self._blind_since, ref, blind, now)

    def _within_grace(self, since: dict[str, datetime], ref: str, holds: bool,
                      now: datetime) -> bool:
        """While ``holds``: True for at most ``evidence_grace`` from when it first held for
        ``ref`` (kept in ``since``); forgotten once it does not."""
        if not holds:
            since.pop(ref, None)
            return False
        return now - since.setdefault(ref, now) < self._evidence_grace

    def _remember_loss(self, report: ObjectReport) -> ObjectReport:
        """Keep the first time a loss was seen, so a fallback ``now`` does not move it."""
        if report.cause.kind is not CauseKind.NODE_LOST or report.lost_since is None:
            self._lost_seen.pop(report.ref, None)
            return report
        first = min(self._lost_seen.get(report.ref, report.lost_since), report.lost_since)
        self._lost_seen[report.ref] = first
        if first == report.lost_since:
            return report
        cause = msgspec.structs.replace(report.cause, at=first)
        return msgspec.structs.replace(report, lost_since=first, cause=cause)
