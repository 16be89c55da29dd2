"""What one pod says about how it ended or why it waits: container states, disruption
conditions and the kubelet's own words, each mapped to a cause only on the words Kubernetes
really writes (else unknown with the words). Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from dispatch.backends.kubeflow.objects import (
    COMPLETION_INDEX_LABEL,
    CONTROLLER_UID_LABEL,
    JOB_INDEX_LABEL,
    JOB_RESTART_ATTEMPT_LABEL,
    REPLICATED_JOB_LABEL,
    RESTART_ATTEMPT_LABEL,
    as_int,
    as_list,
    as_map,
    as_str,
    condition,
    labels,
    name_of,
    namespace_of,
    parse_time,
    true_condition,
    words,
)
from dispatch.core.model import Cause, CauseKind, Provenance, State

DISRUPTION_KINDS: dict[str, CauseKind] = {
    "PreemptionByScheduler": CauseKind.PREEMPTED,
    "EvictionByEvictionAPI": CauseKind.PREEMPTED,
    "DeletionByTaintManager": CauseKind.NODE_LOST,
    "DeletionByPodGC": CauseKind.NODE_LOST,
    # A device (a GPU) on the node tainted NoExecute: the hardware under the pod is lost
    # (Kubernetes pkg/controller/devicetainteviction).
    "DeletionByDeviceTaintManager": CauseKind.NODE_LOST,
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
# The kubelet's waiting reasons that mean the container cannot be started (Kubernetes
# pkg/kubelet/images/types.go, kuberuntime/kuberuntime_container.go, container/sync_result.go).
# CrashLoopBackOff is not here: it follows a start that happened (``crash_loop``), and is a
# launch failure only when the last termination was one (StartError, ContainerCannotRun).
WAITING_LAUNCH_FAILED = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "ImageInspectError",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
    }
)
# A pod's status.reason that the kubelet writes when it ends the pod itself: eviction,
# preemption for a critical pod, a graceful node shutdown ("Terminated", nodeshutdown_manager.go).
KUBELET_POD_REASONS = frozenset({"Evicted", "Preempting", "Terminated"})
TERMINATED_LAUNCH_FAILED = frozenset({"StartError", "ContainerCannotRun"})
ALIVE_POD_PHASES = frozenset({"Pending", "Running"})

# Evidence ranks: infrastructure explains an exit, so it outranks it; among exits the first wins.
RANK_DISRUPTION = 0
RANK_OOM = 1
RANK_DEADLINE = 2
RANK_LAUNCH = 3
RANK_EXIT = 4


def _container_statuses(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    status = as_map(pod.get("status"))
    return [
        as_map(c)
        for key in ("initContainerStatuses", "containerStatuses")
        for c in as_list(status.get(key))
    ]


def pod_ref(pod: Mapping[str, Any]) -> str:
    return f"pod {namespace_of(pod)}/{name_of(pod)}"


# Set on a pod by the informer (``carry_deletion``) and kept in its evidence: when its
# deletion was first asked. The pod's own metadata stops saying it once the kubelet has ended
# the containers: its last delete (grace 0) moves ``deletionTimestamp`` to that moment, after
# the containers' end (seen on the real nodes, issue 46).
DELETION_ASKED = "dispatchDeletionAsked"


def utc_stamp(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def deletion_asked(pod: Any) -> datetime | None:
    """When the pod's deletion was asked, if it is being deleted: the API server sets
    ``deletionTimestamp`` to the request's time plus the grace it gives the pod
    (``deletionGracePeriodSeconds``); without the grace, the timestamp itself; the earlier
    ask an earlier version of the pod showed (``DELETION_ASKED``) when known."""
    p = as_map(pod)
    md = as_map(p.get("metadata"))
    at = parse_time(md.get("deletionTimestamp"))
    if at is not None:
        grace = as_int(md.get("deletionGracePeriodSeconds"))
        at = at - timedelta(seconds=grace) if grace is not None and grace > 0 else at
    first = parse_time(p.get(DELETION_ASKED))
    known = [t for t in (at, first) if t is not None]
    return min(known) if known else None


def carry_deletion(old: Any, new: dict[str, Any]) -> dict[str, Any]:
    """``new``, the next version of a pod, with when its deletion was first asked as ``old``
    (the version before it) showed it, when that is earlier than what ``new`` says. Pure."""
    asked = deletion_asked(old)
    if asked is None:
        return new
    said = deletion_asked(new)
    if said is not None and said <= asked:
        return new
    return {**new, DELETION_ASKED: utc_stamp(asked)}


# The exit codes of the kubelet's own kill: SIGTERM (a handler's conventional 128 + 15) and
# SIGKILL at the grace's end.
KILL_CODES = frozenset({143, 137})


def ended_by_deletion(pod: Any, term: Mapping[str, Any]) -> bool:
    """Whether a container's current bad end came from its pod's deletion (the kubelet's
    SIGTERM, then SIGKILL at the grace's end): it finished after the deletion was asked, or in
    the same second with the kill's exit code or torchrun's words that it got SIGTERM
    (Kubernetes' times are whole seconds: a crash in that second may be what the deletion
    answered, the Job controller's), not OOMKilled (the memory cgroup's own verdict stands).
    A person's ``kubectl delete pod``, or the Job controller's delete of a crash-looping pod
    whose last restart was still running when the Job reached its backoffLimit: never the
    application's own end. A container's last state ended before its current run began, so
    never by this deletion (``terminations``)."""
    asked = deletion_asked(pod)
    finished = parse_time(term.get("finishedAt"))
    if asked is None or finished is None or as_str(term.get("reason")) == "OOMKilled":
        return False
    return finished > asked or (finished == asked and (
        as_int(term.get("exitCode")) in KILL_CODES or said_sigterm(term)))


# torchrun's agent, stopped by a signal, exits 1 with this line (its launcher's own words,
# in the termination message under FallbackToLogsOnError): never the application's failure.
_LAUNCHER_SIGTERM = re.compile(r"SignalException: Process \d+ got signal: 15\b")


def said_sigterm(term: Mapping[str, Any]) -> bool:
    """Whether a container's termination message says its launcher was stopped by SIGTERM:
    in the second of its pod's deletion, that end is the deletion's (torchrun exits 1)."""
    return bool(_LAUNCHER_SIGTERM.search(as_str(term.get("message")) or ""))


def terminations(pod: Any, cs: Mapping[str, Any]) -> list[tuple[Mapping[str, Any], bool]]:
    """The terminations of one container that say how it ended, each with whether the pod's
    deletion ended it: its state's, else its last state's; both when the state's end came
    from the pod's deletion (the earlier failure of a restarted container is why the Job
    controller deleted it)."""
    now = as_map(as_map(cs.get("state")).get("terminated"))
    last = as_map(as_map(cs.get("lastState")).get("terminated"))
    if not now:
        return [(last, False)] if last else []
    if not ended_by_deletion(pod, now):
        return [(now, False)]
    return [(now, True), *([(last, False)] if last else [])]


DELETED_NOTE = ("its pod was deleted before the container ended (a person or a controller: "
                "the API server does not say who); the kill was the deletion's, not the "
                "application's own end")


def _terminated_signal(
    pod: Mapping[str, Any], cs: Mapping[str, Any], term: Mapping[str, Any],
    deleted: bool = False,
) -> tuple[int, datetime | None, Cause] | None:
    reason = as_str(term.get("reason")) or ""
    code = as_int(term.get("exitCode"))
    at = parse_time(term.get("finishedAt"))
    node = pod_node(pod)
    where = f" (node {node})" if node else ""  # the kubelet that said it: the node it ran on
    said = (f"{pod_ref(pod)}{where} container {cs.get('name')}: terminated reason={reason} "
            f"exitCode={code}")
    if term.get("message"):
        said += f" message={term.get('message')}"
    if reason == "OOMKilled":
        return (
            RANK_OOM,
            at,
            Cause(kind=CauseKind.OUT_OF_MEMORY, detail=said, exit_code=code, at=at),
        )
    if reason in TERMINATED_LAUNCH_FAILED:
        return (
            RANK_LAUNCH,
            at,
            Cause(kind=CauseKind.LAUNCH_FAILED, detail=said, exit_code=code, at=at),
        )
    if code is None or code == 0:
        return None
    if deleted:
        md = as_map(pod.get("metadata"))
        said += (f"; deletionTimestamp={md.get('deletionTimestamp')}"
                 f" deletionGracePeriodSeconds={md.get('deletionGracePeriodSeconds')}")
        asked = deletion_asked(pod)
        note = DELETED_NOTE if asked is None else (
            f"{DELETED_NOTE} (its deletion was asked at {utc_stamp(asked)})")
        return RANK_EXIT, at, Cause(kind=CauseKind.UNKNOWN, detail=said, exit_code=code, at=at,
                                    note=note)
    if code == 137:
        # SIGKILL without OOMKilled: a kill from anywhere; never guessed as the app's own exit.
        return RANK_EXIT, at, Cause(kind=CauseKind.UNKNOWN, detail=said, exit_code=code, at=at)
    return (
        RANK_EXIT,
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
    p = as_map(pod)
    found: list[tuple[int, datetime | None, Cause]] = []
    disruption = true_condition(p, "DisruptionTarget")
    if disruption is not None:
        reason = as_str(disruption.get("reason")) or ""
        message = as_str(disruption.get("message")) or ""
        at = parse_time(disruption.get("lastTransitionTime"))
        found.append(
            (
                RANK_DISRUPTION,
                at,
                Cause(
                    kind=_disruption_kind(reason, message),
                    detail=f"{pod_ref(p)}: {words('pod', disruption)}",
                    at=at,
                ),
            )
        )
    status = as_map(p.get("status"))
    if as_str(status.get("reason")) in KUBELET_POD_REASONS:
        message = as_str(status.get("message")) or ""
        found.append(
            (
                RANK_DISRUPTION,
                None,
                Cause(
                    kind=kubelet_kind(message),
                    detail=f"{pod_ref(p)}: reason={status.get('reason')} message={message!r}",
                ),
            )
        )
    for cs in _container_statuses(p):
        for term, deleted in terminations(p, cs):
            sig = _terminated_signal(p, cs, term, deleted)
            if sig is not None:
                found.append(sig)
    return found


def pending_signal(pod: Any) -> tuple[State, Cause] | None:
    """Why a pod that has not started is waiting: image / config errors, capacity, a gate."""
    p = as_map(pod)
    for cs in _container_statuses(p):
        waiting = as_map(as_map(cs.get("state")).get("waiting"))
        reason = as_str(waiting.get("reason"))
        if reason in WAITING_LAUNCH_FAILED:
            said = f"{pod_ref(p)} container {cs.get('name')}: waiting reason={reason}"
            if waiting.get("message"):
                said += f" message={waiting.get('message')!r}"
            return State.PENDING, Cause(kind=CauseKind.LAUNCH_FAILED, detail=said)
    scheduled = condition(p, "PodScheduled")
    if scheduled is not None and scheduled.get("status") == "False":
        reason = scheduled.get("reason")
        at = parse_time(scheduled.get("lastTransitionTime"))
        said = f"{pod_ref(p)}: {words('pod', scheduled)}"
        if reason == "Unschedulable":
            return State.PENDING, Cause(kind=CauseKind.NO_CAPACITY, detail=said, at=at)
        if reason == "SchedulingGated":
            return State.HELD, Cause(kind=CauseKind.HELD, detail=said, at=at)
        if reason == "SchedulerError":
            # The scheduler's own internal error (e.g. a nodeAffinity it cannot parse): not
            # capacity, not surely the job's fault. Pending, the words kept, never guessed.
            return State.PENDING, Cause(kind=CauseKind.UNKNOWN, detail=said, at=at)
    return None


def _between_restarts(p: Mapping[str, Any], cs: Mapping[str, Any]) -> Mapping[str, Any]:
    """The termination of a container the kubelet will restart in place after its back-off:
    ended badly, in a pod that is still Running (not being deleted) under a restartPolicy
    that restarts (OnFailure, Always); empty otherwise. A real kubelet shows this for most of
    the back-off, CrashLoopBackOff only for a moment before the next start (issue 46)."""
    term = as_map(as_map(cs.get("state")).get("terminated"))
    if (not term or not ended_badly(term) or as_str(as_map(p.get("status")).get("phase"))
            != "Running" or as_map(p.get("metadata")).get("deletionTimestamp")
            or as_str(as_map(p.get("spec")).get("restartPolicy")) == "Never"):
        return {}
    return term


def crash_loop(pod: Any) -> tuple[State, Cause] | None:
    """A container Kubernetes restarts in place (a runtime's ``restartPolicy: OnFailure``;
    JobSet's webhook defaults it). Between two runs (terminated in a Running pod, waiting
    for its back-off, ``_between_restarts``; or waiting again: CrashLoopBackOff or any other
    wait, after a restart): recovering, the cause read from its last termination (exit code,
    reason, message), restartCount in the detail; running again after a restart: running, the
    restarts in dispatch's note. None when no container of the pod is in a crash loop."""
    p = as_map(pod)
    for cs in _container_statuses(p):
        count = as_int(cs.get("restartCount")) or 0
        state = as_map(cs.get("state"))
        note = (
            f"restarted in place by Kubernetes {count} time(s) (restartPolicy OnFailure),"
            " not by a dispatch rule"
        )
        ended = _between_restarts(p, cs)
        if ended:
            sig = _terminated_signal(p, cs, ended)
            if sig is not None:
                _, _, last = sig
                said = f"{pod_ref(p)} container {cs.get('name')}: restartCount={count}"
                return State.RECOVERING, Cause(
                    kind=last.kind, provenance=last.provenance,
                    detail=f"{said}; {last.detail}", exit_code=last.exit_code,
                    note=f"{note}; the kubelet restarts it after its back-off", at=last.at)
        term = as_map(as_map(cs.get("lastState")).get("terminated"))
        if count <= 0 or not term:
            continue
        sig = _terminated_signal(p, cs, term)
        waiting = as_map(state.get("waiting"))
        if not waiting:
            if state.get("running") is not None:
                return State.RUNNING, Cause(kind=CauseKind.NONE, note=note)
            continue
        said = (
            f"{pod_ref(p)} container {cs.get('name')}: waiting reason={waiting.get('reason')}"
            f" restartCount={count}"
        )
        if waiting.get("message"):
            said += f" message={waiting.get('message')!r}"
        if sig is None:
            code = as_int(term.get("exitCode"))
            cause = Cause(kind=CauseKind.UNKNOWN, detail=said, exit_code=code, note=note)
        else:
            _, _, last = sig
            cause = Cause(
                kind=last.kind,
                provenance=last.provenance,
                detail=f"{said}; last {last.detail}",
                exit_code=last.exit_code,
                note=note,
                at=last.at,
            )
        return State.RECOVERING, cause
    return None


