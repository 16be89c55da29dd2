"""project(): combine a folded Job with what the backend shows now into a Status (pure).

The job's state is computed here and only here (S10), and it is terminal only once the
record holds the outcome (S7). Between an object's end and the commit the job keeps the
state it had before that end was seen; what the plan will decide (the same pure `decide`)
goes into ``Status.forecast``, never into ``state``. A scheduler that was not asked or
could not be reached changes nothing: the state is then the one the record implies, and
``Status.scheduler_seen`` is False (S3, S16). Without a record (S12) a Status is
object-only: pending or running, never terminal.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from dispatch.core.deferred import Deferred
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    Execution,
    Forecast,
    Level,
    ObjectReport,
    State,
    Status,
)
from dispatch.core.policy import Plan, rule_name
from dispatch.core.record import Job, Submission, advance

# Ends that only an object that ran can have: an exit status, a kill for memory or time,
# a preemption, a node lost under it, a requeue of what ran.
_RAN_KINDS = frozenset({CauseKind.NONE, CauseKind.NON_ZERO_EXIT, CauseKind.OUT_OF_MEMORY,
                        CauseKind.TIME_LIMIT, CauseKind.PREEMPTED, CauseKind.NODE_LOST,
                        CauseKind.REQUEUED})

# States in which the latest end's application error is the job's story (not once it runs
# again, or succeeded after a recovery: then it is history's).
_ERROR_SHOWN = frozenset({State.FAILED, State.HELD, State.RECOVERING, State.CANCELLED,
                          State.UNKNOWN})


def plan_of(job: Job) -> Plan:
    return Plan(policy=job.spec.policy, declarations=job.declarations)


def project(job: Job, discovery: Discovery | None, now: datetime) -> Status:
    """The Status a caller reads. ``discovery`` None means the scheduler was not asked (or
    could not be reached): the state then comes from the record alone, as ``_state`` says,
    with ``scheduler_seen`` False; never a guess, and never an outcome."""
    state, cause, seen = _state(job, discovery)
    forecast: Forecast | None = None
    if discovery is not None and job.outcome is None:
        # Imported here: a finished job, or one whose scheduler was not asked, never
        # needs the plan (the CLI's status of a finished job loads none of it).
        from dispatch.core.decide import decide, to_events

        decisions = decide(job, discovery, plan_of(job), now)
        if decisions:
            ahead = advance(job, to_events(decisions, job, now))
            f_state, f_cause, _ = _state(ahead, discovery)
            if (f_state, f_cause) != (state, cause):
                forecast = Forecast(state=f_state, cause=f_cause)
    return Status(
        job=job.id, name=job.name, state=state, cause=cause, level=Level.FULL,
        history=job.history, escalations=job.escalations,
        supersedes=job.supersedes, superseded_by=job.superseded_by,
        submissions=len(job.submissions),
        budget_used={rule_name(job.spec.policy.rules, i): n
                     for i, n in enumerate(job.budget_used)},
        objects=job.refs,
        settled=job.outcome is not None, forecast=forecast, scheduler_seen=seen,
        backend=job.spec.backend,
        segments=tuple(f"{d.unit_job_id}.{d.task_id}: {d.reason}" for d in job.segments),
        created_at=job.created_at, scope=job.scope,
        ended_at=job.outcome.at if job.outcome is not None else None,
        error=job.error if state in _ERROR_SHOWN else None,
    )


def _object_of(job: Job, cur: Submission, discovery: Discovery) -> ObjectReport | None:
    """The current submission's object in this look: by its bound ref, or (not bound yet)
    the one object carrying its token that is not a duplicate (what decide will bind)."""
    if cur.ref is not None:
        return discovery.get(cur.ref)
    for o in discovery.of_job(job.id):
        if o.token == cur.token and o.cause.kind is not CauseKind.DUPLICATE:
            return o
    return None


def _ran(end: Cause | None, executions: Sequence[Execution]) -> bool:
    """Whether an ended object ran: an execution that started, or an end only a running
    process has."""
    return any(e.started_at is not None for e in executions) or (
        end is not None and end.kind in _RAN_KINDS)


def record_state(job: Job) -> State:
    """The state the record alone gives (``project`` with the scheduler not asked): what a
    list's counts per state and its ``?state=`` filter read, without a whole Status."""
    return _state(job, None)[0]


