"""decide(): what the supervisor should do now (pure; `now` passed in).

Input: the folded Job, what the backend shows (a Discovery, or None when it was not asked),
and the Plan. Output: decisions, each of which becomes events (appended first) and, for
some, an action on the backend (carried out after the append). Every sentence of S6, S9,
S11, S14 and S15 is decided here and nowhere else.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

import msgspec

from dispatch.core import events as ev
from dispatch.core.attribution import attribute_end, excluded_nodes
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    ObjectReport,
    Provenance,
    State,
    UnitHealth,
    parse_token,
    token_for,
)
from dispatch.core.policy import Action, Enforcer, Plan
from dispatch.core.record import Job, Submission

# A submit call claimed by one supervisor is not retried by another for this long: it may
# still be in flight. A duplicate that slips through anyway is caught by S15.
ATTEMPT_LEASE = timedelta(seconds=30)
# A stop or cancel already sent is sent again after this long if the object still runs.
RESEND_AFTER = timedelta(seconds=30)

SUPERVISOR = "dispatch"


class _Decision(msgspec.Struct, frozen=True, kw_only=True):
    pass


class RecordEnd(_Decision, frozen=True):
    """An execution of a submission's object ended (or is fenced off): record it."""

    submission: int
    ref: str
    execution: int
    cause: Cause
    final: bool


class Bind(_Decision, frozen=True):
    """The object carrying the submission's token is found: remember its ref."""

    submission: int
    ref: str


class Submit(_Decision, frozen=True):
    """Intend a new submission, then submit it (gated while an older object still runs)."""

    submission: int
    token: str
    gated: bool
    cause: Cause | None
    exclude_nodes: tuple[str, ...] = ()  # the job's segment-health exclusions (Slurm --exclude)


class RetrySubmit(_Decision, frozen=True):
    """An intended submission has no object and its claim expired: claim it, submit again."""

    submission: int
    token: str
    gated: bool


class StartRecovery(_Decision, frozen=True):
    rule: int
    action: Action
    cause: Cause
    native: bool = False


class Stop(_Decision, frozen=True):
    """Stop an object on the supervisor's behalf (fence, spent native budget, after commit)."""

    submission: int
    ref: str
    cause: Cause


class CancelObject(_Decision, frozen=True):
    """A person asked to cancel: pass it to the scheduler."""

    ref: str


class OpenGate(_Decision, frozen=True):
    submission: int
    ref: str


class Commit(_Decision, frozen=True):
    state: State
    cause: Cause


class PlaceHold(_Decision, frozen=True):
    cause: Cause


class Escalate(_Decision, frozen=True):
    message: str
    cause: Cause | None


class StopDuplicate(_Decision, frozen=True):
    ref: str
    token: str
    cause: Cause


class PublishSegment(_Decision, frozen=True):
    """H1: mark an allocation unit unavailable for the next rendezvous."""

    unit_job_id: str
    task_id: str
    nodes: tuple[str, ...]
    reason: str
    cause: str  # short word for the artifact: node-unavailable | node-lost-fence


Decision = (
    RecordEnd | Bind | Submit | RetrySubmit | StartRecovery | Stop | CancelObject | OpenGate
    | Commit | PlaceHold | Escalate | StopDuplicate | PublishSegment
)


def allocation_unit(ref: str) -> tuple[str, str]:
    """Seed 002: an array task is (array job id, task id); a regular job is (id, id)."""
    job, sep, task = ref.partition("_")
    if sep and job.isdigit() and task.isdigit():
        return job, task
    return ref, ref