def pod_alive(pod: Any) -> bool:
    return as_str(as_map(as_map(pod).get("status")).get("phase")) in ALIVE_POD_PHASES


def pod_node(pod: Any) -> str | None:
    return as_str(as_map(as_map(pod).get("spec")).get("nodeName"))


def nodes_of(pods: Sequence[Any]) -> tuple[str, ...]:
    return tuple(sorted({n for p in pods if (n := pod_node(p)) is not None}))


def restart_attempt(obj: Any) -> int | None:
    text = as_str(labels(obj).get(RESTART_ATTEMPT_LABEL))
    return int(text) if text is not None and text.isdigit() else None


def job_restart_attempt(obj: Any) -> int | None:
    """JobSet's per-Job restart attempt (RestartJob), from the label or the annotation."""
    for where in (labels(obj), as_map(as_map(as_map(obj).get("metadata")).get("annotations"))):
        text = as_str(where.get(JOB_RESTART_ATTEMPT_LABEL))
        if text is not None and text.isdigit():
            return int(text)
    return None


def job_slot(obj: Any) -> tuple[str, str]:
    """Which Job of the JobSet an object belongs to: (replicated job, job index)."""
    lab = labels(obj)
    return as_str(lab.get(REPLICATED_JOB_LABEL)) or "", as_str(lab.get(JOB_INDEX_LABEL)) or ""


