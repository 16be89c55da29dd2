"""Hypothesis properties of the functional core, driven tick by tick.

Two drivers feed a job's supervisor ticks (decide -> to_events -> advance):

- a *world*: a small simulated scheduler whose objects live and end plausibly (run, end with
  any cause, get requeued, lose a node, react to stops, cancels and gates — or not), seen
  through complete, incomplete or missing looks, with people cancelling, resubmitting and
  giving up at random;
- *chaos*: every look is made of arbitrary reports for the job's tokens.

After every tick the invariants of the seed are checked (see ``Invariants``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from tests.strategies_core import JOB, T0, Sim, causes, executions, later_event, renumber

from dispatch.core import events as ev
from dispatch.core.decide import (
    ATTEMPT_LEASE,
    Bind,
    CancelObject,
    Commit,
    Decision,
    Escalate,
    OpenGate,
    PlaceHold,
    RecordEnd,
    RetrySubmit,
    StartRecovery,
    Stop,
    StopDuplicate,
    Submit,
    decide,
    to_events,
)
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    Execution,
    ObjectReport,
    State,
    token_for,
)
from dispatch.core.next_due import next_due
from dispatch.core.policy import (
    BUDGETED_ACTIONS,
    ENDING_KINDS,
    SUPERVISOR_ACTIONS,
    Action,
    Declarations,
    Enforcer,
    Plan,
    RecoveryPolicy,
    Rule,
)
from dispatch.core.record import Job, RecordError, advance, fold
from dispatch.core.status import project

K = CauseKind


def examples(default: int) -> settings:
    """CORE_EXAMPLES=5000 for a deep run; the defaults keep the suite fast."""
    return settings(max_examples=int(os.environ.get("CORE_EXAMPLES", default)), deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --- policies and declarations --------------------------------------------------------------


@st.composite
def valid_policies(draw: st.DrawFn) -> RecoveryPolicy:
    """A policy that passes validate(): every ending kind in at most one rule, unknown only
    under hold/escalate, budgets where (and only where) they belong."""
    slots = draw(st.integers(1, 4))
    place = {k: draw(st.none() | st.integers(0, slots - 1)) for k in ENDING_KINDS}
    rules = []
    for i in range(slots):
        on = tuple(k for k in ENDING_KINDS if place[k] == i)
        if not on:
            continue
        allowed = [Action.HOLD, Action.ESCALATE] if K.UNKNOWN in on else [
            Action.RESUBMIT, Action.RESUBMIT, Action.HOLD, Action.ESCALATE, Action.RESTART,
            Action.REQUEUE]
        action = draw(st.sampled_from(allowed))
        budget = draw(st.integers(0, 3)) if action in BUDGETED_ACTIONS else None
        enforcers: list[Enforcer | None] = [None, Enforcer.SUPERVISOR]
        if action not in SUPERVISOR_ACTIONS:
            enforcers.append(Enforcer.BACKEND)
        rules.append(Rule(on=on, action=action, budget=budget,
                          enforcer=draw(st.sampled_from(enforcers))))
    return RecoveryPolicy(rules=tuple(rules)).validate()


def _r(on: list[CauseKind], action: Action, budget: int | None = None,
       enforcer: Enforcer | None = None) -> Rule:
    return Rule(on=tuple(on), action=action, budget=budget, enforcer=enforcer)


# Policies people write, so that recoveries, holds and native requeues happen often.
TYPICAL = [
    RecoveryPolicy(rules=(_r([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3),
                          _r([K.NON_ZERO_EXIT, K.OUT_OF_MEMORY], Action.RESUBMIT, 1),
                          _r([K.UNKNOWN], Action.HOLD))),
    RecoveryPolicy(rules=(_r([K.PREEMPTED, K.NODE_LOST, K.REQUEUED], Action.REQUEUE, 2),
                          _r([K.TIME_LIMIT, K.LAUNCH_FAILED], Action.RESUBMIT, 2),
                          _r([K.UNKNOWN, K.NON_ZERO_EXIT], Action.ESCALATE))),
    RecoveryPolicy(rules=(_r([K.NODE_LOST, K.PREEMPTED], Action.RESTART, 2),
                          _r([K.OUT_OF_MEMORY], Action.HOLD),
                          _r([K.LAUNCH_FAILED, K.NO_CAPACITY], Action.RESUBMIT, 1))),
    RecoveryPolicy(rules=(_r([K.NODE_LOST, K.PREEMPTED, K.TIME_LIMIT, K.NON_ZERO_EXIT,
                              K.OUT_OF_MEMORY, K.LAUNCH_FAILED, K.REQUEUED], Action.RESUBMIT,
                             2),
                          _r([K.UNKNOWN], Action.HOLD))),
]
policies = st.one_of(st.sampled_from(TYPICAL), st.sampled_from(TYPICAL),
                     st.sampled_from(TYPICAL), valid_policies())

declarations = st.builds(
    Declarations, backend=st.sampled_from(["local", "slurm", "kubeflow"]),
    native_actions=st.sampled_from([frozenset(), frozenset({Action.REQUEUE}),
                                    frozenset({Action.RESTART})]),
    node_loss_window=st.sampled_from([timedelta(0), timedelta(seconds=60),
                                      timedelta(seconds=300)]),
)
steps = st.sampled_from([0, 1, 10, 29, 30, 31, 61, 301, 3600])
ending_kinds = st.sampled_from([K.NONE, K.NONE, K.PREEMPTED, K.PREEMPTED, K.NODE_LOST,
                                K.NODE_LOST, K.OUT_OF_MEMORY,
                                K.TIME_LIMIT, K.NON_ZERO_EXIT, K.LAUNCH_FAILED, K.NO_CAPACITY,
                                K.REQUEUED, K.CANCELLED, K.UNKNOWN, K.HELD])
requeue_kinds = st.sampled_from([K.PREEMPTED, K.NODE_LOST, K.TIME_LIMIT, K.REQUEUED,
                                 K.NON_ZERO_EXIT, K.UNKNOWN])

# --- the invariants ------------------------------------------------------------------------


def budgets_ok(job: Job) -> None:
    for i, r in enumerate(job.spec.policy.rules):
        used = job.budget_used[i]
        if r.budget is None:
            assert used == 0, f"rules[{i}] ({r.action.value}) has no budget but spent {used}"
        else:
            assert used <= r.budget, f"rules[{i}] overspent: {used}/{r.budget}"


def older_alive_in(job: Job, discovery: Discovery | None, number: int) -> bool:
    """Whether the look shows an object bound to a submission before ``number`` alive."""
    if discovery is None:
        return False
    refs = {s.ref for s in job.submissions[:number - 1] if s.ref is not None}
    return any(o.alive for o in discovery.objects if o.ref in refs)


def legal(job: Job, decisions: list[Decision], discovery: Discovery | None,
          now: datetime, truly_alive: set[str] | None = None) -> None:
    """Every decision decide emits is legal for the folded job it was given."""
    names = [type(d).__name__ for d in decisions]
    commits = [d for d in decisions if isinstance(d, Commit)]
    submits = [d for d in decisions if isinstance(d, Submit)]
    assert len(commits) <= 1, names
    assert len(submits) <= 1, names
    if job.outcome is not None:
        assert all(isinstance(d, Stop | StopDuplicate | Bind) for d in decisions), names
    if discovery is None:
        assert all(isinstance(d, Submit | StartRecovery | Commit | Escalate | PlaceHold)
                   for d in decisions), names
    for d in commits:
        assert d.state.terminal
    cur = job.current
    ended_now = {d.submission for d in decisions if isinstance(d, RecordEnd) and d.final}
    for d in submits:
        # consecutive numbers, our token, only once the current submission ended
        assert d.submission == len(job.submissions) + 1, names
        assert d.token == token_for(job.id, d.submission)
        assert cur is None or cur.ended or cur.number in ended_now, names
        assert job.hold is None or job.give_up_requested or job.cancel_requested
        assert not commits, names
        if older_alive_in(job, discovery, d.submission + 1):
            assert d.gated, f"ungated Submit while an older object is alive: {decisions}"
        if truly_alive is not None:
            older = {s.ref for s in job.submissions if s.ref is not None}
            assert d.gated or not (older & truly_alive), (
                f"ungated Submit while {older & truly_alive} still runs: {decisions}")
    recoveries = [d for d in decisions if isinstance(d, StartRecovery)]
    for d in recoveries:
        found = job.spec.policy.rule_for(d.cause.kind)
        assert found is not None and found[0] == d.rule, d
        if not d.native:
            assert submits, names
    for d in decisions:
        if isinstance(d, RetrySubmit):
            assert cur is not None and d.submission == cur.number
            assert cur.ref is None and not cur.ended
            assert now - cur.attempted_at >= ATTEMPT_LEASE, "RetrySubmit before the lease"
            assert discovery is not None and discovery.complete
            assert not any(o.token == cur.token and o.cause.kind is not K.DUPLICATE
                           for o in discovery.objects)
        elif isinstance(d, OpenGate):
            assert cur is not None and d.submission == cur.number and cur.gated
            assert not cur.gate_opened
            assert not older_alive_in(job, discovery, d.submission), "OpenGate, older alive"
            assert discovery is not None
            older = {s.ref for s in job.submissions[:-1] if s.ref is not None}
            seen = {o.ref for o in discovery.objects}
            assert older <= seen, "OpenGate without seeing every older object"
            if truly_alive is not None:
                assert not older & truly_alive, f"OpenGate while {older & truly_alive} runs"
        elif isinstance(d, Bind):
            s = job.submission(d.submission)
            assert s is not None and s.ref is None
        elif isinstance(d, CancelObject):
            assert job.cancel_requested is not None
        elif isinstance(d, RecordEnd):
            s = job.submission(d.submission)
            assert s is not None and d.execution not in s.executions_recorded


def only_committed_is_terminal(before: Job, after: Job, decisions: list[Decision],
                               discovery: Discovery | None, now: datetime) -> None:
    """S7: project's state is terminal only if the record holds the outcome, whatever the
    look (this one, none, or one that shows nothing); what the plan was about to commit was
    the forecast before the commit; and with no look a bound live object never reads
    pending (an unreachable scheduler is not a state)."""
    for job in (before, after):
        for look in (discovery, None, Discovery(at=now, objects=(), complete=False)):
            status = project(job, look, now)
            assert not status.state.terminal or job.outcome is not None, (status, look)
            assert status.settled == (job.outcome is not None)
            if status.forecast is not None:
                assert job.outcome is None and look is not None
            if look is None:
                assert status.forecast is None and not status.scheduler_seen
                cur = job.current
                if job.outcome is None and job.hold is None and cur is not None \
                        and cur.ref is not None and not cur.ended:
                    assert status.state is not State.PENDING, status
    commits = [d for d in decisions if isinstance(d, Commit)]
    if commits and discovery is not None:
        forecast = project(before, discovery, now).forecast
        assert forecast is not None and forecast.state is commits[0].state, (forecast, commits)
        assert forecast.cause == commits[0].cause


def a_fault_never_produces_an_outcome(job: Job, decisions: list[Decision],
                                      discovery: Discovery | None) -> None:
    """R3/S16: a look that failed (None) or left objects out (incomplete) never ends an
    execution it did not show, and an outcome then comes only from what the record holds
    or from objects the look did show."""
    seen = {o.ref for o in discovery.objects} if discovery is not None else set()
    ends = [d for d in decisions if isinstance(d, RecordEnd)]
    assert all(d.ref in seen for d in ends), (ends, seen)
    if discovery is not None and discovery.complete:
        return
    for d in decisions:
        if not isinstance(d, Commit):
            continue
        from_record = job.awaiting is not None or job.give_up_requested is not None
        from_seen = any(e.final for e in ends)
        cancelled = job.cancel_requested is not None and d.cause == job.cancel_requested \
            and discovery is not None and all(
                s.ref is None or s.ended or s.ref in seen for s in job.submissions)
        assert from_record or from_seen or cancelled, (d, job.awaiting, discovery)


@dataclass
class Invariants:
    sim: Sim
    outcome: object = None
    history_at_commit: tuple = ()
    seen_recovering: bool = False
    states: list[State] = field(default_factory=list)
    # True: "recovering" shown from an object's own report counts too (the world driver,
    # whose requeued objects list their ended executions). False: only once the record
    # knows the job was taken back (chaos: an object may say "recovering" with nothing
    # else, which no record can remember; see the report's open questions).
    from_objects: bool = True

    def after_tick(self, before: Job, decisions: list[Decision],
                   discovery: Discovery | None, truly_alive: set[str] | None = None) -> None:
        sim = self.sim
        legal(before, decisions, discovery, sim.now, truly_alive)
        # fold is deterministic and equals the job advanced tick by tick
        again = fold(sim.record, sim.now)
        assert again == sim.job
        assert fold(sim.record, sim.now + timedelta(days=1)) == again
        # submissions are numbered 1, 2, ... in the record
        assert [s.number for s in sim.job.submissions] == list(
            range(1, len(sim.job.submissions) + 1))
        budgets_ok(sim.job)
        # a committed outcome never changes
        if self.outcome is None and sim.job.outcome is not None:
            self.outcome = sim.job.outcome
            self.history_at_commit = sim.job.history
        if self.outcome is not None:
            assert sim.job.outcome == self.outcome
            assert sim.job.history[:len(self.history_at_commit)] == self.history_at_commit
        # history holds committed transitions, never running
        assert all(t.state is not State.RUNNING for t in sim.job.history)
        only_committed_is_terminal(before, sim.job, decisions, discovery, sim.now)
        a_fault_never_produces_an_outcome(before, decisions, discovery)
        # recovering never goes back to pending
        status = project(sim.job, discovery, sim.now)
        self.states.append(status.state)
        if self.outcome is not None:
            assert status.state is sim.job.outcome.state  # type: ignore[union-attr]
        taken_back = sim.job.recovered or len(sim.job.submissions) > 1
        if status.state is State.RECOVERING and (self.from_objects or taken_back):
            self.seen_recovering = True
        elif self.seen_recovering:
            assert status.state is not State.PENDING, f"recovering -> pending: {self.states}"


def quiet_until_due(data: st.DataObject, job: Job, look: Discovery | None, plan: Plan,
                    now: datetime, decisions: list[Decision]) -> None:
    """Issue 27: where decide has nothing to do, it has nothing to do until next_due (the
    supervisor skips it till then): sampled at a few times in [now, due)."""
    if decisions:
        return
    due = next_due(job, look, plan, now)
    assert due is None or due > now
    span = due - now if due is not None else timedelta(days=2)
    fractions = data.draw(st.lists(st.floats(0, 1, exclude_max=True), max_size=3))
    samples = [now + span * f for f in fractions]
    if due is not None:
        samples.append(due - timedelta(microseconds=1))
    for t in samples:
        if due is None or t < due:
            assert decide(job, look, plan, t) == [], (now, t, due)


# --- the world driver ----------------------------------------------------------------------


@dataclass
class WObj:
    ref: str
    number: int
    state: State = State.PENDING
    cause: Cause = field(default_factory=lambda: Cause(kind=K.NONE))
    executions: list[Execution] = field(default_factory=list)
    lost_since: datetime | None = None
    gated: bool = False

    @property
    def alive(self) -> bool:
        return not self.state.terminal

    def report(self) -> ObjectReport:
        return ObjectReport(ref=self.ref, token=token_for(JOB, self.number), state=self.state,
                            cause=self.cause, executions=tuple(self.executions),
                            lost_since=self.lost_since, gated=self.gated)

    def open_execution(self) -> bool:
        return bool(self.executions) and self.executions[-1].cause is None

    def close(self, c: Cause) -> None:
        if self.open_execution():
            self.executions[-1] = msgspec.structs.replace(self.executions[-1], cause=c)
        else:
            self.executions.append(Execution(index=len(self.executions), cause=c))


class World:
    def __init__(self) -> None:
        self.objects: list[WObj] = []
        self.counter = 0

    def create(self, number: int, gated: bool) -> WObj:
        self.counter += 1
        o = WObj(ref=f"r{self.counter}", number=number, gated=gated,
                 state=State.HELD if gated else State.PENDING,
                 cause=Cause(kind=K.HELD if gated else K.NONE))
        self.objects.append(o)
        return o

    def by_ref(self, ref: str) -> WObj | None:
        return next((o for o in self.objects if o.ref == ref), None)

    def alive_refs(self) -> set[str]:
        return {o.ref for o in self.objects if o.alive}

    def evolve(self, data: st.DataObject, now: datetime) -> None:
        for o in self.objects:
            if not o.alive:
                continue
            if o.lost_since is not None:  # stuck at FailureTarget, as often as not
                op = data.draw(st.sampled_from(["stay", "stay", "stay", "end"]))
            else:
                op = data.draw(st.sampled_from(["stay", "stay", "run", "run", "run", "end",
                                                "requeue", "lose-node"]))
            if op == "run" and o.state in (State.PENDING, State.HELD, State.RECOVERING) \
                    and not o.gated:
                o.state, o.cause = State.RUNNING, Cause(kind=K.NONE)
                if not o.open_execution():
                    o.executions.append(Execution(index=len(o.executions), started_at=now))
            elif op == "end":
                kind = data.draw(ending_kinds)
                c = Cause(kind=kind, detail=f"{kind.value.upper()} at {now:%H:%M:%S}", at=now)
                o.state = {K.NONE: State.SUCCEEDED, K.CANCELLED: State.CANCELLED}.get(
                    kind, State.FAILED)
                o.cause = c
                if data.draw(st.booleans()):
                    o.close(c)
            elif op == "requeue" and o.state is State.RUNNING:
                c = Cause(kind=data.draw(requeue_kinds), detail="requeued", at=now)
                o.close(c)
                # Run again by the scheduler: recovering (Slurm: PENDING with Restarts > 0),
                # the ended execution listed (sacct -D), or plain pending.
                o.state = data.draw(st.sampled_from([State.RECOVERING, State.PENDING]))
                o.cause, o.lost_since = c, None
            elif op == "lose-node" and o.state is State.RUNNING and o.lost_since is None:
                o.cause, o.lost_since = Cause(kind=K.NODE_LOST, detail="FailureTarget"), now

    def stop(self, data: st.DataObject, ref: str) -> None:
        o = self.by_ref(ref)
        if o is not None and o.alive and data.draw(st.booleans()):  # lands, or not yet
            o.state, o.cause = State.CANCELLED, Cause(kind=K.CANCELLED, detail="CANCELLED by 0")

    def look(self, data: st.DataObject, now: datetime) -> Discovery | None:
        mode = data.draw(st.sampled_from(["full", "full", "full", "partial", "none"]))
        if mode == "none":
            return None
        reports = [o.report() for o in self.objects]
        if mode == "partial":
            keep = data.draw(st.lists(st.booleans(), min_size=len(reports),
                                      max_size=len(reports)))
            return Discovery(at=now, objects=tuple(r for r, k in zip(reports, keep, strict=True)
                                                   if k), complete=False)
        return Discovery(at=now, objects=tuple(reports))


def person(data: st.DataObject, sim: Sim) -> None:
    """Now and then a person cancels, resolves a hold, or gives up."""
    # (None at both ends: hypothesis favours the first and last choice)
    what = data.draw(st.sampled_from([None] * 60 + ["cancel", "resubmit", "resubmit",
                                                    "give-up"] + [None] * 60))
    if what == "cancel":
        sim.inject(ev.CancelRequested, actor="alice")
    elif what == "resubmit":
        sim.inject(ev.HoldReleased, actor="bob", resubmit=True)
    elif what == "give-up":
        sim.inject(ev.GiveUpRequested, actor="carol")


def act(data: st.DataObject, sim: Sim, world: World, decisions: list[Decision]) -> None:
    """What the supervisor does after appending: submit, stop, cancel, open gates — and
    record what it learnt (bound ref, rejection, gate opened), or crash before it."""
    for d in decisions:
        if isinstance(d, Submit | RetrySubmit):
            outcome = data.draw(st.sampled_from(["ok", "ok", "ok", "rejected", "lost-reply",
                                                 "twice", "crashed-before-submit"]))
            if outcome == "crashed-before-submit":
                continue
            if outcome == "rejected":
                sim.inject(ev.SubmissionRejected, submission=d.submission,
                           cause=Cause(kind=K.LAUNCH_FAILED, detail="sbatch: error"))
                continue
            o = world.create(d.submission, d.gated)
            if outcome == "twice":
                world.create(d.submission, d.gated)
            if outcome != "lost-reply":
                sim.inject(ev.SubmissionBound, submission=d.submission, ref=o.ref)
        elif isinstance(d, Stop | StopDuplicate):
            world.stop(data, d.ref)
        elif isinstance(d, CancelObject):
            world.stop(data, d.ref)
        elif isinstance(d, OpenGate):
            o = world.by_ref(d.ref)
            if o is not None:
                o.gated = False
                sim.inject(ev.GateOpened, submission=d.submission, ref=d.ref)


@examples(200)
@given(data=st.data(), policy=policies, decl=declarations, ticks=st.integers(10, 40))
def test_world_ticks_keep_every_invariant(data: st.DataObject, policy: RecoveryPolicy,
                                          decl: Declarations, ticks: int) -> None:
    sim = Sim(policy.rules, declarations=decl)
    world = World()
    check = Invariants(sim)
    for _ in range(ticks):
        sim.later(data.draw(steps))
        world.evolve(data, sim.now)
        person(data, sim)
        look = world.look(data, sim.now)
        before = sim.job
        decisions = decide(before, look, sim.plan, sim.now)
        quiet_until_due(data, before, look, sim.plan, sim.now, decisions)
        truly_alive = world.alive_refs()
        sim.append(_events(decisions, before, sim))
        check.after_tick(before, decisions, look, truly_alive)
        act(data, sim, world, decisions)
        for d in decisions:
            event(f"decision {type(d).__name__}")
    outcome = sim.job.outcome
    event(f"outcome {outcome.state.value if outcome else 'none yet'}")
    event(f"submissions {len(sim.job.submissions)}")
    for e in sim.job.escalations[:1]:
        event(f"escalation {e.message[:40]}")


def _events(decisions: list[Decision], job: Job, sim: Sim) -> list[ev.Event]:
    return to_events(decisions, job, sim.now)


# --- the chaos driver ----------------------------------------------------------------------


@st.composite
def chaotic_look(draw: st.DrawFn, job: Job, now: datetime) -> Discovery | None:
    if draw(st.integers(0, 9)) == 0:
        return None
    n = len(job.submissions) + 1
    reports = []
    for _ in range(draw(st.integers(0, 4))):
        number = draw(st.integers(1, n))
        ref = draw(st.sampled_from([f"r{number}", f"r{number}", f"x{number}", "stray"]))
        lost = draw(st.none() | st.integers(0, 600).map(lambda s: now - timedelta(seconds=s)))
        reports.append(ObjectReport(
            ref=ref, token=draw(st.sampled_from([token_for(JOB, number), token_for(JOB, number),
                                                 "other.1", None])),
            state=draw(st.sampled_from(State)), cause=draw(causes),
            executions=tuple(draw(st.lists(executions, max_size=3))), lost_since=lost,
            gated=draw(st.booleans())))
    unique = {r.ref: r for r in reversed(reports)}  # a ref names one object on a scheduler
    return Discovery(at=now, objects=tuple(reversed(unique.values())),
                     complete=draw(st.booleans()))


@examples(60)
@given(data=st.data(), policy=policies, decl=declarations, ticks=st.integers(1, 15))
def test_chaotic_looks_keep_the_record_invariants(data: st.DataObject, policy: RecoveryPolicy,
                                                  decl: Declarations, ticks: int) -> None:
    """Whatever the scheduler says, however inconsistent: fold stays deterministic, the
    outcome never changes, no budget is overspent, every decision is legal."""
    sim = Sim(policy.rules, declarations=decl)
    check = Invariants(sim, from_objects=False)
    for _ in range(ticks):
        sim.later(data.draw(steps))
        person(data, sim)
        look = data.draw(chaotic_look(sim.job, sim.now))
        before = sim.job
        decisions = decide(before, look, sim.plan, sim.now)
        quiet_until_due(data, before, look, sim.plan, sim.now, decisions)
        sim.append(_events(decisions, before, sim))
        check.after_tick(before, decisions, look)
        act(data, sim, World(), [d for d in decisions if isinstance(d, Submit | RetrySubmit)])


# --- fold on arbitrary records -------------------------------------------------------------


@examples(100)
@given(policy=valid_policies(), extra=st.lists(later_event, max_size=25),
       cut=st.integers(0, 25))
def test_fold_is_deterministic_on_any_record(policy: RecoveryPolicy, extra: list,
                                             cut: int) -> None:
    """fold of a record is a function of the record: twice the same, whatever `now`, and
    folding a prefix then advancing by the rest gives the same Job."""
    sim = Sim(policy.rules)
    record = [sim.record[0], *renumber(extra, 1)]
    job = fold(record, T0)
    assert fold(record, T0 + timedelta(hours=5)) == job
    assert advance(fold(record[:cut + 1], T0), record[cut + 1:]) == job
    assert job.version == record[-1].seq
    budgets_ok_or_counted(job, record)


def budgets_ok_or_counted(job: Job, record: list) -> None:
    """fold counts every RecoveryStarted before the outcome for its rule (it is decide's
    job not to write one past the budget)."""
    counted = [0] * len(job.budget_used)
    done = False
    for e in record:
        if isinstance(e, ev.OutcomeCommitted) and e.state.terminal:
            done = True
        if isinstance(e, ev.RecoveryStarted) and not done and 0 <= e.rule < len(counted):
            counted[e.rule] += 1
    assert list(job.budget_used) == counted


@examples(60)
@given(data=st.data(), policy=policies, decl=declarations,
       state=st.sampled_from([State.SUCCEEDED, State.FAILED, State.CANCELLED]),
       extra=st.lists(later_event, max_size=15))
def test_a_committed_outcome_never_changes_whatever_events_follow(
        data: st.DataObject, policy: RecoveryPolicy, decl: Declarations, state: State,
        extra: list) -> None:
    sim = Sim(policy.rules, declarations=decl)
    world = World()
    for _ in range(data.draw(st.integers(0, 8))):
        sim.later(data.draw(steps))
        world.evolve(data, sim.now)
        look = world.look(data, sim.now)
        before = sim.job
        decisions = decide(before, look, sim.plan, sim.now)
        sim.append(_events(decisions, before, sim))
        act(data, sim, world, decisions)
    if sim.job.outcome is None:
        sim.inject(ev.OutcomeCommitted, state=state, cause=Cause(kind=K.UNKNOWN, detail="x"))
    outcome, history = sim.job.outcome, sim.job.history
    assert outcome is not None
    record = sim.record + renumber(extra, sim.job.version)
    job = fold(record, sim.now)
    assert job.outcome == outcome
    assert job.history == history
    assert job.budget_used == sim.job.budget_used
    assert len(job.submissions) == len(sim.job.submissions)
    for look in (None, world.look(data, sim.now), data.draw(chaotic_look(job, sim.now))):
        assert project(job, look, sim.now).state is outcome.state
        decisions = decide(job, look, sim.plan, sim.now)
        assert all(isinstance(d, Stop | StopDuplicate | Bind) for d in decisions), decisions


# --- a record that cannot be trusted is refused -----------------------------------------------


@examples(60)
@given(data=st.data(), policy=policies, decl=declarations, ticks=st.integers(3, 20),
       damage=st.sampled_from(["delete", "repeat", "swap", "drop-last", "renumber"]))
def test_a_damaged_record_is_refused_never_folded_into_another_state(
        data: st.DataObject, policy: RecoveryPolicy, decl: Declarations, ticks: int,
        damage: str) -> None:
    """Issue 12 item 10: a record with an event deleted (e.g. a recovery-started, which would
    give a budget back), repeated, out of order, cut short of the stored version, or not
    numbered from 1 is refused with RecordError naming the job: never folded."""
    sim = Sim(policy.rules, declarations=decl)
    world = World()
    for _ in range(ticks):
        sim.later(data.draw(steps))
        world.evolve(data, sim.now)
        person(data, sim)
        look = world.look(data, sim.now)
        before = sim.job
        decisions = decide(before, look, sim.plan, sim.now)
        sim.append(_events(decisions, before, sim))
        act(data, sim, world, decisions)
    record = list(sim.record)
    if len(record) < 3:
        return
    version: int | None = None
    i = data.draw(st.integers(1, len(record) - 2))
    if damage == "delete":
        record.pop(i)
    elif damage == "repeat":
        record.insert(i, record[i])
    elif damage == "swap":
        record[i], record[i + 1] = record[i + 1], record[i]
    elif damage == "drop-last":
        version = record[-1].seq
        record.pop()
    else:
        shift = data.draw(st.sampled_from([-1, 1, 5]))
        record = [msgspec.structs.replace(e, seq=e.seq + shift) for e in record]
    event(f"damage {damage}")
    try:
        fold(record, sim.now, job_id=JOB, version=version)
    except RecordError as err:
        assert err.job_id == JOB and err.seq is not None and f"job {JOB}" in str(err)
    else:
        raise AssertionError(f"a damaged record ({damage}) was folded")