def _segment_decisions(job: Job, objs: Sequence[ObjectReport], fenced: dict[str, Cause],
                       bound: dict[int, str]) -> list[Decision]:
    """H1: a live object of a job that asked for segment health gets one publication per
    allocation unit (the job, or each array task) with an unavailable node, and for the units
    the node-loss fence fired for; once per unit."""
    if job.spec.segment_health is None:
        return []
    published = {(d.unit_job_id, d.task_id) for d in job.segments}
    mine = {s.ref or bound.get(s.number) for s in job.submissions}
    out: list[Decision] = []
    for o in objs:
        if o.ref not in mine or not o.alive:
            continue
        units = o.unhealthy_units
        if o.ref in fenced and not units:  # fenced on words that named no unit: the object
            units = (UnitHealth(unit=o.ref, nodes=o.nodes),)
        for health in units:
            unit = allocation_unit(health.unit)
            if unit in published:
                continue
            if o.ref in fenced:
                fence = fenced[o.ref]
                out.append(PublishSegment(unit_job_id=unit[0], task_id=unit[1],
                                          nodes=health.nodes, reason=fence.note
                                          + _words(fence.detail), cause="node-lost-fence"))
            else:
                out.append(PublishSegment(
                    unit_job_id=unit[0], task_id=unit[1], nodes=health.nodes,
                    cause="node-unavailable",
                    reason=f"node(s) {', '.join(health.nodes)} of {_unit_words(health.unit)} "
                           "unavailable" + _words(health.detail or o.cause.detail)))
            published.add(unit)
    return out


def _words(detail: str) -> str:
    return f": {detail}" if detail else ""


def _unit_words(unit: str) -> str:
    job_id, task_id = allocation_unit(unit)
    # An array task is named by its ref ("1_1"), never by equal ids: array job 1's task 1
    # has job id == task id too.
    return f"array job {job_id} task {task_id}" if "_" in unit else f"object {unit}"


def _ended_executions(obj: ObjectReport) -> list[tuple[int, Cause, bool]]:
    """(index, cause, final) for every ended execution of an object, oldest first. The
    object's own cause closes its last execution when the backend left that one open."""
    out: list[tuple[int, Cause, bool]] = []
    n = len(obj.executions)
    for ex in obj.executions:
        if ex.cause is not None:
            out.append((ex.index, ex.cause, obj.ended and ex is obj.executions[-1]))
    if obj.ended:
        if n == 0:
            out.append((0, obj.cause, True))
        elif obj.executions[-1].cause is None:
            out.append((obj.executions[-1].index, obj.cause, True))
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
        return _fail(cause, f"rules[{index}] escalates {kind.value}")
    unenforced = plan.unenforced_reason(rule)
    if unenforced is not None:
        return _fail(cause, f"rules[{index}] ({rule.action.value} on {kind.value}): {unenforced}")
    if rule.enforced_by is Enforcer.BACKEND:
        return _fail(cause, f"the {plan.declarations.backend} backend ended the object although "
                            f"rules[{index}] asks it to {rule.action.value} on {kind.value}"
                            f" (budget used {budget_used[index]}/{rule.budget})")
    if rule.action is Action.HOLD:
        return [PlaceHold(cause=cause)]
    budget = rule.budget or 0
    spent = budget_used[index]
    if spent >= budget:
        return _fail(cause, f"rules[{index}] budget spent ({spent}/{budget}) on {kind.value}")
    return [
        StartRecovery(rule=index, action=rule.action, cause=cause),
        Submit(submission=next_number, token=token_for(job.id, next_number), gated=old_alive,
               cause=cause),
    ]


def _fail(cause: Cause, why: str) -> list[Decision]:
    return [Commit(state=State.FAILED, cause=cause), Escalate(message=why, cause=cause)]


def decide(job: Job, discovery: Discovery | None, plan: Plan, now: datetime,
           *, attempt_lease: timedelta = ATTEMPT_LEASE,
           resend_after: timedelta = RESEND_AFTER) -> list[Decision]:
    """Everything the supervisor should do for ``job`` now. Empty when nothing is to be done.

    With ``discovery`` None (the scheduler was not asked or could not be reached) only
    decisions that need no scheduler information are made (R3). A new submission asks the
    scheduler to avoid the nodes of the job's published segment-health exclusions.
    """
    out = _decide(job, discovery, plan, now, attempt_lease, resend_after)
    avoid = excluded_nodes(job.segments)
    return [msgspec.structs.replace(d, exclude_nodes=avoid)
            if avoid and isinstance(d, Submit) else d for d in out]