# Set on kept evidence (evidence_of): what a pod said before it was deleted, not a pod the API
# server still has (the S11 fence counts only those: report_pods_left).
GONE = "dispatchGone"


def is_evidence(pod: Any) -> bool:
    """Whether ``pod`` is kept evidence of a pod that is gone, not a pod that is there."""
    return as_map(pod).get(GONE) is True


def replaced_pods(pods: list[Any], jobs: Sequence[Any]) -> list[tuple[Any, Any]]:
    """(old, new) for each pod the Job controller replaced after a failure, with a pod that
    has started: the same Job (its uid) and completion index, ``new`` the newest pod there (by
    creation time), ``old`` the others (a pod evicted, or one that failed under restartPolicy
    Never, the Job's backoffLimit not reached), at most as many as the Job counts failed
    (``status.failed``: a pod deleted because someone suspended the Job is not a failure, and
    its replacement no restart). A restart Kubernetes made, not dispatch. Pure."""
    failed = {as_str(as_map(as_map(j).get("metadata")).get("uid")):
              as_int(as_map(as_map(j).get("status")).get("failed")) or 0 for j in jobs}
    slots: dict[tuple[str, str], list[Any]] = {}
    for pod in pods:
        lab = labels(pod)
        uid, index = as_str(lab.get(CONTROLLER_UID_LABEL)), as_str(lab.get(COMPLETION_INDEX_LABEL))
        if uid is not None and index is not None:
            slots.setdefault((uid, index), []).append(pod)
    out: list[tuple[Any, Any]] = []
    for (uid, _), mine in sorted(slots.items()):
        if len(mine) < 2:
            continue
        # the newest pod there; when the Job controller has deleted them all (its backoffLimit
        # reached), the newest of their kept evidence, by when it started
        there = [p for p in mine if not is_evidence(p)] or mine
        new = max(there, key=lambda p: (
            as_str(as_map(as_map(p).get("metadata")).get("creationTimestamp")) or "",
            as_str(as_map(as_map(p).get("status")).get("startTime")) or "", name_of(p)))
        if not as_map(as_map(new).get("status")).get("startTime"):
            continue  # not a restart until the replacement runs
        olds = [o for o in mine if o is not new]
        olds.sort(key=lambda o: (as_str(as_map(as_map(o).get("status")).get("startTime")) or "",
                                 name_of(o)))
        allowed = failed.get(uid, 0) - sum(1 for o, _ in out if _controller(o) == uid)
        out += [(old, new) for old in olds[:max(allowed, 0)]]
    return out


def _controller(pod: Any) -> str | None:
    return as_str(labels(pod).get(CONTROLLER_UID_LABEL))


# -- the failure and the fence -----------------------------------------------------------------


def ended_badly(term: Mapping[str, Any]) -> bool:
    """Whether a termination is a failure: a non-zero exit, or the memory cgroup's kill."""
    code = as_int(term.get("exitCode"))
    return code not in (None, 0) or as_str(term.get("reason")) == "OOMKilled"
