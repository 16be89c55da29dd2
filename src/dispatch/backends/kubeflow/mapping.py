"""Kubernetes words -> what dispatch says of one TrainJob: pure functions, ``now`` passed in.

The inputs are the objects exactly as the API server returns them (plain JSON dicts): the
TrainJob, the JobSet Trainer made for it, that JobSet's batch/v1 Jobs and Pods, and the Nodes.
The output is one ``ObjectReport``. Rows come from the Kubernetes part of SCHEDULER-SIGNALS.md.

Nothing here trusts the shape of its input: a field of the wrong type reads as missing, and a
word we cannot map becomes ``CauseKind.UNKNOWN`` with the words kept verbatim in the detail.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from dispatch.core.model import Cause, CauseKind, Execution, ObjectReport, Provenance, State

TOKEN_LABEL = "dispatch.io/token"
MANAGED_LABEL = "dispatch.io/managed"
GATE_ANNOTATION = "dispatch.io/gate"
JOBSET_NAME_LABEL = "jobset.sigs.k8s.io/jobset-name"
RESTART_ATTEMPT_LABEL = "jobset.sigs.k8s.io/restart-attempt"

# Node taints that mean the node (and so the pods on it) may be gone (SCHEDULER-SIGNALS).
LOST_NODE_TAINTS = frozenset(
    {
        "node.kubernetes.io/unreachable",
        "node.kubernetes.io/not-ready",
        "node.kubernetes.io/out-of-service",
    }
)

DISRUPTION_KINDS: dict[str, CauseKind] = {
    "PreemptionByScheduler": CauseKind.PREEMPTED,
    "EvictionByEvictionAPI": CauseKind.PREEMPTED,
    "DeletionByTaintManager": CauseKind.NODE_LOST,
    "DeletionByPodGC": CauseKind.NODE_LOST,
}
# What the kubelet itself writes when it ends a pod (DisruptionTarget reason
# TerminationByKubelet, or the pod's status reason/message), from Kubernetes'
# pkg/kubelet (eviction/helpers.go, nodeshutdown, preemption). Mapped only on these words.
KUBELET_LOW_ON_RESOURCE = re.compile(r"^The node was low on resource: ([A-Za-z0-9._/-]+)\.")
# The resource the node ran short of -> the kind; ephemeral-storage, pids and inodes fit no
# kind of the closed list (the node is fine; no-capacity is for a job that cannot start),
# so they stay unknown with the kubelet's words.
KUBELET_LOW_RESOURCE_KINDS: dict[str, CauseKind] = {"memory": CauseKind.OUT_OF_MEMORY}
KUBELET_MESSAGES: dict[str, CauseKind] = {
    "Pod was terminated in response to imminent node shutdown.": CauseKind.NODE_LOST,
    "Pod was preempted by Kubelet to accommodate a critical pod.": CauseKind.PREEMPTED,
    "Preempted in order to admit critical pod": CauseKind.PREEMPTED,
}
WAITING_LAUNCH_FAILED = frozenset(
    {"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"}
)
TERMINATED_LAUNCH_FAILED = frozenset({"StartError", "ContainerCannotRun"})
ALIVE_POD_PHASES = frozenset({"Pending", "Running"})

# Evidence ranks: infrastructure explains an exit, so it outranks it; among exits the first wins.
_RANK_DISRUPTION = 0
_RANK_OOM = 1
_RANK_DEADLINE = 2
_RANK_LAUNCH = 3
_RANK_EXIT = 4


# -- safe readers: the wrong type reads as missing --------------------------------------------


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_time(value: Any) -> datetime | None:
    """RFC 3339 as Kubernetes writes it ('2026-01-02T03:04:05Z'); None when absent or bad."""
    text = _str(value)
    if not text:
        return None
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def meta(obj: Any) -> Mapping[str, Any]:
    return _map(_map(obj).get("metadata"))


def labels(obj: Any) -> Mapping[str, Any]:
    return _map(meta(obj).get("labels"))


def name_of(obj: Any) -> str:
    return _str(meta(obj).get("name")) or ""


def namespace_of(obj: Any) -> str:
    return _str(meta(obj).get("namespace")) or ""


def conditions(obj: Any) -> list[Mapping[str, Any]]:
    return [_map(c) for c in _list(_map(_map(obj).get("status")).get("conditions"))]


def true_condition(obj: Any, ctype: str) -> Mapping[str, Any] | None:
    for cond in conditions(obj):
        if cond.get("type") == ctype and cond.get("status") == "True":
            return cond
    return None


def condition(obj: Any, ctype: str) -> Mapping[str, Any] | None:
    for cond in conditions(obj):
        if cond.get("type") == ctype:
            return cond
    return None


def words(what: str, cond: Mapping[str, Any]) -> str:
    """A condition as the scheduler said it: type=status, reason and message verbatim."""
    parts = [f"{what} {cond.get('type')}={cond.get('status')}"]
    if cond.get("reason"):
        parts.append(f"reason={cond.get('reason')}")
    if cond.get("message"):
        parts.append(f"message={cond.get('message')!r}")
    return " ".join(parts)


def _join(*details: str) -> str:
    return "; ".join(d for d in details if d)


# -- nodes -------------------------------------------------------------------------------------


def node_lost_since(node: Mapping[str, Any]) -> tuple[datetime | None, str] | None:
    """When a node was seen lost and the words that say so; None when it looks healthy.

    Lost: a taint unreachable / not-ready / out-of-service, or Ready not True. The time is the
    earliest taint timeAdded or Ready lastTransitionTime, None when neither says.
    """
    found: list[tuple[datetime | None, str]] = []
    for taint in _list(_map(_map(node).get("spec")).get("taints")):
        t = _map(taint)
        key = _str(t.get("key"))
        if key in LOST_NODE_TAINTS:
            found.append((parse_time(t.get("timeAdded")), f"taint {key}:{t.get('effect')}"))
    ready = condition(node, "Ready")
    if ready is not None and ready.get("status") != "True":
        found.append((parse_time(ready.get("lastTransitionTime")), words("node", ready)))
    if not found:
        return None
    times = [t for t, _ in found if t is not None]
    return (min(times) if times else None), "; ".join(w for _, w in found)


def lost_nodes(nodes: Iterable[Any]) -> dict[str, tuple[datetime | None, str]]:
    out: dict[str, tuple[datetime | None, str]] = {}
    for node in nodes:
        lost = node_lost_since(_map(node))
        if lost is not None and name_of(node):
            out[name_of(node)] = lost
    return out


# -- pods --------------------------------------------------------------------------------------


def _container_statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = _map(pod.get("status"))
    return [
        _map(c)
        for key in ("initContainerStatuses", "containerStatuses")
        for c in _list(status.get(key))
    ]


def _pod_ref(pod: Mapping[str, Any]) -> str:
    return f"pod {namespace_of(pod)}/{name_of(pod)}"


def _terminated_signal(
    pod: Mapping[str, Any], cs: Mapping[str, Any], term: Mapping[str, Any]
) -> tuple[int, datetime | None, Cause] | None:
    reason = _str(term.get("reason")) or ""
    code = _int(term.get("exitCode"))
    at = parse_time(term.get("finishedAt"))
    said = f"{_pod_ref(pod)} container {cs.get('name')}: terminated reason={reason} exitCode={code}"
    if term.get("message"):
        said += f" message={term.get('message')!r}"
    if reason == "OOMKilled":
        return (
            _RANK_OOM,
            at,
            Cause(kind=CauseKind.OUT_OF_MEMORY, detail=said, exit_code=code, at=at),
        )
    if reason in TERMINATED_LAUNCH_FAILED:
        return (
            _RANK_LAUNCH,
            at,
            Cause(kind=CauseKind.LAUNCH_FAILED, detail=said, exit_code=code, at=at),
        )
    if code is None or code == 0:
        return None
    if code == 137:
        # SIGKILL without OOMKilled: a kill from anywhere; never guessed as the app's own exit.
        return _RANK_EXIT, at, Cause(kind=CauseKind.UNKNOWN, detail=said, exit_code=code, at=at)
    return (
        _RANK_EXIT,
        at,
        Cause(
            kind=CauseKind.NON_ZERO_EXIT,
            provenance=Provenance.APPLICATION,
            detail=said,
            exit_code=code,
            at=at,
        ),
    )


def kubelet_kind(message: str) -> CauseKind:
    """Why the kubelet ended a pod, from its own message only; unknown for anything else
    (never a guess from a word that happens to appear in it)."""
    low = KUBELET_LOW_ON_RESOURCE.match(message)
    if low is not None:
        return KUBELET_LOW_RESOURCE_KINDS.get(low.group(1), CauseKind.UNKNOWN)
    return KUBELET_MESSAGES.get(message.strip(), CauseKind.UNKNOWN)


def _disruption_kind(reason: str, message: str) -> CauseKind:
    if reason in DISRUPTION_KINDS:
        return DISRUPTION_KINDS[reason]
    if reason == "TerminationByKubelet":
        return kubelet_kind(message)
    return CauseKind.UNKNOWN


def pod_end_signals(pod: Any) -> list[tuple[int, datetime | None, Cause]]:
    """Every signal in one pod that says why an execution ended, with its rank and time."""
    p = _map(pod)
    found: list[tuple[int, datetime | None, Cause]] = []
    disruption = true_condition(p, "DisruptionTarget")
    if disruption is not None:
        reason = _str(disruption.get("reason")) or ""
        message = _str(disruption.get("message")) or ""
        at = parse_time(disruption.get("lastTransitionTime"))
        found.append(
            (
                _RANK_DISRUPTION,
                at,
                Cause(
                    kind=_disruption_kind(reason, message),
                    detail=f"{_pod_ref(p)}: {words('pod', disruption)}",
                    at=at,
                ),
            )
        )
    status = _map(p.get("status"))
    if status.get("reason") in ("Evicted", "Preempting"):
        message = _str(status.get("message")) or ""
        found.append(
            (
                _RANK_DISRUPTION,
                None,
                Cause(
                    kind=kubelet_kind(message),
                    detail=f"{_pod_ref(p)}: reason={status.get('reason')} message={message!r}",
                ),
            )
        )
    for cs in _container_statuses(p):
        for holder in (_map(cs.get("state")), _map(cs.get("lastState"))):
            term = _map(holder.get("terminated"))
            if term:
                sig = _terminated_signal(p, cs, term)
                if sig is not None:
                    found.append(sig)
                break
    return found


def pending_signal(pod: Any) -> tuple[State, Cause] | None:
    """Why a pod that has not started is waiting: image / config errors, capacity, a gate."""
    p = _map(pod)
    for cs in _container_statuses(p):
        waiting = _map(_map(cs.get("state")).get("waiting"))
        reason = _str(waiting.get("reason"))
        if reason in WAITING_LAUNCH_FAILED:
            said = f"{_pod_ref(p)} container {cs.get('name')}: waiting reason={reason}"
            if waiting.get("message"):
                said += f" message={waiting.get('message')!r}"
            return State.PENDING, Cause(kind=CauseKind.LAUNCH_FAILED, detail=said)
    scheduled = condition(p, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        reason = scheduled.get("reason")
        at = parse_time(scheduled.get("lastTransitionTime"))
        said = f"{_pod_ref(p)}: {words('pod', scheduled)}"
        if reason == "Unschedulable":
            return State.PENDING, Cause(kind=CauseKind.NO_CAPACITY, detail=said, at=at)
        if reason == "SchedulingGated":
            return State.HELD, Cause(kind=CauseKind.HELD, detail=said, at=at)
    return None


def pod_alive(pod: Any) -> bool:
    return _map(_map(pod).get("status")).get("phase") in ALIVE_POD_PHASES


def pod_node(pod: Any) -> str | None:
    return _str(_map(_map(pod).get("spec")).get("nodeName"))


def restart_attempt(obj: Any) -> int | None:
    text = _str(labels(obj).get(RESTART_ATTEMPT_LABEL))
    return int(text) if text is not None and text.isdigit() else None


# -- the failure and the fence -----------------------------------------------------------------


def first_cause(signals: Iterable[tuple[int, datetime | None, Cause]]) -> Cause | None:
    """The best explanation: lowest rank, then the earliest; ties keep input order."""
    best: tuple[int, datetime, int] | None = None
    chosen: Cause | None = None
    far = datetime.max.replace(tzinfo=UTC)
    for i, (rank, at, cause) in enumerate(signals):
        key = (rank, at or far, i)
        if best is None or key < best:
            best, chosen = key, cause
    return chosen


def failure_cause(
    ended: Sequence[tuple[str, Mapping[str, Any]]],
    jobs: Sequence[Any],
    pods: Sequence[Any],
) -> Cause:
    """Why an execution failed, from the child Jobs and their pods (SCHEDULER-SIGNALS rows).

    ``ended`` are the (what, condition) pairs that said it failed (TrainJob / JobSet Failed);
    their words always lead the detail. With no evidence the cause is unknown, words kept.
    """
    said = _join(*(words(what, cond) for what, cond in ended))
    at = next((parse_time(c.get("lastTransitionTime")) for _, c in ended), None)
    for _, cond in ended:
        if cond.get("type") == "DeadlineExceeded" or cond.get("reason") == "DeadlineExceeded":
            return Cause(kind=CauseKind.TIME_LIMIT, detail=said, at=at)
    signals: list[tuple[int, datetime | None, Cause]] = []
    for job in jobs:
        for ctype in ("Failed", "FailureTarget"):
            jcond = true_condition(job, ctype)
            if jcond is not None and jcond.get("reason") == "DeadlineExceeded":
                jat = parse_time(jcond.get("lastTransitionTime"))
                signals.append(
                    (
                        _RANK_DEADLINE,
                        jat,
                        Cause(
                            kind=CauseKind.TIME_LIMIT,
                            detail=f"job {name_of(job)}: {words('job', jcond)}",
                            at=jat,
                        ),
                    )
                )
    for pod in pods:
        signals.extend(pod_end_signals(pod))
    found = first_cause(signals)
    if found is None:
        job_words = [
            f"job {name_of(j)}: {words('job', c)}"
            for j in jobs
            for c in (true_condition(j, "Failed"),)
            if c is not None
        ]
        return Cause(kind=CauseKind.UNKNOWN, detail=_join(said, *job_words), at=at)
    return Cause(
        kind=found.kind,
        provenance=found.provenance,
        detail=_join(said, found.detail),
        exit_code=found.exit_code,
        at=found.at or at,
    )


def node_lost(
    jobs: Sequence[Any],
    pods: Sequence[Any],
    lost: Mapping[str, tuple[datetime | None, str]],
    now: datetime,
) -> tuple[datetime, str] | None:
    """The fence's input (S11): alive pods on a lost node, a lost-node disruption, or a Job
    holding FailureTarget. Returns (since, words); since falls back to ``now``."""
    times: list[datetime | None] = []
    said: list[str] = []
    for pod in pods:
        if not pod_alive(pod):
            continue
        node = pod_node(pod)
        if node is not None and node in lost:
            since, why = lost[node]
            times.append(since)
            terminating = " (Terminating)" if meta(pod).get("deletionTimestamp") else ""
            said.append(f"{_pod_ref(_map(pod))}{terminating} on node {node}: {why}")
        disruption = true_condition(pod, "DisruptionTarget")
        if (
            disruption is not None
            and DISRUPTION_KINDS.get(_str(disruption.get("reason")) or "") is CauseKind.NODE_LOST
        ):
            times.append(parse_time(disruption.get("lastTransitionTime")))
            said.append(f"{_pod_ref(_map(pod))}: {words('pod', disruption)}")
    for job in jobs:
        cond = true_condition(job, "FailureTarget")
        if cond is not None and true_condition(job, "Failed") is None:
            times.append(parse_time(cond.get("lastTransitionTime")))
            said.append(f"job {name_of(job)}: {words('job', cond)}")
    if not said:
        return None
    known = [t for t in times if t is not None]
    return (min(known) if known else now), "; ".join(said)


# -- the report --------------------------------------------------------------------------------


def _restarts(jobset: Any) -> int:
    value = _int(_map(_map(jobset).get("status")).get("restarts"))
    return value if value is not None and value > 0 else 0


def _started(pods: Sequence[Any]) -> datetime | None:
    times = [parse_time(_map(_map(p).get("status")).get("startTime")) for p in pods]
    known = [t for t in times if t is not None]
    return min(known) if known else None


def _nodes(pods: Sequence[Any]) -> tuple[str, ...]:
    return tuple(sorted({n for p in pods if (n := pod_node(p)) is not None}))


def _restart_cause(attempt: int, jobs: Sequence[Any], pods: Sequence[Any], jobset: Any) -> Cause:
    """Why JobSet attempt ``attempt`` ended: its pods' evidence if still visible, else requeued
    with the JobSet's own words."""
    mine = [p for p in pods if restart_attempt(p) == attempt]
    my_jobs = [j for j in jobs if restart_attempt(j) == attempt]
    header = f"jobset {name_of(jobset)}: status.restarts={_restarts(jobset)}"
    note = f"restart {attempt + 1} of the JobSet"
    restarting = condition(jobset, "RestartingJobSet")
    if restarting is not None:
        header = _join(header, words("jobset", restarting))
    signals = [s for p in mine for s in pod_end_signals(p)]
    found = first_cause(signals)
    if found is None and my_jobs:
        found = failure_cause((), my_jobs, ())
        if found.kind is CauseKind.UNKNOWN:
            found = None
    if found is None:
        return Cause(kind=CauseKind.REQUEUED, detail=header, note=note)
    return Cause(
        kind=found.kind,
        provenance=found.provenance,
        detail=_join(header, found.detail),
        note=note,
        exit_code=found.exit_code,
        at=found.at,
    )