def _decide(job: Job, discovery: Discovery | None, plan: Plan, now: datetime,
            attempt_lease: timedelta, resend_after: timedelta) -> list[Decision]:
    out: list[Decision] = []
    objs: Sequence[ObjectReport] = discovery.of_job(job.id) if discovery is not None else ()
    by_ref: dict[str, ObjectReport] = {}
    for o in objs:
        by_ref.setdefault(o.ref, o)
    if discovery is not None:
        for s in job.submissions:
            if s.ref is not None and s.ref not in by_ref:
                seen = discovery.get(s.ref)
                if seen is not None:
                    by_ref[seen.ref] = seen

    # S15: objects the supervisor did not mean to have; and binding a found submission.
    bound_now: dict[int, str] = {}
    for o in objs:
        parsed = parse_token(o.token or "")
        number = parsed[1] if parsed else 0
        sub = job.submission(number)
        if sub is not None and sub.ref is None and number not in bound_now \
                and o.cause.kind is not CauseKind.DUPLICATE:
            bound_now[number] = o.ref
            out.append(Bind(submission=number, ref=o.ref))
            continue
        mine = sub is not None and (sub.ref or bound_now.get(number)) == o.ref
        if not mine and o.alive and o.ref not in job.duplicates_stopped:
            out.append(StopDuplicate(ref=o.ref, token=o.token or "", cause=Cause(
                kind=CauseKind.DUPLICATE, provenance=Provenance.ACTOR, actor=SUPERVISOR,
                detail=f"object {o.ref} carries token {o.token}, already bound to "
                       f"{sub.ref if sub else 'no submission'}", at=now)))

    def ref_of(s: Submission) -> str | None:
        return s.ref or bound_now.get(s.number)

    if job.outcome is not None:
        # After the commit only leftovers are handled: stop what still runs of a job that
        # will never run again.
        if job.outcome.state is not State.SUCCEEDED:
            for s in job.submissions:
                r = ref_of(s)
                left = by_ref.get(r) if r else None
                if left is not None and left.alive and r is not None \
                        and _resend(s.stop_at, now, resend_after):
                    out.append(Stop(submission=s.number, ref=r, cause=job.outcome.cause))
        return out

    # Record every ended execution the record does not know yet; fence lost nodes (S11).
    awaiting = job.awaiting
    native_used = list(job.budget_used)
    fenced_alive = False
    fenced: dict[str, Cause] = {}
    for s in job.submissions:
        r = ref_of(s)
        found = by_ref.get(r) if r else None
        if found is None or r is None:
            continue
        o = found
        recorded = set(s.executions_recorded)
        closed = s.ended
        for index, cause, final in _ended_executions(o):
            if index in recorded:
                continue
            cause = _own_stop(s, cause)
            # An end that follows a published exclusion of its unit is that decision's.
            cause = attribute_end(job.segments, ref=r, reported=cause, now=now,
                                  array=job.spec.slurm.get("array") is not None)
            out.append(RecordEnd(submission=s.number, ref=r, execution=index, cause=cause,
                                 final=final and not s.ended))
            recorded.add(index)
            if final and not s.ended:
                closed = True
                if s.number == len(job.submissions):
                    awaiting = cause
            if not final:
                out.extend(_native_recovery(job, plan, s, r, cause, native_used, now))
        if o.ended and not closed:
            # The object ended after its last execution was recorded as run again (a requeue
            # we then stopped): no new execution carries the end, so record it on its own.
            cause = _own_stop(s, o.cause)
            index = max(recorded, default=-1) + 1
            out.append(RecordEnd(submission=s.number, ref=r, execution=index, cause=cause,
                                 final=True))
            recorded.add(index)
            if s.number == len(job.submissions):
                awaiting = cause
        if (s.number == len(job.submissions) and not s.ended and o.state is State.RUNNING
                and o.cause.kind is CauseKind.NODE_LOST and o.lost_since is not None
                and now - o.lost_since >= plan.declarations.node_loss_window):
            window = plan.declarations.node_loss_window.total_seconds()
            cause = Cause(kind=CauseKind.NODE_LOST, provenance=o.cause.provenance,
                          detail=o.cause.detail, at=now,
                          note=f"fenced: still reported running {window:g}s after the node "
                               "was lost")
            fenced[r] = cause
            if s.stop_cause is None:
                out.append(Stop(submission=s.number, ref=r, cause=cause))
            index = _running_index(o)
            if index not in recorded:
                out.append(RecordEnd(submission=s.number, ref=r, execution=index, cause=cause,
                                     final=True))
                awaiting = cause
            fenced_alive = True
        elif s.stop_cause is not None and o.alive and _resend(s.stop_at, now, resend_after):
            out.append(Stop(submission=s.number, ref=r, cause=s.stop_cause))

    out.extend(_segment_decisions(job, objs, fenced, bound_now))

    def maybe_alive(s: Submission) -> bool:
        r0 = ref_of(s)
        if r0 is None:
            return False
        seen = by_ref.get(r0)
        if seen is not None:
            return seen.alive
        # Not in this look (not asked, or an incomplete look): an object not known to have
        # ended may still run (a fenced or stopped one), so a replacement goes in gated
        # (S11, R3).
        return not s.ended or s.stop_cause is not None

    any_alive = any(maybe_alive(s) for s in job.submissions)
    cur = job.current
    next_number = len(job.submissions) + 1

    # A person's cancel (S14 is the scheduler's side of it).
    if job.cancel_requested is not None:
        alive_refs = []
        for s in job.submissions:
            r = ref_of(s)
            live = by_ref.get(r) if r else None
            if live is not None and live.alive and r is not None:
                alive_refs.append((s, r))
        if discovery is None:
            return out
        if not discovery.complete and any(
                ref_of(s) is not None and not s.ended and ref_of(s) not in by_ref
                for s in job.submissions):
            return out  # not seen ended: wait for a complete look
        if alive_refs:
            for s, r in alive_refs:
                if _resend(s.cancel_sent_at, now, resend_after):
                    out.append(CancelObject(ref=r))
            return out
        if cur is not None and ref_of(cur) is None and not cur.ended \
                and now - cur.attempted_at < attempt_lease:
            return out  # a submit may be in flight; cancel it once it is visible
        if awaiting is not None and awaiting.kind is CauseKind.NONE:
            # The scheduler says the job completed: the cancel came too late to stop it.
            # Success is what happened (and what the forecast showed); never cancelled.
            out.append(Commit(state=State.SUCCEEDED, cause=awaiting))
            return out
        out.append(Commit(state=State.CANCELLED, cause=job.cancel_requested))
        return out

    if job.give_up_requested is not None:
        if awaiting is not None and awaiting.kind is CauseKind.NONE:
            out.append(Commit(state=State.SUCCEEDED, cause=awaiting))
            return out
        cause = job.hold.cause if job.hold is not None else job.give_up_requested
        out.append(Commit(state=State.FAILED, cause=cause))
        out.append(Escalate(message=f"given up by {job.give_up_requested.actor or 'a person'}",
                            cause=cause))
        return out

    if job.hold is not None:
        return out  # waits for a person: resubmit, cancel or give up

    if job.resubmit_requested is not None:
        out.append(Submit(submission=next_number, token=token_for(job.id, next_number),
                          gated=any_alive, cause=job.resubmit_requested))
        return out

    if cur is None:
        out.append(Submit(submission=1, token=token_for(job.id, 1), gated=False, cause=None))
        return out

    if awaiting is not None:
        out.extend(verdict(job, plan, awaiting, next_number, any_alive or fenced_alive, now,
                           used=native_used))
        return out

    if discovery is None:
        return out

    # The current submission: bind, retry, or open its gate.
    r = ref_of(cur)
    if r is None and not cur.ended:
        if now - cur.attempted_at >= attempt_lease and discovery.complete:
            out.append(RetrySubmit(submission=cur.number, token=cur.token, gated=cur.gated))
        return out
    if r is not None and cur.gated and not cur.gate_opened:
        older_alive = False
        for s in job.submissions[:-1]:
            r0 = ref_of(s)
            if r0 is None:
                continue
            o0 = by_ref.get(r0)
            if o0 is None or o0.alive:
                older_alive = True
        if not older_alive:
            out.append(OpenGate(submission=cur.number, ref=r))
    return out


