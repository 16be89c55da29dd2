"""decide(): what the supervisor should do now (pure; `now` passed in).

Input: the folded Job, what the backend shows (a Discovery, or None when it was not asked),
and the Plan. Output: decisions, each of which becomes events (appended first) and, for
some, an action on the backend (carried out after the append). Every sentence of S6, S9,
S11, S14 and S15 is decided here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec

from dispatch.core.app_error import AppError, one_line
from dispatch.core.attribution import attribute_end, excluded_nodes
from dispatch.core.decisions import (
    SUPERVISOR,
    Bind,
    CancelObject,
    Commit,
    Decision,
    Escalate,
    OpenGate,
    PlaceHold,
    PublishSegment,
    RecordEnd,
    RecordError,
    RetrySubmit,
    StartRecovery,
    Stop,
    StopDuplicate,
    Submit,
    to_events,
)
from dispatch.core.held_runs import held_end, renumbered
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    ObjectReport,
    Provenance,
    State,
    parse_token,
    token_for,
)
from dispatch.core.policy import Action, Enforcer, Plan
from dispatch.core.record import Job, Submission
from dispatch.core.segment_decisions import allocation_unit, segment_decisions
from dispatch.core.waits import (
    ATTEMPT_LEASE,
    RESEND_AFTER,
    WATCH_UNRESOLVED,
    Gone,
    Takeover,
    Waits,
    watch_until,
)


def _ended_executions(obj: ObjectReport) -> list[tuple[int, Cause, bool, AppError | None]]:
    """(index, cause, final, the application's error) for every ended execution of an
    object, oldest first. The object's own cause closes its last execution when the backend
    left that one open."""
    out: list[tuple[int, Cause, bool, AppError | None]] = []
    n = len(obj.executions)
    for ex in obj.executions:
        if ex.cause is not None:
            out.append((ex.index, ex.cause, obj.ended and ex is obj.executions[-1], ex.error))
    if obj.ended:
        if n == 0:
            out.append((0, obj.cause, True, None))
        elif obj.executions[-1].cause is None:
            last = obj.executions[-1]
            out.append((last.index, obj.cause, True, last.error))
    return out


def _running_index(obj: ObjectReport) -> int:
    if obj.executions and not obj.executions[-1].ended:
        return obj.executions[-1].index
    return len(obj.executions)


def verdict(job: Job, plan: Plan, cause: Cause, next_number: int, old_alive: bool,
            now: datetime, used: Sequence[int] | None = None) -> list[Decision]:
    """S6: what the plan says when the job's latest execution ended with ``cause``.
    ``used``: the budget spent so far, including what this tick already spent (defaults
    to the record's)."""
    budget_used = job.budget_used if used is None else used
    kind = cause.kind
    if kind is CauseKind.NONE:
        return [Commit(state=State.SUCCEEDED, cause=cause)]
    if kind is CauseKind.CANCELLED:
        # S14: a cancel that reached the scheduler is final, whatever the record knew.
        return [Commit(state=State.CANCELLED, cause=cause)]
    if kind is CauseKind.DUPLICATE:
        # S15: never the job's execution, never spends a budget: run the job again.
        return [Submit(submission=next_number, token=token_for(job.id, next_number),
                       gated=old_alive, cause=cause)]
    found = plan.policy.rule_for(kind)
    if found is None:
        return _fail(cause, f"no rule covers {kind.value}")
    index, rule = found
    if rule.action is Action.ESCALATE:
        return _fail(cause, f"rule {rule.name} escalates {kind.value}")
    unenforced = plan.unenforced_reason(rule)
    if unenforced is not None:
        return _fail(cause, f"rule {rule.name} on {kind.value}: {unenforced}")
    if rule.enforced_by is Enforcer.BACKEND:
        return _fail(cause, f"the {plan.declarations.backend} backend ended the object although "
                            f"rule {rule.name} asks it to {rule.action.value} on {kind.value}"
                            f" (budget used {budget_used[index]}/{rule.budget})")
    if rule.action is Action.HOLD:
        return [PlaceHold(cause=cause)]
    budget = rule.budget or 0
    spent = budget_used[index]
    if spent >= budget:
        return _fail(cause, f"rule {rule.name}: budget spent ({spent}/{budget}) on {kind.value}")
    return [
        StartRecovery(rule=index, action=rule.action, cause=cause),
        Submit(submission=next_number, token=token_for(job.id, next_number), gated=old_alive,
               cause=cause),
    ]


def _fail(cause: Cause, why: str) -> list[Decision]:
    return [Commit(state=State.FAILED, cause=cause), Escalate(message=why, cause=cause)]


def decide(job: Job, discovery: Discovery | None, plan: Plan, now: datetime,
           *, attempt_lease: timedelta = ATTEMPT_LEASE,
           resend_after: timedelta = RESEND_AFTER,
           takeover: Takeover | None = None, gone: Gone | None = None) -> list[Decision]:
    """Everything the supervisor should do for ``job`` now. Empty when nothing is to be done.

    With ``discovery`` None (the scheduler was not asked or could not be reached) only
    decisions that need no scheduler information are made (R3). A new submission asks the
    scheduler to avoid the nodes of the job's published segment-health exclusions.
    ``takeover``: when the acting supervisor took the scope over (None: not under a lease).
    ``gone``: the submit attempts' holders known gone, and the backend's submit bound.
    """
    out = _decide(job, discovery, plan, now,
                  Waits(attempt_lease, resend_after, takeover, gone))
    avoid = excluded_nodes(job.segments)
    out = [msgspec.structs.replace(d, exclude_nodes=avoid)
           if avoid and isinstance(d, Submit) else d for d in out]
    return _with_error(job, out)


def _with_error(job: Job, out: list[Decision]) -> list[Decision]:
    """An escalation of an end carries the application's error of that end: recorded in
    this batch, else the one the record holds for the latest end. The message quotes it,
    labelled as the application's; the cause is untouched."""
    if not any(isinstance(d, Escalate) for d in out):
        return out
    recorded = [d.error for d in out if isinstance(d, RecordError)]
    error = recorded[-1] if recorded else job.error
    if error is None:
        return out
    said = one_line(error)
    return [msgspec.structs.replace(d, error=error, message=f"{d.message}; application error: "
                                    f"{said}" if said else d.message)
            if isinstance(d, Escalate) and d.error is None else d for d in out]


@dataclass
class _Seen:
    """This tick's look at one job's objects, indexed once: the objects carrying its tokens,
    every object by ref (its bound refs included), and the submissions bound this tick."""

    objs: Sequence[ObjectReport]
    by_ref: dict[str, ObjectReport]
    bound: dict[int, str] = field(default_factory=dict)

    def ref_of(self, s: Submission) -> str | None:
        return s.ref or self.bound.get(s.number)

    def obj_of(self, s: Submission) -> ObjectReport | None:
        """Its object, its executions numbered as the record numbers them."""
        r = self.ref_of(s)
        o = self.by_ref.get(r) if r else None
        return renumbered(o, s.held_ends) if o is not None else None


@dataclass
class _Ends:
    """What recording the ended executions found: the cause awaiting a verdict, the budget
    spent including native recoveries this tick, and the objects fenced off (S11)."""

    awaiting: Cause | None
    used: list[int]
    fenced: dict[str, Cause] = field(default_factory=dict)


def _decide(job: Job, discovery: Discovery | None, plan: Plan, now: datetime,
            waits: Waits) -> list[Decision]:
    seen = _look(job, discovery)
    out = _bind_and_duplicates(job, seen, now, waits)
    if job.outcome is not None:
        return out + _leftovers(job, seen, now, waits)
    ends = _Ends(awaiting=job.awaiting, used=list(job.budget_used))
    out += _record_ends(job, plan, seen, ends, now, waits)
    out += segment_decisions(job, seen.objs, ends.fenced, seen.bound)
    if job.cancel_requested is not None:
        return out + _cancel(job, discovery, seen, ends, now, waits)
    if job.give_up_requested is not None:
        return out + _give_up(job, ends)
    if job.hold is not None:
        return out  # waits for a person: resubmit, cancel or give up
    any_alive = any(_maybe_alive(s, seen) for s in job.submissions)
    next_number = len(job.submissions) + 1
    if job.resubmit_requested is not None:
        return out + [Submit(submission=next_number, token=token_for(job.id, next_number),
                             gated=any_alive, cause=job.resubmit_requested)]
    cur = job.current
    if cur is None:
        return out + [Submit(submission=1, token=token_for(job.id, 1), gated=False,
                             cause=None)]
    if ends.awaiting is not None:
        return out + verdict(job, plan, ends.awaiting, next_number,
                             any_alive or bool(ends.fenced), now, used=ends.used)
    if discovery is None:
        return out
    return out + _current_submission(job, cur, discovery, seen, now, waits)


def _look(job: Job, discovery: Discovery | None) -> _Seen:
    objs: Sequence[ObjectReport] = discovery.of_job(job.id) if discovery is not None else ()
    by_ref: dict[str, ObjectReport] = {}
    for o in objs:
        by_ref.setdefault(o.ref, o)
    if discovery is not None:
        for s in job.submissions:
            if s.ref is not None and s.ref not in by_ref:
                found = discovery.get(s.ref)
                if found is not None:
                    by_ref[found.ref] = found
    return _Seen(objs=objs, by_ref=by_ref)


def _bind_and_duplicates(job: Job, seen: _Seen, now: datetime, waits: Waits
                         ) -> list[Decision]:
    """Bind a submission whose object is found; stop objects the supervisor did not mean to
    have (S15), again while one still runs as a submission's stop is (a supervisor may
    have died between recording the stop and sending it: issue 45 item 16). A finished job
    binds nothing: an object that a submit attempt never resolved before the outcome publishes
    late is one the job will never run, so a duplicate."""
    out: list[Decision] = []
    for o in seen.objs:
        parsed = parse_token(o.token or "")
        number = parsed[1] if parsed else 0
        sub = job.submission(number)
        if sub is not None and sub.ref is None and number not in seen.bound \
                and o.cause.kind is not CauseKind.DUPLICATE and job.outcome is None:
            seen.bound[number] = o.ref
            out.append(Bind(submission=number, ref=o.ref))
            continue
        mine = sub is not None and seen.ref_of(sub) == o.ref
        if not mine and o.alive and waits.resend(job.duplicate_stopped_at(o.ref), now):
            if sub is not None and sub.ref is None and job.outcome is not None:
                detail = (f"object {o.ref} carries token {o.token}, whose submit was never "
                          f"resolved before the job was {job.outcome.state.value}")
            else:
                detail = (f"object {o.ref} carries token {o.token}, already bound to "
                          f"{sub.ref if sub else 'no submission'}")
            out.append(StopDuplicate(ref=o.ref, token=o.token or "", cause=Cause(
                kind=CauseKind.DUPLICATE, provenance=Provenance.ACTOR, actor=SUPERVISOR,
                detail=detail, at=now)))
    return out


def _leftovers(job: Job, seen: _Seen, now: datetime, waits: Waits) -> list[Decision]:
    """After the commit: stop what still runs of a job that will never run again."""
    assert job.outcome is not None
    if job.outcome.state is State.SUCCEEDED:
        return []
    out: list[Decision] = []
    for s in job.submissions:
        r = seen.ref_of(s)
        left = seen.obj_of(s)
        if left is not None and left.alive and r is not None \
                and waits.resend(s.stop_at, now):
            out.append(Stop(submission=s.number, ref=r, cause=job.outcome.cause))
    return out


def _record_ends(job: Job, plan: Plan, seen: _Seen, ends: _Ends, now: datetime,
                 waits: Waits) -> list[Decision]:
    """Record every ended execution the record does not know yet; fence objects reported
    running past the node-loss window (S11); resend stops not yet carried out."""
    out: list[Decision] = []
    last = len(job.submissions)
    for s in job.submissions:
        r = seen.ref_of(s)
        o = seen.obj_of(s)
        if o is None or r is None:
            continue
        recorded = set(s.executions_recorded)
        closed = s.ended
        for index, cause, final, error in _ended_executions(o):
            if index in recorded:
                continue
            cause = _own_stop(s, cause, plan.declarations.marks_stops)
            # An end that follows a published exclusion of its unit is that decision's.
            cause = attribute_end(job.segments, ref=r, reported=cause, now=now,
                                  array=job.spec.slurm.get("array") is not None)
            out.append(RecordEnd(submission=s.number, ref=r, execution=index, cause=cause,
                                 final=final and not s.ended))
            if error is not None and not job.has_error(s.number, index):
                # The application's words, beside the end and never in its cause.
                out.append(RecordError(submission=s.number, execution=index, error=error))
            recorded.add(index)
            if final and not s.ended:
                closed = True
                if s.number == last:
                    ends.awaiting = cause
            if not final:
                out.extend(_native_recovery(job, plan, s, r, cause, ends.used, now))
        if o.ended and not closed:
            # The object ended after its last execution was recorded as run again (a requeue
            # we then stopped): no new execution carries the end, so record it on its own.
            cause = _own_stop(s, o.cause, plan.declarations.marks_stops)
            index = max(recorded, default=-1) + 1
            out.append(RecordEnd(submission=s.number, ref=r, execution=index, cause=cause,
                                 final=True))
            recorded.add(index)
            if s.number == last:
                ends.awaiting = cause
        held = held_end(s, o, now) if s.number == last else None
        if held is not None:  # someone's hold ended its running time (not a recovery)
            out.append(held)
        if (s.number == last and not s.ended and o.state is State.RUNNING
                and o.cause.kind is CauseKind.NODE_LOST and o.lost_since is not None
                and now - o.lost_since >= plan.declarations.node_loss_window):
            out += _fence(s, r, o, plan, recorded, ends, now)
        elif s.stop_cause is not None and o.alive and waits.resend(s.stop_at, now):
            out.append(Stop(submission=s.number, ref=r, cause=s.stop_cause))
    return out


def _fence(s: Submission, r: str, o: ObjectReport, plan: Plan, recorded: set[int],
           ends: _Ends, now: datetime) -> list[Decision]:
    """S11: past the node-loss window the execution is over: stop the object and record its
    end as node-lost (a replacement may start, gated until the object ends)."""
    window = plan.declarations.node_loss_window.total_seconds()
    cause = Cause(kind=CauseKind.NODE_LOST, provenance=o.cause.provenance,
                  detail=o.cause.detail, at=now,
                  note=f"fenced: still reported running {window:g}s after the node was lost")
    ends.fenced[r] = cause
    out: list[Decision] = []
    if s.stop_cause is None:
        out.append(Stop(submission=s.number, ref=r, cause=cause))
    index = _running_index(o)
    if index not in recorded:
        out.append(RecordEnd(submission=s.number, ref=r, execution=index, cause=cause,
                             final=True))
        ends.awaiting = cause
    return out


def _maybe_alive(s: Submission, seen: _Seen) -> bool:
    if seen.ref_of(s) is None:
        return False
    found = seen.obj_of(s)
    if found is not None:
        return found.alive
    # Not in this look (not asked, or an incomplete look): an object not known to have
    # ended may still run (a fenced or stopped one), so a replacement goes in gated
    # (S11, R3).
    return not s.ended or s.stop_cause is not None


def _cancel(job: Job, discovery: Discovery | None, seen: _Seen, ends: _Ends, now: datetime,
            waits: Waits) -> list[Decision]:
    """A person's cancel (S14 is the scheduler's side of it): cancel what runs, commit once
    the scheduler shows nothing of the job alive."""
    if discovery is None:
        return []
    if not discovery.complete and any(
            seen.ref_of(s) is not None and not s.ended and seen.ref_of(s) not in seen.by_ref
            for s in job.submissions):
        return []  # not seen ended: wait for a complete look
    alive = [(s, o.ref) for s in job.submissions
             if (o := seen.obj_of(s)) is not None and o.alive]
    if alive:
        return [CancelObject(ref=r) for s, r in alive
                if waits.resend(s.cancel_sent_at, now)]
    cur = job.current
    if cur is not None and seen.ref_of(cur) is None and not cur.ended \
            and not waits.claim_expired(cur, now):
        return []  # a submit may be in flight; cancel it once it is visible
    if ends.awaiting is not None and ends.awaiting.kind is CauseKind.NONE:
        # The scheduler says the job completed: the cancel came too late to stop it.
        # Success is what happened (and what the forecast showed); never cancelled.
        return [Commit(state=State.SUCCEEDED, cause=ends.awaiting)]
    assert job.cancel_requested is not None
    return [Commit(state=State.CANCELLED, cause=job.cancel_requested)]


def _give_up(job: Job, ends: _Ends) -> list[Decision]:
    assert job.give_up_requested is not None
    if ends.awaiting is not None and ends.awaiting.kind is CauseKind.NONE:
        return [Commit(state=State.SUCCEEDED, cause=ends.awaiting)]
    cause = job.hold.cause if job.hold is not None else job.give_up_requested
    return [Commit(state=State.FAILED, cause=cause),
            Escalate(message=f"given up by {job.give_up_requested.actor or 'a person'}",
                     cause=cause)]


def _current_submission(job: Job, cur: Submission, discovery: Discovery, seen: _Seen,
                        now: datetime, waits: Waits) -> list[Decision]:
    """The current submission: retry a submit whose claim expired, or open its gate once
    every older object has ended."""
    r = seen.ref_of(cur)
    if r is None and not cur.ended:
        if waits.claim_expired(cur, now) and discovery.complete:
            return [RetrySubmit(submission=cur.number, token=cur.token, gated=cur.gated)]
        return []
    if r is not None and cur.gated and not cur.gate_opened:
        older_alive = any(seen.ref_of(s) is not None
                          and ((o := seen.obj_of(s)) is None or o.alive)
                          for s in job.submissions[:-1])
        if not older_alive:
            return [OpenGate(submission=cur.number, ref=r)]
    return []


def _own_stop(s: Submission, cause: Cause, marked: bool) -> Cause:
    """The cause an ended execution is recorded with: the reason of our own stop when the
    scheduler's cancel is that stop's effect, else the scheduler's cause as it is.

    A cancel that reached the scheduler is final whoever sent it (S14), even while our own
    stop of that object is pending. It is our stop's effect only when the backend cannot say
    who cancelled (no actor), or names the supervisor: "dispatch" (the local backend's word
    for its own stop; Slurm's and Kubeflow's for a cancel that carries dispatch's stop mark,
    ``marked``: the backend marks its stops at the scheduler, Declarations.marks_stops).
    Without marks, the actor recorded with the stop (``StopRequested.by``: the supervisor's
    uid, as Slurm prints "CANCELLED by <uid>") also counts as ours; with them a uid never
    does, so a person's scancel from the supervisor's own uid stays theirs. Any other actor
    is a person's cancel: it is kept, and the job is committed cancelled, never recovered."""
    if s.stop_cause is None or cause.kind is not CauseKind.CANCELLED:
        return cause
    ours = (SUPERVISOR,) if marked else (SUPERVISOR, s.stop_by)
    if cause.actor is None or cause.actor in ours:
        return s.stop_cause
    return cause


def _native_recovery(job: Job, plan: Plan, s: Submission, ref: str, cause: Cause,
                     used: list[int], now: datetime) -> list[Decision]:
    """An execution ended and the scheduler runs the object again by itself (Slurm requeue).
    The record learns the cause and spends the covering rule's budget; past the budget, or
    with no rule that allows it, the object is stopped and the plan decides (S6)."""
    found = plan.policy.rule_for(cause.kind)
    if found is not None:
        index, rule = found
        if rule.action in (Action.REQUEUE, Action.RESUBMIT, Action.RESTART) \
                and plan.unenforced_reason(rule) is None and used[index] < (rule.budget or 0):
            used[index] += 1
            return [StartRecovery(rule=index, action=rule.action, cause=cause, native=True)]
    stop = Cause(kind=cause.kind, provenance=cause.provenance, actor=cause.actor,
                 detail=cause.detail, exit_code=cause.exit_code, at=now,
                 note="the scheduler ran the object again, which no rule with budget left "
                      "allows: stopped")
    return [Stop(submission=s.number, ref=ref, cause=stop)]


__all__ = [
    "ATTEMPT_LEASE",
    "RESEND_AFTER",
    "SUPERVISOR",
    "WATCH_UNRESOLVED",
    "Gone",
    "Takeover",
    "watch_until",
    "allocation_unit",
    "decide",
    "verdict",
    "Bind",
    "CancelObject",
    "Commit",
    "Decision",
    "Escalate",
    "OpenGate",
    "PlaceHold",
    "PublishSegment",
    "RecordEnd",
    "RecordError",
    "RetrySubmit",
    "StartRecovery",
    "Stop",
    "StopDuplicate",
    "Submit",
    "to_events",
]
