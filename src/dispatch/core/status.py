"""project(): combine a folded Job with what the backend shows now into a Status (pure).

The job's state is computed here and only here (S10). With the record, a job whose
execution ended but whose verdict the supervisor has not yet committed is shown as the plan
will decide it (the same pure `decide`), with ``settled`` False until it is committed.
Without a record (S12) a Status is object-only: pending or running, never terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from dispatch.core.decide import decide, to_events
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    Level,
    ObjectReport,
    State,
    Status,
)
from dispatch.core.policy import Plan
from dispatch.core.record import Job, advance


def plan_of(job: Job) -> Plan:
    return Plan(policy=job.spec.policy, declarations=job.declarations)


def project(job: Job, discovery: Discovery | None, now: datetime) -> Status:
    """The Status a caller reads. ``discovery`` None means the scheduler was not asked:
    the state then comes from the record alone."""
    settled_job = job
    if discovery is not None and job.outcome is None:
        decisions = decide(job, discovery, plan_of(job), now)
        if decisions:
            job = advance(job, to_events(decisions, job, now))
    state, cause = _state(job, discovery, now)
    return Status(
        job=job.id, name=job.name, state=state, cause=cause, level=Level.FULL,
        history=settled_job.history, escalations=settled_job.escalations,
        supersedes=job.supersedes, superseded_by=job.superseded_by,
        submissions=len(settled_job.submissions),
        budget_used={f"rules[{i}]": n for i, n in enumerate(settled_job.budget_used)},
        objects=tuple(s.ref for s in settled_job.submissions if s.ref is not None),
        settled=settled_job.outcome is not None, backend=job.spec.backend,
        segments=tuple(f"{d.unit_job_id}.{d.task_id}: {d.reason}" for d in settled_job.segments),
        created_at=job.created_at, scope=job.scope,
    )


def _state(job: Job, discovery: Discovery | None, now: datetime) -> tuple[State, Cause | None]:
    if job.outcome is not None:
        return job.outcome.state, job.outcome.cause
    if job.hold is not None:
        return State.HELD, job.hold.cause
    cur = job.current
    taken_back = job.recovered or (cur is not None and cur.number > 1)
    waiting = State.RECOVERING if taken_back else State.PENDING  # S8
    if cur is None:
        return waiting, None
    obj: ObjectReport | None = None
    if discovery is not None and cur.ref is not None:
        obj = discovery.get(cur.ref)
    if obj is None or cur.ended:
        return waiting, cur.cause if taken_back else None
    if obj.state is State.RUNNING:
        if obj.cause.kind is CauseKind.NODE_LOST:
            return State.RUNNING, obj.cause  # S11: inside the node-loss window
        return State.RUNNING, None
    if obj.state is State.HELD:
        if obj.gated or (cur.gated and not cur.gate_opened):
            # Held by our own gate (S11), not a hold a person resolves: still waiting to
            # start, so recovering (S8).
            return waiting, cur.cause if taken_back else None
        return State.HELD, obj.cause
    if obj.state is State.UNKNOWN:
        return State.UNKNOWN, obj.cause
    if obj.state in (State.PENDING, State.RECOVERING):
        if obj.state is State.RECOVERING:
            taken_back = True
        shown = obj.cause if obj.cause.kind is not CauseKind.NONE else (
            cur.cause if taken_back else None)
        return (State.RECOVERING if taken_back else State.PENDING), shown
    return waiting, cur.cause if taken_back else None


def project_objects(job_id: str, name: str, objects: Sequence[ObjectReport]) -> Status:
    """S12: no record store. Pending or running from whether any object is alive (running
    on the scheduler); never terminal, because an object ending is not the job ending."""
    running = any(o.state is State.RUNNING for o in objects)
    return Status(job=job_id, name=name, state=State.RUNNING if running else State.PENDING,
                  cause=None, level=Level.OBJECT_ONLY,
                  objects=tuple(o.ref for o in objects))