def _state(job: Job, discovery: Discovery | None) -> tuple[State, Cause | None, bool]:
    """(state, cause, scheduler_seen) from the record and the scheduler's current word.

    - A committed outcome is the state, for ever (S7); a hold in the record is held.
    - No live object in the record (none submitted yet, or the current one ended and the
      plan's verdict is recorded): waiting, i.e. pending, or recovering once the job was
      taken back (S8). An end recorded whose verdict is not (a crash between two appends)
      is not committed either: running if it ran, as below.
    - The scheduler shows the current object alive: its word (running, held, waiting...).
    - The scheduler was not asked, could not be reached, or left the object out of a
      look (``scheduler_seen`` False): the state the record implies. A bound object whose
      end the record does not hold was accepted by the scheduler and was never seen to
      end: the job is live there, so running (a job whose object the scheduler has and
      has not ended), or recovering once taken back (S8) or while our own gate holds it
      (S11). Never pending for a bound live object (the scheduler accepted it; silence is
      not "not started"), never unknown (unknown is a thing the scheduler said; an
      unreachable scheduler is an error, not a state, S3), never terminal.
    - The scheduler shows it ended, but the record does not have that end yet: the end
      is not committed, so the job keeps the state it had as if that end were not seen:
      running when the object shows it ran (an execution that started, or an end only an
      object that ran has: success, an exit code, out-of-memory, time-limit, preempted,
      node-lost, requeued), else the record-implied state above: an end without a
      started execution may be a cancel while queued, or a backend that no longer shows
      the start (pods gone), and a missing word is not evidence, so it is not read as
      "it never ran". The end itself, and what the plan decides on it, is
      ``Status.forecast``.
    """
    if job.outcome is not None:
        return job.outcome.state, job.outcome.cause, discovery is not None
    if job.hold is not None:
        return State.HELD, job.hold.cause, discovery is not None
    cur = job.current
    taken_back = job.recovered or (cur is not None and cur.number > 1)
    waiting = State.RECOVERING if taken_back else State.PENDING  # S8
    why = cur.cause if cur is not None and taken_back else None
    if cur is None:
        return waiting, why, discovery is not None
    if cur.ended:
        if job.awaiting is not None and _ran(cur.end_cause, ()):
            return State.RUNNING, None, discovery is not None  # its verdict is not committed
        return waiting, why, discovery is not None
    obj = _object_of(job, cur, discovery) if discovery is not None else None
    if obj is None and cur.ref is None:
        # Intended, not seen bound: the submit may not have reached the scheduler.
        return waiting, why, discovery is not None and discovery.complete
    if obj is None or obj.ended:
        # Not seen, or its end not committed yet: what the record implies, as if that end
        # were not seen (the end itself is the forecast's).
        seen = obj is not None
        if obj is not None and _ran(obj.cause, obj.executions):
            return State.RUNNING, None, seen
        if taken_back or (cur.gated and not cur.gate_opened):
            return waiting, why, seen
        return State.RUNNING, None, seen
    if obj.state is State.RUNNING:
        if obj.cause.kind is CauseKind.NODE_LOST:
            return State.RUNNING, obj.cause, True  # S11: inside the node-loss window
        return State.RUNNING, None, True
    if obj.state is State.HELD:
        if obj.gated or (cur.gated and not cur.gate_opened):
            # Held by our own gate (S11), not a hold a person resolves: still waiting to
            # start, so recovering (S8).
            return waiting, why, True
        return State.HELD, obj.cause, True
    if obj.state is State.UNKNOWN:
        return State.UNKNOWN, obj.cause, True
    if obj.state is State.RECOVERING:
        taken_back = True
    shown = obj.cause if obj.cause.kind is not CauseKind.NONE else (
        cur.cause if taken_back else None)
    return (State.RECOVERING if taken_back else State.PENDING), shown, True


def plain(status: Status) -> Status:
    """``status`` with its history and escalations as tuples: a Status read through a
    snapshot carries them Deferred (decoded when first used, core/deferred.py). The Python
    API hands out plain ones, which any encoder writes and a caller may keep as it likes."""
    if isinstance(status.history, Deferred) or isinstance(status.escalations, Deferred):
        return msgspec.structs.replace(status, history=tuple(status.history),
                                       escalations=tuple(status.escalations))
    return status


def project_objects(job_id: str, name: str, objects: Sequence[ObjectReport]) -> Status:
    """S12: no record store. Pending or running from whether any object is alive (running
    on the scheduler); never terminal, because an object ending is not the job ending."""
    running = any(o.state is State.RUNNING for o in objects)
    return Status(job=job_id, name=name, state=State.RUNNING if running else State.PENDING,
                  cause=None, level=Level.OBJECT_ONLY,
                  objects=tuple(o.ref for o in objects))