def report_trainjob(
    trainjob: Any,
    jobset: Any,
    jobs: Sequence[Any],
    pods: Sequence[Any],
    nodes: Iterable[Any],
    now: datetime,
) -> ObjectReport:
    """One TrainJob and what hangs off it -> the ObjectReport (state, cause, executions)."""
    tj = _map(trainjob)
    js = _map(jobset)
    ref = f"{namespace_of(tj)}/{name_of(tj)}"
    token = _str(labels(tj).get(TOKEN_LABEL))
    restarts = _restarts(js)
    # The current attempt's objects; objects without the label belong to it (no JobSet yet).
    cur_jobs = [j for j in jobs if restart_attempt(j) in (None, restarts)]
    cur_pods = [p for p in pods if restart_attempt(p) in (None, restarts)]
    past = tuple(
        Execution(index=i, cause=_restart_cause(i, jobs, pods, js)) for i in range(restarts)
    )
    started = _started(cur_pods)
    cur_nodes = _nodes(cur_pods)
    spec = _map(tj.get("spec"))
    gated = spec.get("suspend") is True

    def ended(state: State, cause: Cause) -> ObjectReport:
        last = Execution(
            index=restarts, started_at=started, ended_at=cause.at, cause=cause, nodes=cur_nodes
        )
        return ObjectReport(
            ref=ref,
            token=token,
            state=state,
            cause=cause,
            executions=(*past, last),
            nodes=cur_nodes,
            gated=gated,
        )

    def live(state: State, cause: Cause, lost_since: datetime | None = None) -> ObjectReport:
        current = Execution(index=restarts, started_at=started, nodes=cur_nodes)
        return ObjectReport(
            ref=ref,
            token=token,
            state=state,
            cause=cause,
            executions=(*past, current),
            nodes=cur_nodes,
            lost_since=lost_since,
            gated=gated,
        )

    # Terminal: the TrainJob's own conditions first, the JobSet's when Trainer has not copied
    # them yet.
    for what, obj, done_type in (("trainjob", tj, "Complete"), ("jobset", js, "Completed")):
        done = true_condition(obj, done_type)
        if done is not None:
            at = parse_time(done.get("lastTransitionTime"))
            cause = Cause(kind=CauseKind.NONE, detail=words(what, done), at=at)
            return ended(State.SUCCEEDED, cause)
    failed = [
        (what, cond)
        for what, obj in (("trainjob", tj), ("jobset", js))
        for ctype in ("Failed", "DeadlineExceeded")
        if (cond := true_condition(obj, ctype)) is not None
    ]
    if failed:
        return ended(State.FAILED, failure_cause(failed, cur_jobs, cur_pods))
    unsupported = true_condition(tj, "TrainingRuntimeNotSupported")
    if unsupported is not None:
        at = parse_time(unsupported.get("lastTransitionTime"))
        return ended(
            State.FAILED,
            Cause(kind=CauseKind.LAUNCH_FAILED, detail=words("trainjob", unsupported), at=at),
        )

    # Held: suspended (our gate, or someone's).
    suspended = true_condition(tj, "Suspended")
    if suspended is not None or gated:
        ours = _str(_map(meta(tj).get("annotations")).get(GATE_ANNOTATION)) == "closed"
        detail = words("trainjob", suspended) if suspended is not None else "spec.suspend=true"
        at = parse_time(suspended.get("lastTransitionTime")) if suspended is not None else None
        cause = Cause(
            kind=CauseKind.HELD,
            provenance=Provenance.ACTOR if ours else Provenance.SCHEDULER,
            actor="dispatch" if ours else None,
            detail=detail,
            at=at,
        )
        return live(State.HELD, cause)

    # The fence: alive, but a node under it is lost or a Job waits at FailureTarget.
    active = any(pod_alive(p) for p in cur_pods) or any(
        (_int(_map(s).get("active")) or 0) > 0
        for s in _list(_map(tj.get("status")).get("jobsStatus"))
    )
    if active:
        lost = node_lost(cur_jobs, cur_pods, lost_nodes(nodes), now)
        if lost is not None:
            since, said = lost
            return live(
                State.RUNNING, Cause(kind=CauseKind.NODE_LOST, detail=said, at=since), since
            )

    # A pod that cannot start holds the whole gang back, even while its peers run.
    for pod in cur_pods:
        sig = pending_signal(pod)
        if sig is not None:
            return live(*sig)
    running = any(_map(_map(p).get("status")).get("phase") == "Running" for p in cur_pods) or (
        not cur_pods
        and any(
            (_int(_map(s).get("ready")) or 0) > 0
            for s in _list(_map(tj.get("status")).get("jobsStatus"))
        )
    )
    if running:
        return live(State.RUNNING, Cause(kind=CauseKind.NONE))
    if restarts and past[-1].cause is not None:
        # Restarted and not running again yet: recovering, with why the last attempt ended.
        return live(State.RECOVERING, past[-1].cause)
    resumed = condition(tj, "Suspended")
    if resumed is not None and resumed.get("status") == "False":
        at = parse_time(resumed.get("lastTransitionTime"))
        return live(
            State.PENDING,
            Cause(kind=CauseKind.RELEASED, detail=words("trainjob", resumed), at=at),
        )
    return live(State.PENDING, Cause(kind=CauseKind.NONE))


def report_gone(ref: str, token: str | None, actor: str | None, now: datetime) -> ObjectReport:
    """A TrainJob we bound that the API server no longer has: cancelled (SCHEDULER-SIGNALS:
    "our TrainJob deleted by someone else"; actor None = unknown)."""
    who = actor if actor is not None else "someone other than dispatch (actor unknown)"
    cause = Cause(
        kind=CauseKind.CANCELLED,
        provenance=Provenance.ACTOR,
        actor=actor,
        note=f"TrainJob {ref} no longer exists: deleted by {who}",
        at=now,
    )
    return ObjectReport(ref=ref, token=token, state=State.CANCELLED, cause=cause)
