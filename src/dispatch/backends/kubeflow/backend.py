"""KubeflowBackend: TrainJobs (trainer.kubeflow.org/v1alpha1) behind dispatch's Backend protocol.

The imperative shell around ``mapping`` (pure) and ``manifest`` (pure). Choices, and why:

- Discovery is **lists per tick**, not a list+watch cache: each ``discover`` makes, per
  namespace, one labelled list each of TrainJobs (``dispatch.io/managed=true``), JobSets (same
  label, set through the TrainJob's runtimePatches), Jobs and Pods (``jobset.sigs.k8s.io/
  jobset-name`` exists), plus one cluster-wide list of Nodes: ``4 x namespaces + 1`` requests,
  constant in the number of jobs. DESIGN P2 on Kubernetes asks for an informer (0 requests on a
  steady tick); that is not built yet.
- Stop and cancel delete with **foreground** propagation: the TrainJob stays visible (with a
  deletionTimestamp) until its JobSet, Jobs and Pods are gone, so "the old object ended" (S11:
  the replacement's gate opens only then) means its pods are really gone, including pods stuck
  Terminating on a lost node; until the node is deleted or tainted out-of-service it stays.
- The gate is ``spec.suspend``; ``open_gate`` merge-patches it to false.
- A TrainJob we bound that the API server no longer has is reported cancelled, cause
  cancelled, provenance actor; the actor is "dispatch" when this process deleted it, else
  unknown (None).
- ``lost_since`` is the earliest time the API server gives (taint timeAdded, Ready or
  FailureTarget lastTransitionTime); without one it is when this process first saw the loss,
  remembered across ticks so the fence's window does not restart each tick.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import yaml
from lightkube.types import CascadeType

from dispatch.backends.base import Submission, SubmitRejected
from dispatch.backends.kubeflow.client import (
    ApiAnswer,
    ClientSettings,
    JobRes,
    JobSetRes,
    KubeClient,
    NodeRes,
    PodRes,
    TrainJobRes,
)
from dispatch.backends.kubeflow.manifest import build_trainjob, parse_section
from dispatch.backends.kubeflow.mapping import (
    GATE_ANNOTATION,
    JOBSET_NAME_LABEL,
    MANAGED_LABEL,
    TOKEN_LABEL,
    labels,
    name_of,
    report_gone,
    report_trainjob,
)
from dispatch.model import CauseKind, Discovery, ObjectReport
from dispatch.policy import Action, Declarations
from dispatch.spec import JobSpec

DEFAULT_NODE_LOSS_WINDOW = timedelta(minutes=5)


class ObjectGone(LookupError):
    """The TrainJob a call named does not exist (any more)."""


def parse_ref(ref: str) -> tuple[str, str]:
    namespace, sep, name = ref.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise ValueError(f"not a kubeflow object ref (namespace/name): {ref!r}")
    return namespace, name


def _utcnow() -> datetime:
    return datetime.now(UTC)


class KubeflowBackend:
    """Kubeflow Trainer on Kubernetes. Config from ``kubeconfig`` (a file) or, when None, the
    in-cluster service account, then $KUBECONFIG / ~/.kube/config."""

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
        self._namespaces = set(namespaces)
        self._node_loss_window = node_loss_window
        self._restart_native = restart_native
        self._clock = clock
        self._tokens: dict[str, str] = {}  # ref -> token, for refs that disappear
        self._deleted: dict[str, str] = {}  # ref -> who in this process deleted it
        self._lost_seen: dict[str, datetime] = {}  # ref -> first seen lost

    # -- wiring ------------------------------------------------------------------------------

    @property
    def kube(self) -> KubeClient:
        """The API client, made on first use (so ``dry_run`` needs no cluster)."""
        if self._client is None:
            self._client = KubeClient(self._settings)
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()

    def declarations(self) -> Declarations:
        """restart is native only when the runtime's JobSet failurePolicy restarts (a flag the
        operator sets, because the runtime is the cluster's, not the spec's); requeue never."""
        native = frozenset({Action.RESTART}) if self._restart_native else frozenset()
        return Declarations(
            backend=self.name, native_actions=native, node_loss_window=self._node_loss_window
        )

    @staticmethod
    def check_spec(spec: JobSpec) -> None:
        """Raise KubeflowSpecError (naming the key) when the spec's kubeflow: section is bad."""
        parse_section(spec.kubeflow)

    def _default_namespace(self) -> str:
        if self._client is not None:
            return self._client.default_namespace
        return "default"

    def manifest(self, submission: Submission) -> dict[str, Any]:
        return build_trainjob(submission, self._default_namespace())

    def dry_run(self, submission: Submission) -> str:
        """The TrainJob YAML that ``submit`` would create; reaches no cluster."""
        return yaml.safe_dump(self.manifest(submission), sort_keys=False)

    # -- actions -----------------------------------------------------------------------------

    def submit(self, submission: Submission) -> str:
        body = build_trainjob(submission, self.kube.default_namespace)
        namespace = body["metadata"]["namespace"]
        name = body["metadata"]["name"]
        ref = f"{namespace}/{name}"
        self._namespaces.add(namespace)
        try:
            self.kube.create(TrainJobRes, body)
        except ApiAnswer as err:
            if err.code != 409:
                raise SubmitRejected(f"TrainJob {ref}: {err}") from None
            # Already there: ours (a repeated submit of the same token) or a name collision.
            existing = self.kube.get(TrainJobRes, namespace, name)
            if existing is None or labels(existing).get(TOKEN_LABEL) != submission.token:
                raise SubmitRejected(
                    f"TrainJob {ref}: {err}; it does not carry token {submission.token}"
                ) from None
        self._tokens[ref] = submission.token
        return ref

    def _delete(self, ref: str, actor: str) -> None:
        namespace, name = parse_ref(ref)
        self._deleted[ref] = actor
        self.kube.delete(TrainJobRes, namespace, name, cascade=CascadeType.FOREGROUND)

    def stop(self, ref: str) -> None:
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

        complete = True
        refused: set[str] = set()
        trainjobs: list[dict[str, Any]] = []
        jobsets: dict[tuple[str, str], dict[str, Any]] = {}
        jobs: dict[tuple[str, str], list[dict[str, Any]]] = {}
        pods: dict[tuple[str, str], list[dict[str, Any]]] = {}
        for ns in sorted(namespaces):
            try:
                found = self.kube.list(TrainJobRes, ns, {MANAGED_LABEL: "true"})
                ns_jobsets = self.kube.list(JobSetRes, ns, {MANAGED_LABEL: "true"})
                ns_jobs = self.kube.list(JobRes, ns, {JOBSET_NAME_LABEL: None})
                ns_pods = self.kube.list(PodRes, ns, {JOBSET_NAME_LABEL: None})
            except ApiAnswer:
                # Refused (403, CRD missing): an incomplete look, never a made-up answer.
                complete = False
                refused.add(ns)
                continue
            trainjobs.extend(found)
            for js in ns_jobsets:
                jobsets[(ns, name_of(js))] = js
            for job in ns_jobs:
                jobs.setdefault((ns, str(labels(job).get(JOBSET_NAME_LABEL))), []).append(job)
            for pod in ns_pods:
                pods.setdefault((ns, str(labels(pod).get(JOBSET_NAME_LABEL))), []).append(pod)
        try:
            nodes = self.kube.list(NodeRes, None, {})
        except ApiAnswer:
            nodes = []  # nodes may be forbidden; FailureTarget and disruptions still fence

        reports: list[ObjectReport] = []
        seen_refs: set[str] = set()
        for tj in trainjobs:
            ns = str(tj.get("metadata", {}).get("namespace", ""))
            name = name_of(tj)
            ref = f"{ns}/{name}"
            token = labels(tj).get(TOKEN_LABEL)
            if ref not in wanted_refs and token not in wanted_tokens:
                continue
            seen_refs.add(ref)
            if isinstance(token, str):
                self._tokens[ref] = token
            report = report_trainjob(
                tj,
                jobsets.get((ns, name)),
                jobs.get((ns, name), []),
                pods.get((ns, name), []),
                nodes,
                now,
            )
            reports.append(self._remember_loss(report))
        for ref in sorted(wanted_refs - seen_refs):
            if parse_ref(ref)[0] in refused:
                continue
            self._lost_seen.pop(ref, None)
            reports.append(report_gone(ref, self._tokens.get(ref), self._deleted.get(ref), now))
        return Discovery(at=now, objects=tuple(reports), complete=complete)

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
