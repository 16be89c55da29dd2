"""Kubernetes words -> what dispatch says of one TrainJob: pure functions, ``now`` passed in.

The inputs are the objects exactly as the API server returns them (plain JSON dicts): the
TrainJob, the JobSet Trainer made for it, that JobSet's batch/v1 Jobs and Pods, and the Nodes.
The output is one ``ObjectReport``. Rows come from the Kubernetes part of docs/scheduler-signals.md.

Nothing here trusts the shape of its input: a field of the wrong type reads as missing, and a
word we cannot map becomes ``CauseKind.UNKNOWN`` with the words kept verbatim in the detail.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from dispatch.backends.kubeflow.container_times import container_start, containers_ended
from dispatch.backends.kubeflow.events import creation_failure
from dispatch.backends.kubeflow.fence import node_lost
from dispatch.backends.kubeflow.objects import (
    GATE_ANNOTATION,
    TOKEN_LABEL,
    as_int,
    as_list,
    as_map,
    as_str,
    condition,
    join_words,
    labels,
    lost_nodes,
    meta,
    name_of,
    namespace_of,
    parse_time,
    true_condition,
    words,
)
from dispatch.backends.kubeflow.pod_errors import first_pod_error
from dispatch.backends.kubeflow.pods import (
    RANK_DEADLINE,
    crash_loop,
    job_restart_attempt,
    job_slot,
    nodes_of,
    pending_signal,
    pod_alive,
    pod_end_signals,
    pod_node,
    pod_ref,
    replaced_pods,
    restart_attempt,
)
from dispatch.core.model import (
    APPLICATION_ENDS,
    Cause,
    CauseKind,
    Execution,
    ObjectReport,
    Provenance,
    State,
)

# A reason of the TrainJob's Failed condition: its runtimeRef names no runtime Trainer runs.
RUNTIME_NOT_SUPPORTED = "TrainingRuntimeNotSupported"


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
    """Why an execution failed, from the child Jobs and their pods (docs/scheduler-signals.md).

    ``ended`` are the (what, condition) pairs that said it failed (TrainJob / JobSet Failed);
    their words always lead the detail. With no evidence the cause is unknown, words kept.
    """
    said = join_words(*(words(what, cond) for what, cond in ended))
    at = next((parse_time(c.get("lastTransitionTime")) for _, c in ended), None)
    for _, cond in ended:
        # DeadlineExceeded and TrainingRuntimeNotSupported are reasons of Failed, never
        # condition types (Trainer v2.3.0 trainjob_types.go, the Job controller).
        if cond.get("reason") == "DeadlineExceeded":
            return Cause(kind=CauseKind.TIME_LIMIT, detail=said, at=at)
        if cond.get("reason") == RUNTIME_NOT_SUPPORTED:
            return Cause(kind=CauseKind.LAUNCH_FAILED, detail=said, at=at)
    signals: list[tuple[int, datetime | None, Cause]] = []
    for job in jobs:
        for ctype in ("Failed", "FailureTarget"):
            jcond = true_condition(job, ctype)
            if jcond is not None and jcond.get("reason") == "DeadlineExceeded":
                jat = parse_time(jcond.get("lastTransitionTime"))
                signals.append(
                    (
                        RANK_DEADLINE,
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
        return Cause(kind=CauseKind.UNKNOWN, detail=join_words(said, *job_words), at=at)
    return Cause(
        kind=found.kind,
        provenance=found.provenance,
        detail=join_words(said, found.detail),
        note=found.note,
        exit_code=found.exit_code,
        at=found.at or at,
    )


# -- the report --------------------------------------------------------------------------------


def _restarts(jobset: Any) -> int:
    value = as_int(as_map(as_map(jobset).get("status")).get("restarts"))
    return value if value is not None and value > 0 else 0


def job_restarts(objs: Sequence[Any]) -> dict[tuple[str, str], int]:
    """Per Job of the JobSet (replicated job, index): the newest job-restart-attempt seen on
    its Jobs and pods (JobSet's RestartJob actions), when above 0."""
    latest: dict[tuple[str, str], int] = {}
    for obj in objs:
        attempt = job_restart_attempt(obj)
        if attempt is not None and attempt > 0:
            slot = job_slot(obj)
            latest[slot] = max(latest.get(slot, 0), attempt)
    return latest


def current_objects(jobset: Any, objs: Sequence[Any]) -> list[Any]:
    """The objects of the JobSet's current attempt (no label: current, no JobSet yet) that a
    RestartJob has not superseded."""
    restarts = _restarts(jobset)
    mine = [o for o in objs if restart_attempt(o) in (None, restarts)]
    latest = job_restarts(mine)
    return [
        o for o in mine if (job_restart_attempt(o) or 0) >= latest.get(job_slot(o), 0)
    ]


def _under(found: Cause, header: str, note: str) -> Cause:
    """``found``, told as the end of one native restart: the restart's words first."""
    return Cause(kind=found.kind, provenance=found.provenance,
                 detail=join_words(header, found.detail), note=note,
                 exit_code=found.exit_code, at=found.at)


def _job_restart_cause(slot: tuple[str, str], attempt: int, objs: Sequence[Any]) -> Cause:
    """Why attempt ``attempt`` of one Job ended before JobSet's RestartJob recreated it."""
    mine = [o for o in objs if job_slot(o) == slot and (job_restart_attempt(o) or 0) == attempt]
    header = f"job {slot[0]}-{slot[1]}: job-restart-attempt={attempt + 1}"
    note = f"JobSet RestartJob {attempt + 1} of job {slot[0]}-{slot[1]}"
    found = first_cause(s for p in mine for s in pod_end_signals(p))
    if found is None:
        return Cause(kind=CauseKind.REQUEUED, detail=header, note=note)
    return _under(found, header, note)


def _replaced_run(index: int, old: Any, new: Any, kept_on: Sequence[Any]) -> Execution:
    """The run a pod the Job controller replaced belonged to (it, and the pods that were not
    replaced), ended by its own signals (a disruption, an exit): a restart Kubernetes made."""
    header = f"{pod_ref(old)} replaced by {pod_ref(new)} (the Job controller)"
    note = (f"pod {name_of(old)} replaced by {name_of(new)} on {pod_node(new) or 'a node'}: "
            "a restart Kubernetes made (the Job's backoffLimit), not a dispatch rule")
    found = first_cause(pod_end_signals(old))
    cause = _at_real_end(Cause(kind=CauseKind.UNKNOWN, detail=header, note=note)
                         if found is None else _under(found, header, note), [old, *kept_on])
    return Execution(index=index, started_at=_started([old, *kept_on]), ended_at=cause.at,
                     cause=cause, nodes=_ran_on([old, *kept_on]))


def _at_real_end(cause: Cause, pods: Sequence[Any]) -> Cause:
    """``cause`` dated when its run really ended: when the last container stopped, if that
    is later than the signal's own time (a deadline or a disruption is stamped when decided;
    the processes run on through their grace). Goodput counts that time as running, and the
    work past the last checkpoint as lost (G3)."""
    end = containers_ended(pods)
    if end is None or (cause.at is not None and end <= cause.at):
        return cause
    return msgspec.structs.replace(cause, at=end)


def _started(pods: Sequence[Any]) -> datetime | None:
    """An execution starts when a container of it runs (``container_start``), not when a pod
    is bound or admitted: a job whose pods cannot pull their image never started."""
    known = [t for p in pods if (t := container_start(p)) is not None]
    return min(known) if known else None


def _since_suspend(trainjob: Any, pods: Sequence[Any]) -> list[Any]:
    """The pods made at or after the TrainJob's last Suspended transition (all of them when
    it never had one, or for a pod whose creation time is not known)."""
    cond = condition(trainjob, "Suspended")
    since = parse_time(cond.get("lastTransitionTime")) if cond is not None else None
    if since is None:
        return list(pods)
    if cond is not None and cond.get("status") == "True":
        return []  # suspended: nothing of it runs
    return [p for p in pods if (made := parse_time(meta(p).get("creationTimestamp"))) is None
            or made >= since]


def _ran_on(pods: Sequence[Any]) -> tuple[str, ...]:
    """The nodes an ended execution ran on: those where a container of its pods ran. A pod
    bound after the end never started (Trainer re-applies the JobSet after DeadlineExceeded:
    a new pod is made and bound as the old ones terminate); it is no node of the run."""
    return nodes_of([p for p in pods if container_start(p) is not None])


def _held_back(cause: Cause, waiting: Any, pods: Sequence[Any]) -> Cause:
    """A waiting pod's cause, with dispatch's note when its peers are already placed: JobSet
    makes and binds pods one by one, not as a gang, so those hold their nodes meanwhile."""
    placed = [p for p in pods if pod_alive(p) and pod_node(p)]
    if all(p is waiting for p in placed):
        return cause
    # the waiting pod counts when it is bound (an image it cannot pull): placed, not running
    said = f"{len(placed)} of {len(pods)} pods placed, holding {', '.join(nodes_of(placed))}"
    if len(placed) < len(pods):
        said += " while the rest wait: JobSet does not schedule a job's pods as a gang"
    return msgspec.structs.replace(cause, note=f"{cause.note}; {said}" if cause.note else said)


def _restart_cause(attempt: int, jobs: Sequence[Any], pods: Sequence[Any], jobset: Any) -> Cause:
    """Why JobSet attempt ``attempt`` ended: its pods' evidence if still visible, else requeued
    with the JobSet's own words."""
    mine = [p for p in pods if restart_attempt(p) == attempt]
    my_jobs = [j for j in jobs if restart_attempt(j) == attempt]
    header = f"jobset {name_of(jobset)}: status.restarts={_restarts(jobset)}"
    note = f"restart {attempt + 1} of the JobSet"
    restarting = condition(jobset, "RestartingJobSet")
    if restarting is not None:
        header = join_words(header, words("jobset", restarting))
    signals = [s for p in mine for s in pod_end_signals(p)]
    found = first_cause(signals)
    if found is None and my_jobs:
        found = failure_cause((), my_jobs, ())
        if found.kind is CauseKind.UNKNOWN:
            found = None
    if found is None:
        return Cause(kind=CauseKind.REQUEUED, detail=header, note=note)
    return _under(found, header, note)


def report_trainjob(
    trainjob: Any,
    jobset: Any,
    jobs: Sequence[Any],
    pods: Sequence[Any],
    nodes: Iterable[Any],
    now: datetime,
    events: Sequence[Any] = (),
) -> ObjectReport:
    """One TrainJob and what hangs off it -> the ObjectReport (state, cause, executions).
    ``events``: Warning Events of its namespace (``events.creation_failure`` picks its own)."""
    tj = as_map(trainjob)
    js = as_map(jobset)
    ref = f"{namespace_of(tj)}/{name_of(tj)}"
    token = as_str(labels(tj).get(TOKEN_LABEL))
    global_restarts = _restarts(js)
    # The current attempt's objects; objects without the label belong to it (no JobSet yet).
    attempt_objs = [
        o for o in (*jobs, *pods) if restart_attempt(o) in (None, global_restarts)
    ]
    per_job = job_restarts(attempt_objs)
    cur_jobs = current_objects(js, jobs)
    cur_pods = current_objects(js, pods)
    past_causes = [_restart_cause(i, jobs, pods, js) for i in range(global_restarts)]
    past_causes += [
        _job_restart_cause(slot, a, attempt_objs)
        for slot, n in sorted(per_job.items())
        for a in range(n)
    ]
    # Pods the Job controller replaced (its backoffLimit): native restarts too. The old pod
    # stays in cur_pods for the fence (evicted from a lost node, it may still run there);
    # the current execution is the pods that replaced them, from when the last one started.
    replaced = replaced_pods(cur_pods, cur_jobs)
    gone_by = {id(old) for old, _ in replaced}
    run_pods = [p for p in cur_pods if id(p) not in gone_by]
    kept_on = [p for p in run_pods if all(p is not new for _, new in replaced)]
    past = (*(Execution(index=i, cause=c) for i, c in enumerate(past_causes)),
            *(_replaced_run(len(past_causes) + i, old, new, kept_on)
              for i, (old, new) in enumerate(replaced)))
    restarts = len(past)
    # after a replacement, from when the last replacement's container ran (None till then);
    # never from a pod made before the TrainJob's last suspend or resume: those ran before a
    # person's suspend ended that run (core/held_runs.py), and none runs while it holds
    fresh = _since_suspend(tj, run_pods)
    new_starts = [container_start(new) for _, new in replaced if any(new is p for p in fresh)]
    started = _started(fresh) if not replaced else (
        None if len(new_starts) < len(replaced) or None in new_starts
        else max(t for t in new_starts if t is not None))
    cur_nodes = nodes_of(cur_pods)
    spec = as_map(tj.get("spec"))
    # Our gate (S11) is a suspend we made, its annotation not yet "open"; a suspend a person
    # makes after the gate opened is a hold, theirs to resolve (docs/kubeflow.md).
    gated = spec.get("suspend") is True and as_str(
        as_map(meta(tj).get("annotations")).get(GATE_ANNOTATION)) != "open"

    def ended(state: State, cause: Cause) -> ObjectReport:
        ran_on = _ran_on(run_pods)
        cause = _at_real_end(cause, run_pods)
        last = Execution(
            index=restarts, started_at=started, ended_at=cause.at, cause=cause, nodes=ran_on,
            # the first failing container's own words (issue 23), beside the cause; only
            # for an end that is the application's (a deadline's SIGTERM is not its error)
            error=first_pod_error(run_pods)
            if state is State.FAILED and cause.kind in APPLICATION_ENDS else None,
        )
        return ObjectReport(
            ref=ref,
            token=token,
            state=state,
            cause=cause,
            executions=(*past, last),
            nodes=ran_on,
            gated=gated,
        )

    def live(state: State, cause: Cause, lost_since: datetime | None = None) -> ObjectReport:
        current = Execution(index=restarts, started_at=started, nodes=nodes_of(run_pods))
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
        if (cond := true_condition(obj, "Failed")) is not None
    ]
    if failed:
        cause = failure_cause(failed, cur_jobs, run_pods)
        # pods of the run still going: being deleted, or their JobSet gone or going (Trainer
        # deletes it at its deadline; the garbage collector deletes the pods next)
        torn_down = jobset is None or bool(meta(js).get("deletionTimestamp"))
        left = [p for p in cur_pods if pod_alive(p)
                and (torn_down or meta(p).get("deletionTimestamp"))]
        if left:
            # Trainer says Failed (its deadline) while pods of the run still go: the SIGTERM
            # and the grace (seen on the real nodes: a process deaf to SIGTERM ran 30 s on).
            # Not ended until they are (S11: a replacement's gate waits for them; the end is
            # read once they are gone or ended).
            names = ", ".join(sorted(name_of(p) + (" (Terminating)" if meta(p).get(
                "deletionTimestamp") else "") for p in left))
            return live(State.RUNNING, Cause(kind=CauseKind.NONE, at=cause.at, note=(
                f"the TrainJob failed ({cause.kind.value}); {len(left)} of its pods not yet "
                f"gone: {names}")))
        return ended(State.FAILED, cause)

    # Held: suspended (our gate, or someone's). A Suspended=True the spec no longer asks for
    # (spec.suspend false: our gate opened, or a person resumed) is a resume in progress,
    # read below as released, never as someone's hold.
    asked = spec.get("suspend") is True
    suspended = true_condition(tj, "Suspended") if asked else None
    if suspended is not None or gated:
        ours = as_str(as_map(meta(tj).get("annotations")).get(GATE_ANNOTATION)) == "closed"
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

    # Its objects cannot be made (M5): only an Event says so.
    cannot = creation_failure(tj, jobset, jobs, events)
    if cannot is not None:
        return live(State.PENDING, cannot)

    # The fence: alive, but a node under it is lost (or its pods are deleted for node loss).
    active = any(pod_alive(p) for p in cur_pods) or any(
        (as_int(as_map(s).get("active")) or 0) > 0
        for s in as_list(as_map(tj.get("status")).get("jobsStatus"))
    )
    if active:
        lost = node_lost(cur_pods, lost_nodes(nodes), now)
        if lost is not None:
            since, said = lost
            return live(
                State.RUNNING, Cause(kind=CauseKind.NODE_LOST, detail=said, at=since), since
            )

    # A pod that cannot start holds the whole gang back, even while its peers run.
    for pod in cur_pods:
        sig = pending_signal(pod)
        if sig is not None:
            return live(sig[0], _held_back(sig[1], pod, cur_pods))
    # Restarts in place (a runtime's restartPolicy OnFailure): a crash loop is a failure in
    # progress, recovering with its last termination; running again keeps dispatch's note.
    loops = [sig for p in cur_pods if (sig := crash_loop(p)) is not None]
    if loops:
        return live(*min(loops, key=lambda sc: sc[0] is not State.RECOVERING))
    running = any(as_map(as_map(p).get("status")).get("phase") == "Running" for p in cur_pods) or (
        not cur_pods
        and any(
            (as_int(as_map(s).get("ready")) or 0) > 0
            for s in as_list(as_map(tj.get("status")).get("jobsStatus"))
        )
    )
    if running:
        return live(State.RUNNING, Cause(kind=CauseKind.NONE))
    if restarts and past[-1].cause is not None:
        # Restarted and not running again yet: recovering, with why the last attempt ended.
        return live(State.RECOVERING, past[-1].cause)
    phases = [as_map(as_map(p).get("status")).get("phase") for p in cur_pods]
    # Pods a suspend ended (Trainer still counts the job suspended: a person's suspend being
    # resumed) are not the run's end: that is the resume in progress below (recorded).
    suspended_jobs = any((as_int(as_map(s).get("suspended")) or 0) > 0
                         for s in as_list(as_map(tj.get("status")).get("jobsStatus")))
    if phases and all(ph in ("Succeeded", "Failed") for ph in phases) and not suspended_jobs:
        # Its pods have ended and the controllers have not said the end yet (the Job, then
        # the JobSet, then the TrainJob: a second or two on the real stack): still running,
        # never pending, which would say it is waiting to start.
        return live(State.RUNNING, Cause(kind=CauseKind.NONE,
                                         note="its pods have ended; the end is not said yet"))
    resumed = condition(tj, "Suspended")
    if resumed is not None and (resumed.get("status") == "False" or not asked):
        at = parse_time(resumed.get("lastTransitionTime"))
        note = "" if resumed.get("status") == "False" else (
            "resume in progress: spec.suspend is false, the controller has not said it yet")
        return live(
            State.PENDING,
            Cause(kind=CauseKind.RELEASED, detail=words("trainjob", resumed), note=note, at=at),
        )
    return live(State.PENDING, Cause(kind=CauseKind.NONE))


def awaits_evidence(report: ObjectReport) -> bool:
    """A failed end that names no cause: its pods' evidence (an exit, an OOM, a disruption)
    may still be on its way on another watch (M11), so it is not committed at once. An
    unknown end read from a container's exit (a SIGKILL from anywhere, a kill by its pod's
    deletion) is that evidence: it does not wait."""
    return (report.state is State.FAILED and report.cause.kind is CauseKind.UNKNOWN
            and report.cause.exit_code is None)