def _own_stop(s: Submission, cause: Cause) -> Cause:
    """The cause an ended execution is recorded with: the reason of our own stop when the
    scheduler's cancel is that stop's effect, else the scheduler's cause as it is.

    A cancel that reached the scheduler is final whoever sent it (S14), even while our own
    stop of that object is pending. It is our stop's effect only when the scheduler names no
    actor, or names the supervisor: "dispatch" (the local and Kubeflow backends' word for
    their own stop) or the actor recorded with the stop (``StopRequested.by``: the
    supervisor's uid, as Slurm prints "CANCELLED by <uid>"). Any other actor is a person's
    cancel: it is kept, and the job is committed cancelled, never recovered. A person using
    the supervisor's own uid cannot be told apart on Slurm and is taken for the stop."""
    if s.stop_cause is None or cause.kind is not CauseKind.CANCELLED:
        return cause
    if cause.actor is None or cause.actor in (SUPERVISOR, s.stop_by):
        return s.stop_cause
    return cause


def _resend(last: datetime | None, now: datetime, after: timedelta) -> bool:
    return last is None or now - last >= after


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


def to_events(decisions: Sequence[Decision], job: Job, now: datetime,
              supervisor: str = SUPERVISOR, stop_by: str | None = None) -> list[ev.Event]:
    """The events a batch of decisions appends before anything is done (intent first).
    Bind, OpenGate and CancelObject record their result after the action instead.
    ``stop_by``: the actor the scheduler will name for this supervisor's stops (its uid)."""
    out: list[ev.Event] = []
    seq = job.version
    for d in decisions:
        e: ev.Event | None = None
        nxt = seq + 1
        if isinstance(d, RecordEnd):
            e = ev.ExecutionEnded(seq=nxt, at=now, submission=d.submission, ref=d.ref,
                                  execution=d.execution, cause=d.cause, final=d.final)
        elif isinstance(d, Bind):
            e = ev.SubmissionBound(seq=nxt, at=now, submission=d.submission, ref=d.ref)
        elif isinstance(d, Submit):
            e = ev.SubmissionIntended(seq=nxt, at=now, submission=d.submission, token=d.token,
                                      gated=d.gated, cause=d.cause, exclude_nodes=d.exclude_nodes)
        elif isinstance(d, RetrySubmit):
            e = ev.SubmissionAttempted(seq=nxt, at=now, submission=d.submission,
                                       supervisor=supervisor)
        elif isinstance(d, StartRecovery):
            e = ev.RecoveryStarted(seq=nxt, at=now, rule=d.rule, action=d.action, cause=d.cause,
                                   native=d.native)
        elif isinstance(d, Stop):
            e = ev.StopRequested(seq=nxt, at=now, submission=d.submission, ref=d.ref,
                                 cause=d.cause, by=stop_by)
        elif isinstance(d, CancelObject):
            e = ev.CancelSent(seq=nxt, at=now, ref=d.ref)
        elif isinstance(d, Commit):
            e = ev.OutcomeCommitted(seq=nxt, at=now, state=d.state, cause=d.cause)
        elif isinstance(d, PlaceHold):
            e = ev.HoldPlaced(seq=nxt, at=now, cause=d.cause, recovery=True, actor=supervisor)
        elif isinstance(d, Escalate):
            e = ev.EscalationRaised(seq=nxt, at=now, message=d.message, cause=d.cause)
        elif isinstance(d, StopDuplicate):
            e = ev.DuplicateStopped(seq=nxt, at=now, ref=d.ref, token=d.token, cause=d.cause)
        elif isinstance(d, PublishSegment):
            e = ev.SegmentPublished(seq=nxt, at=now, unit_job_id=d.unit_job_id,
                                    task_id=d.task_id, reason=d.reason, actor=supervisor,
                                    nodes=d.nodes, source=d.cause)
        if e is not None:
            out.append(e)
            seq = nxt
    return out
