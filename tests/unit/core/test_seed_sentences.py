"""One test (or table) per sentence of seed 000 that the functional core decides.

Each docstring quotes the sentence it holds the core to. The jobs are driven the way one
supervisor tick does it (decide -> to_events -> advance; see tests/strategies_core.Sim).
"""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from tests.strategies_core import (
    KUBEFLOW,
    LOCAL,
    SLURM,
    T0,
    Sim,
    ended,
    kinds_of,
    obj,
    rule,
)

from dispatch.core import events as ev
from dispatch.core.codec import DecodeError, decode, decode_event, encode, encode_event
from dispatch.core.decide import (
    ATTEMPT_LEASE,
    Bind,
    CancelObject,
    Commit,
    OpenGate,
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
    Execution,
    Level,
    Provenance,
    SchedulerUnreachable,
    State,
)
from dispatch.core.policy import (
    Action,
    Declarations,
    Enforcer,
    Plan,
    PolicyError,
    RecoveryPolicy,
)
from dispatch.core.record import fold
from dispatch.core.status import project_objects

K = CauseKind
PREEMPT_OR_LOST = rule([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3)


def running_first(sim: Sim) -> None:
    """Submit the first submission and see its object run (r1)."""
    assert kinds_of(sim.tick([])) == ["Submit"]
    assert kinds_of(sim.tick([obj(1, State.RUNNING)])) == ["Bind"]


def only(decisions: list, cls: type) -> list:
    return [d for d in decisions if isinstance(d, cls)]


# --- State and cause ----------------------------------------------------------------------


def test_there_are_eight_states() -> None:
    """"There are eight states: pending, held, running, recovering, succeeded, failed,
    cancelled and unknown." """
    assert [s.value for s in State] == [
        "pending", "held", "running", "recovering", "succeeded", "failed", "cancelled",
        "unknown",
    ]
    assert {s for s in State if s.terminal} == {State.SUCCEEDED, State.FAILED, State.CANCELLED}


def test_cause_kind_list_is_closed() -> None:
    """"a kind, from a closed list: none, preempted, node-lost, out-of-memory, time-limit,
    non-zero-exit, launch-failed, no-capacity, held, released, requeued, cancelled,
    duplicate, unknown" """
    assert [k.value for k in CauseKind] == [
        "none", "preempted", "node-lost", "out-of-memory", "time-limit", "non-zero-exit",
        "launch-failed", "no-capacity", "held", "released", "requeued", "cancelled",
        "duplicate", "unknown",
    ]
    with pytest.raises(ValueError):
        CauseKind("failed")  # the list is closed: no generic "failed" kind


def test_cause_carries_provenance_actor_detail_exit_code_and_time() -> None:
    """"a provenance: whether the scheduler said so, the application said so (an exit code),
    or an actor did it; the actor, when there was one; the detail: the scheduler's own words,
    kept verbatim, such as Slurm's NODE_FAIL reason; the exit code, when there was one, and
    when it happened." """
    assert [p.value for p in Provenance] == ["scheduler", "application", "actor"]
    words = "NODE_FAIL  reason=Not responding  (n3)"
    c = Cause(kind=K.NON_ZERO_EXIT, provenance=Provenance.APPLICATION, detail=words,
              exit_code=1, at=T0, actor=None)
    assert decode(encode(c), Cause) == c
    # The cause that ends the job is the one the scheduler reported, words and all.
    sim = Sim([])
    running_first(sim)
    sim.tick([obj(1, State.FAILED, cause_=c)])
    assert sim.job.outcome is not None
    assert sim.job.outcome.cause == c
    assert sim.job.outcome.cause.detail == words


@pytest.mark.parametrize("words", ["BOOT_FAIL", "SpecialCase: frobnicated", "RESV_DEL_HOLD"])
@pytest.mark.parametrize("rules, state", [
    ([rule([K.UNKNOWN], Action.HOLD)], State.HELD),
    ([rule([K.NON_ZERO_EXIT], Action.RESUBMIT, 3)], State.FAILED),
])
def test_unknown_is_never_stretched_and_keeps_the_words(words: str, rules: list,
                                                        state: State) -> None:
    """"an adapter that sees something new reports unknown with the scheduler's words in the
    detail, rather than guessing non-zero-exit." The core keeps it unknown, words verbatim,
    and never applies a non-zero-exit rule to it."""
    sim = Sim(rules)
    running_first(sim)
    sim.tick([ended(1, K.UNKNOWN, words)])
    status = sim.status([ended(1, K.UNKNOWN, words)])
    assert status.state is state
    assert status.cause is not None
    assert status.cause.kind is K.UNKNOWN and status.cause.detail == words
    assert sim.job.budget_used == tuple(0 for _ in rules)
    assert len(sim.job.submissions) == 1


def test_unreachable_scheduler_is_an_error_never_a_state() -> None:
    """"A scheduler you can't reach is an ErrUnreachable error, never a state." """
    assert issubclass(SchedulerUnreachable, Exception)
    assert "unreachable" not in {s.value for s in State}
    err = SchedulerUnreachable("slurm", "squeue: connection refused")
    assert "slurm" in str(err) and "connection refused" in str(err)
    # What the supervisor passes when it could not ask: no discovery, no transition.
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    before = sim.job
    assert sim.tick(None) == []
    assert sim.job == before


# --- Recovery rules are written against causes --------------------------------------------


@pytest.mark.parametrize("sequence", [
    [K.PREEMPTED, K.PREEMPTED, K.PREEMPTED],
    [K.NODE_LOST, K.PREEMPTED, K.NODE_LOST],
    [K.NODE_LOST, K.NODE_LOST, K.NODE_LOST],
])
def test_rule_on_preempted_and_node_lost_with_budget_3(sequence: list[CauseKind]) -> None:
    """"{On: []dispatch.CauseKind{dispatch.CausePreempted, dispatch.CauseNodeLost}, Action:
    dispatch.ActionResubmit, Budget: 3}": three recoveries on either cause, the fourth
    ending fails the job with an escalation."""
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    for n, kind in enumerate(sequence, start=1):
        d = sim.tick([ended(n, kind)])
        assert kinds_of(d) == ["RecordEnd", "StartRecovery", "Submit"]
        assert only(d, Submit)[0].submission == n + 1
        assert sim.job.budget_used == (n,)
        sim.tick([obj(n + 1, State.RUNNING)])
    d = sim.tick([ended(4, K.PREEMPTED)])
    assert kinds_of(d) == ["RecordEnd", "Commit", "Escalate"]
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
    assert sim.job.budget_used == (3,)
    assert "budget spent" in sim.job.escalations[0].message


def test_preemption_does_not_spend_the_budget_meant_for_real_failures() -> None:
    """"Preemption doesn't spend a budget meant for real failures, because a rule for one
    doesn't cover the other." """
    bug_rule = rule([K.NON_ZERO_EXIT], Action.RESUBMIT, 1)
    sim = Sim([PREEMPT_OR_LOST, bug_rule])
    running_first(sim)
    for n in (1, 2, 3):
        sim.tick([ended(n, K.PREEMPTED)])
        sim.tick([obj(n + 1, State.RUNNING)])
    assert sim.job.budget_used == (3, 0)
    # The real failure still has its whole budget.
    d = sim.tick([ended(4, K.NON_ZERO_EXIT, "exit 1")])
    assert only(d, StartRecovery)[0].rule == 1
    assert sim.job.budget_used == (3, 1)
    sim.tick([obj(5, State.RUNNING)])
    d = sim.tick([ended(5, K.NON_ZERO_EXIT)])
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
    assert sim.job.budget_used == (3, 1)


@pytest.mark.parametrize("rules, needle", [
    ([rule([K.PREEMPTED], Action.RESUBMIT, 1), rule([K.PREEMPTED, K.OUT_OF_MEMORY],
                                                     Action.HOLD)],
     "preempted is already covered by rules[0]"),
    ([rule([K.NODE_LOST], Action.ESCALATE), rule([K.TIME_LIMIT], Action.HOLD),
      rule([K.NODE_LOST], Action.REQUEUE, 2)],
     "node-lost is already covered by rules[0]"),
])
def test_validate_refuses_a_cause_covered_by_two_rules(rules: list, needle: str) -> None:
    """"RecoveryPolicy.Validate refuses a cause covered by two rules, so there's never a
    question of which applies." """
    with pytest.raises(PolicyError) as err:
        RecoveryPolicy(rules=tuple(rules)).validate()
    assert any(needle in p for p in err.value.problems), err.value.problems


@pytest.mark.parametrize("rules, uncovered", [
    ([], [K.PREEMPTED, K.NODE_LOST, K.OUT_OF_MEMORY, K.TIME_LIMIT, K.NON_ZERO_EXIT,
          K.LAUNCH_FAILED, K.NO_CAPACITY, K.HELD, K.RELEASED, K.REQUEUED, K.DUPLICATE,
          K.UNKNOWN]),
    ([PREEMPT_OR_LOST], [K.OUT_OF_MEMORY, K.TIME_LIMIT, K.NON_ZERO_EXIT, K.LAUNCH_FAILED,
                         K.NO_CAPACITY, K.HELD, K.RELEASED, K.REQUEUED, K.DUPLICATE,
                         K.UNKNOWN]),
    ([PREEMPT_OR_LOST, rule([K.UNKNOWN, K.OUT_OF_MEMORY], Action.HOLD)],
     [K.TIME_LIMIT, K.NON_ZERO_EXIT, K.LAUNCH_FAILED, K.NO_CAPACITY, K.HELD, K.RELEASED,
      K.REQUEUED, K.DUPLICATE]),
    ([rule([K.PREEMPTED, K.NODE_LOST, K.OUT_OF_MEMORY, K.TIME_LIMIT, K.NON_ZERO_EXIT,
            K.LAUNCH_FAILED, K.NO_CAPACITY, K.REQUEUED], Action.RESUBMIT, 1),
      rule([K.UNKNOWN, K.HELD, K.RELEASED, K.DUPLICATE], Action.ESCALATE)], []),
])
def test_plan_uncovered_lists_every_cause_no_rule_covers(rules: list,
                                                         uncovered: list[CauseKind]) -> None:
    """"And Plan.Uncovered lists, before the job starts, every cause no rule covers." """
    policy = RecoveryPolicy(rules=tuple(rules)).validate()
    assert Plan(policy=policy, declarations=LOCAL).uncovered() == uncovered


# --- Causes that can't be covered ----------------------------------------------------------


@pytest.mark.parametrize("record_knew", [False, True])
def test_cancelled_from_the_scheduler_is_final_even_if_the_record_missed_it(
        record_knew: bool) -> None:
    """"cancelled from the scheduler is final: a cancel that reached the scheduler is never
    undone by recovery, even if the record missed it." (S14) Even a policy that (invalidly)
    covers cancelled, with budget left, does not resubmit."""
    bad = RecoveryPolicy(rules=(rule([K.CANCELLED, K.PREEMPTED], Action.RESUBMIT, 5),))
    with pytest.raises(PolicyError):
        bad.validate()
    sim = Sim(bad.rules)
    running_first(sim)
    if record_knew:
        sim.inject(ev.CancelRequested, actor="alice")
    gone = ended(1, K.CANCELLED, "CANCELLED by 1000")
    d = sim.tick([gone])
    assert not only(d, Submit) and not only(d, StartRecovery)
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED
    assert sim.job.budget_used == (0,)
    # ... and whatever the scheduler shows afterwards, it is not undone.
    assert sim.tick([gone, obj(1, State.RUNNING, ref="r1")]) == []
    assert sim.status([obj(1, State.RUNNING)]).state is State.CANCELLED


def test_cancelled_from_the_scheduler_without_a_person_keeps_the_schedulers_words() -> None:
    """"cancelled from the scheduler is final ... even if the record missed it": the
    committed cause is the scheduler's, verbatim."""
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    sim.tick([ended(1, K.CANCELLED, "CANCELLED by 1000")])
    assert sim.job.outcome is not None
    assert sim.job.outcome.cause.kind is K.CANCELLED
    assert sim.job.outcome.cause.provenance is Provenance.SCHEDULER
    assert sim.job.outcome.cause.detail == "CANCELLED by 1000"
    assert sim.job.escalations == ()


def test_none_is_success() -> None:
    """"none is success." """
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    d = sim.tick([ended(1, K.NONE)])
    assert kinds_of(d) == ["RecordEnd", "Commit"]
    assert sim.job.outcome is not None and sim.job.outcome.state is State.SUCCEEDED
    assert sim.job.escalations == () and sim.job.budget_used == (0,)
    with pytest.raises(PolicyError) as err:
        RecoveryPolicy(rules=(rule([K.NONE], Action.RESUBMIT, 1),)).validate()
    assert any("none cannot be covered" in p for p in err.value.problems)


@pytest.mark.parametrize("action, budget, allowed", [
    (Action.HOLD, None, True),
    (Action.ESCALATE, None, True),
    (Action.RESUBMIT, 3, False),
    (Action.RESTART, 3, False),
    (Action.REQUEUE, 3, False),
])
def test_unknown_may_only_be_covered_by_hold_or_escalate(action: Action, budget: int | None,
                                                         allowed: bool) -> None:
    """"unknown may only be covered by a hold or escalate rule, because resubmitting on a
    cause nobody understands is a guess." """
    policy = RecoveryPolicy(rules=(rule([K.UNKNOWN], action, budget),))
    if allowed:
        assert policy.validate() is policy
    else:
        with pytest.raises(PolicyError) as err:
            policy.validate()
        assert err.value.problems == [
            f"rules[0]: unknown may only be covered by hold or escalate, not {action.value}: "
            "resubmitting on a cause nobody understands is a guess"
        ]


def test_cancelled_and_none_cannot_be_covered() -> None:
    """"Some causes can't be covered at all." cancelled and none are refused whatever the
    action."""
    for action, budget in ((Action.HOLD, None), (Action.RESUBMIT, 1), (Action.ESCALATE, None)):
        with pytest.raises(PolicyError) as err:
            RecoveryPolicy(rules=(rule([K.CANCELLED, K.NONE], action, budget),)).validate()
        text = " ".join(err.value.problems)
        assert "cancelled cannot be covered" in text and "none cannot be covered" in text


# --- An object ending is not the job ending ------------------------------------------------


def test_an_object_ending_is_not_the_job_ending() -> None:
    """"When an object ends, the scheduler is done with it, but the job isn't necessarily
    done. The plan decides." """
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    gone = ended(1, K.PREEMPTED, "PREEMPTED")
    assert gone.ended and gone.state is State.FAILED
    status = sim.status([gone])  # before the supervisor acted: what the plan will decide
    # ... is a forecast, not the state: the end is not committed, so the job still runs.
    assert status.state is State.RUNNING and not status.settled
    assert status.forecast is not None and status.forecast.state is State.RECOVERING
    assert status.forecast.cause is not None and status.forecast.cause.kind is K.PREEMPTED
    sim.tick([gone])
    assert sim.job.outcome is None
    assert sim.status([gone]).state is State.RECOVERING


def test_rule_with_budget_left_recovers_and_starts_the_next_submission() -> None:
    """"a rule with budget left: the job is recovering, and the supervisor starts the next
    submission" """
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    d = sim.tick([ended(1, K.NODE_LOST, "NODE_FAIL")])
    rec, sub = only(d, StartRecovery)[0], only(d, Submit)[0]
    assert (rec.rule, rec.action, rec.cause.kind) == (0, Action.RESUBMIT, K.NODE_LOST)
    assert (sub.submission, sub.token, sub.gated) == (2, "j.2", False)
    assert sub.cause is not None and sub.cause.detail == "NODE_FAIL"
    status = sim.status([ended(1, K.NODE_LOST)])
    assert status.state is State.RECOVERING
    assert status.cause is not None and status.cause.kind is K.NODE_LOST
    assert status.submissions == 2
    assert status.budget_used == {"preempted, node-lost (resubmit)": 1}  # the rule's name


@pytest.mark.parametrize("resolution", ["resubmit", "cancel", "give-up"])
def test_hold_rule_holds_until_a_person_resubmits_cancels_or_gives_up(resolution: str) -> None:
    """"a hold rule: the job is held under a recovery hold, until a person resubmits,
    cancels or gives up." """
    sim = Sim([rule([K.OUT_OF_MEMORY], Action.HOLD)])
    running_first(sim)
    gone = ended(1, K.OUT_OF_MEMORY, "OUT_OF_MEMORY")
    d = sim.tick([gone])
    assert kinds_of(d) == ["RecordEnd", "PlaceHold"]
    assert sim.job.hold is not None and sim.job.hold.recovery
    status = sim.status([gone])
    assert status.state is State.HELD
    assert status.cause is not None and status.cause.kind is K.OUT_OF_MEMORY
    # Nothing happens by itself, however long it waits.
    for _ in range(3):
        sim.later(3600)
        assert sim.tick([gone]) == []
    if resolution == "resubmit":
        sim.inject(ev.HoldReleased, actor="alice", resubmit=True)
        d = sim.tick([gone])
        assert kinds_of(d) == ["Submit"] and only(d, Submit)[0].submission == 2
        assert sim.status([gone]).state is State.RECOVERING
    elif resolution == "cancel":
        sim.inject(ev.CancelRequested, actor="alice")
        d = sim.tick([gone])
        assert kinds_of(d) == ["Commit"]
        assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED
        assert sim.job.outcome.cause.actor == "alice"
        assert sim.job.outcome.cause.provenance is Provenance.ACTOR
    else:
        sim.inject(ev.GiveUpRequested, actor="alice")
        d = sim.tick([gone])
        assert kinds_of(d) == ["Commit", "Escalate"]
        assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
        assert sim.job.outcome.cause.kind is K.OUT_OF_MEMORY
        assert "alice" in sim.job.escalations[-1].message


@pytest.mark.parametrize("rules, declarations, why", [
    pytest.param([], LOCAL, "no rule covers time-limit", id="no-rule"),
    pytest.param([rule([K.TIME_LIMIT], Action.RESUBMIT, 0)], LOCAL, "budget spent (0/0)",
                 id="spent-budget"),
    pytest.param([rule([K.TIME_LIMIT], Action.ESCALATE)], LOCAL,
                 "rule time-limit (escalate) escalates",
                 id="escalate-rule"),
    pytest.param([rule([K.TIME_LIMIT], Action.REQUEUE, 2)], LOCAL,
                 "the local backend does not enforce requeue natively", id="nobody-enforces"),
    pytest.param([rule([K.TIME_LIMIT], Action.RESTART, 2)], SLURM,
                 "the slurm backend does not enforce restart natively",
                 id="nobody-enforces-slurm-restart"),
    pytest.param([rule([K.TIME_LIMIT], Action.REQUEUE, 2, Enforcer.SUPERVISOR)], SLURM,
                 "supervisor recovery for requeue isn't implemented", id="supervisor-requeue"),
])
def test_no_rule_spent_budget_escalate_or_unenforced_fails_with_the_ending_cause(
        rules: list, declarations: Declarations, why: str) -> None:
    """"no rule, a spent budget, an escalate rule, or a rule nobody enforces: the job is
    failed, with the cause that ended the execution, and an escalation." """
    sim = Sim(rules, declarations=declarations)
    running_first(sim)
    ending = Cause(kind=K.TIME_LIMIT, detail="TIMEOUT", exit_code=None)
    d = sim.tick([obj(1, State.FAILED, cause_=ending)])
    assert kinds_of(d) == ["RecordEnd", "Commit", "Escalate"]
    assert sim.job.outcome is not None
    assert sim.job.outcome.state is State.FAILED
    assert sim.job.outcome.cause == ending
    assert len(sim.job.escalations) == 1
    assert why in sim.job.escalations[0].message, sim.job.escalations[0].message
    assert sim.job.escalations[0].cause == ending
    assert len(sim.job.submissions) == 1


@pytest.mark.parametrize("first", [K.NONE, K.NON_ZERO_EXIT, K.CANCELLED])
def test_a_committed_outcome_never_changes(first: CauseKind) -> None:
    """"Only a committed outcome is terminal. succeeded, failed and cancelled never change
    once committed." """
    sim = Sim([PREEMPT_OR_LOST, rule([K.UNKNOWN], Action.HOLD)])
    running_first(sim)
    sim.tick([ended(1, first)])
    assert sim.job.outcome is not None
    outcome, history = sim.job.outcome, sim.job.history
    # Whatever the scheduler shows next and whatever the record receives next.
    sim.tick([ended(1, K.PREEMPTED)])
    sim.tick([obj(1, State.RUNNING), obj(2, State.RUNNING)])
    for e, fields in [
        (ev.OutcomeCommitted, {"state": State.SUCCEEDED, "cause": Cause(kind=K.NONE)}),
        (ev.OutcomeCommitted, {"state": State.FAILED, "cause": Cause(kind=K.UNKNOWN)}),
        (ev.HoldPlaced, {"cause": Cause(kind=K.UNKNOWN)}),
        (ev.RecoveryStarted, {"rule": 0, "action": Action.RESUBMIT,
                              "cause": Cause(kind=K.PREEMPTED)}),
        (ev.SubmissionIntended, {"submission": 2, "token": "j.2"}),
        (ev.HoldReleased, {"resubmit": True}),
        (ev.CancelRequested, {}),
        (ev.GiveUpRequested, {}),
    ]:
        sim.inject(e, **fields)
        for objects in ([], [ended(1, K.PREEMPTED)], [obj(2, State.RUNNING)], None):
            sim.tick(objects)
            assert sim.job.outcome == outcome
            assert sim.status(objects).state is outcome.state
    assert sim.job.history[:len(history)] == history
    assert fold(sim.record, sim.now).outcome == outcome
    assert len(sim.job.submissions) == 1
    assert sim.job.budget_used == (0, 0)


def test_running_a_failed_job_again_is_supersede() -> None:
    """"Running a failed job again is Supersede, which creates a new job naming the old
    one." The old job stays failed; the new one names it."""
    sim = Sim([])
    running_first(sim)
    sim.tick([ended(1, K.NON_ZERO_EXIT)])
    sim.inject(ev.Superseded, by="j2", actor="alice")
    assert sim.job.superseded_by == "j2"
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
    assert sim.status([]).superseded_by == "j2"
    new = Sim([], job_id="j2")
    new.record[0] = msgspec.structs.replace(new.record[0], supersedes="j")
    new.job = fold(new.record, T0)
    assert new.status([]).supersedes == "j"
    assert new.status([]).state is State.PENDING


@pytest.mark.parametrize("second", [
    pytest.param(None, id="intended-not-yet-visible"),
    pytest.param(State.PENDING, id="queued"),
])
def test_recovering_never_goes_back_to_pending(second: State | None) -> None:
    """"recovering never goes back to pending. A job whose second submission is waiting to
    start is recovering, because it's been taken back to run again, and that's different
    from a job that has never run." """
    sim = Sim([PREEMPT_OR_LOST])
    assert sim.status([]).state is State.PENDING  # never run
    sim.tick([])
    assert sim.status([]).state is State.PENDING
    sim.tick([obj(1, State.PENDING)])
    assert sim.status([obj(1, State.PENDING)]).state is State.PENDING
    sim.tick([obj(1, State.RUNNING)])
    gone = ended(1, K.PREEMPTED)
    sim.tick([gone])
    objects = [gone]
    if second is not None:
        objects.append(obj(2, second))
    sim.tick(objects)
    for view in (objects, None, [gone]):
        status = sim.status(view)
        assert status.state is State.RECOVERING, (view, status)
    sim.tick(objects[:1] + [obj(2, State.RUNNING)])
    assert sim.status([obj(2, State.RUNNING)]).state is State.RUNNING
    assert State.PENDING not in [t.state for t in sim.job.history[1:]]


@pytest.mark.parametrize("reported", [
    pytest.param((State.PENDING, K.NONE, True), id="pending-gated"),
    pytest.param((State.HELD, K.HELD, True), id="held-by-our-gate"),
    pytest.param((State.HELD, K.HELD, False), id="held-gate-not-flagged"),
])
def test_a_gated_replacement_waiting_for_the_fence_is_recovering(
        reported: tuple[State, CauseKind, bool]) -> None:
    """"A job whose second submission is waiting to start is recovering" (S8) — also when
    it waits behind our own gate (S11: Slurm --hold, TrainJob suspend), which the scheduler
    may show as held. It is not a hold a person must resolve."""
    state, kind, flagged = reported
    sim = Sim([PREEMPT_OR_LOST], declarations=Declarations(backend="slurm",
                                                           node_loss_window=timedelta(0)))
    running_first(sim)
    stuck = obj(1, State.RUNNING, K.NODE_LOST, lost_since=T0)
    assert only(sim.tick([stuck]), Submit)[0].gated
    replacement = obj(2, state, kind, gated=flagged)
    sim.tick([stuck, replacement])
    status = sim.status([stuck, replacement])
    assert status.state is State.RECOVERING, status
    assert status.cause is not None and status.cause.kind is K.NODE_LOST
    assert sim.job.hold is None


def test_a_job_the_scheduler_runs_again_stays_recovering_without_a_covering_rule() -> None:
    """"recovering never goes back to pending": the scheduler requeued the object by itself
    (no rule allows it, so it is being stopped); shown recovering while the object says so,
    and still recovering in a look without it, or with no look."""
    sim = Sim([rule([K.NON_ZERO_EXIT], Action.RESUBMIT, 1)])
    running_first(sim)
    requeued = _requeued([(0, K.PREEMPTED)], State.RECOVERING, K.REQUEUED)
    d = sim.tick([requeued])
    assert kinds_of(d) == ["RecordEnd", "Stop"]
    assert sim.status([requeued]).state is State.RECOVERING
    for view, complete in (([], False), (None, True), ([requeued], True)):
        assert sim.status(view, complete=complete).state is State.RECOVERING


def test_replacement_is_gated_while_a_fenced_object_is_missing_from_an_incomplete_look(
        ) -> None:
    """"A replacement may be started, but its gate isn't opened until the scheduler shows
    the old object ended": the fenced first object still runs; when the (gated) second
    submission ends and a third is submitted on a look that misses the first, the third is
    gated too."""
    sim = Sim([PREEMPT_OR_LOST], declarations=Declarations(backend="kubeflow",
                                                           node_loss_window=timedelta(0)))
    running_first(sim)
    stuck = obj(1, State.RUNNING, K.NODE_LOST, lost_since=T0)
    assert only(sim.tick([stuck]), Submit)[0].gated
    sim.tick([stuck, obj(2, State.HELD, K.HELD, gated=True)])
    d = sim.tick([ended(2, K.PREEMPTED)], complete=False)
    third = only(d, Submit)
    assert len(third) == 1 and third[0].submission == 3 and third[0].gated is True


# --- restart and requeue -------------------------------------------------------------------


@pytest.mark.parametrize("action", [Action.RESTART, Action.REQUEUE])
@pytest.mark.parametrize("declarations", [LOCAL, SLURM, KUBEFLOW], ids=lambda d: d.backend)
def test_restart_or_requeue_assigned_to_the_supervisor_fails_the_job(
        action: Action, declarations: Declarations) -> None:
    """"restart and requeue are carried out only by a backend that enforces them natively; a
    rule with one of those actions assigned to the supervisor fails the job, with an
    escalation saying supervisor recovery for that action isn't implemented." """
    sim = Sim([rule([K.PREEMPTED], action, 3, Enforcer.SUPERVISOR)], declarations=declarations)
    running_first(sim)
    sim.tick([ended(1, K.PREEMPTED)])
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
    assert sim.job.outcome.cause.kind is K.PREEMPTED
    assert f"supervisor recovery for {action.value} isn't implemented" in \
        sim.job.escalations[0].message
    assert sim.job.budget_used == (0,)
    assert len(sim.job.submissions) == 1


def test_supervisor_carries_out_resubmit_and_hold_itself() -> None:
    """"Today the supervisor carries out resubmit and hold itself." On every backend,
    whatever it declares natively."""
    for decl in (LOCAL, SLURM, KUBEFLOW):
        plan = Plan(policy=RecoveryPolicy(rules=(PREEMPT_OR_LOST, rule([K.UNKNOWN],
                                                                      Action.HOLD))),
                    declarations=decl)
        assert plan.unenforced() == []


def _requeued(executions: list[tuple[int, CauseKind | None]], state: State,
              kind: CauseKind = K.NONE) -> object:
    exs = tuple(Execution(index=i, cause=Cause(kind=k, detail=k.value.upper()) if k else None)
                for i, k in executions)
    return obj(1, state, kind, executions=exs)


def test_backend_native_requeue_counts_each_execution_against_the_budget() -> None:
    """"restart and requeue are carried out only by a backend that enforces them natively":
    each execution the backend runs again spends the rule's budget, and past the budget the
    object is stopped and the plan fails the job."""
    sim = Sim([rule([K.PREEMPTED, K.NODE_LOST], Action.REQUEUE, 2),
               rule([K.NON_ZERO_EXIT], Action.RESUBMIT, 1)], declarations=SLURM)
    assert sim.plan.unenforced() == []
    running_first(sim)
    d = sim.tick([_requeued([(0, K.PREEMPTED), (1, None)], State.RUNNING)])
    assert kinds_of(d) == ["RecordEnd", "StartRecovery"]
    assert only(d, RecordEnd)[0].final is False
    assert only(d, StartRecovery)[0].native is True
    assert sim.job.budget_used == (1, 0)
    assert sim.status([_requeued([(0, K.PREEMPTED), (1, None)], State.RUNNING)]).state \
        is State.RUNNING
    # The same executions seen again are not counted again.
    assert sim.tick([_requeued([(0, K.PREEMPTED), (1, None)], State.RUNNING)]) == []
    d = sim.tick([_requeued([(0, K.PREEMPTED), (1, K.NODE_LOST)], State.PENDING)])
    assert kinds_of(d) == ["RecordEnd", "StartRecovery"]
    assert sim.job.budget_used == (2, 0)
    # Past the budget: the object is stopped, and once it ended the plan fails the job.
    third = _requeued([(0, K.PREEMPTED), (1, K.NODE_LOST), (2, K.PREEMPTED), (3, None)],
                      State.PENDING)
    d = sim.tick([third])
    assert kinds_of(d) == ["RecordEnd", "Stop"]
    assert only(d, Stop)[0].ref == "r1"
    assert sim.job.budget_used == (2, 0)
    gone = _requeued([(0, K.PREEMPTED), (1, K.NODE_LOST), (2, K.PREEMPTED), (3, None)],
                     State.CANCELLED, K.CANCELLED)
    d = sim.tick([gone])
    assert kinds_of(d) == ["RecordEnd", "Commit", "Escalate"]
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
    # The stop was ours: the ending cause is the preemption past the budget, not a cancel.
    assert sim.job.outcome.cause.kind is K.PREEMPTED
    assert sim.job.budget_used == (2, 0)


def test_native_requeues_and_the_final_end_seen_in_one_look_never_overspend() -> None:
    """"a rule with budget left: the job is recovering ...; a spent budget: the job is
    failed": executions the backend ran again and the object's final end, all first seen
    in one look, spend the budget once each and never past it."""
    sim = Sim([rule([K.PREEMPTED], Action.RESUBMIT, 1)], declarations=SLURM)
    running_first(sim)
    d = sim.tick([_requeued([(0, K.PREEMPTED), (1, K.PREEMPTED)], State.FAILED,
                            K.PREEMPTED)])
    assert sim.job.budget_used == (1,)
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
    assert not only(d, Submit)
    assert "budget spent (1/1)" in sim.job.escalations[0].message


def test_object_stopped_past_a_native_budget_ends_the_job_once_it_ended() -> None:
    """"past the budget the object is stopped" and then "a spent budget: the job is
    failed": also when the backend shows no new execution for the stopped object (its last
    execution was already recorded as run again)."""
    sim = Sim([rule([K.PREEMPTED], Action.REQUEUE, 1)], declarations=SLURM)
    running_first(sim)
    sim.tick([_requeued([(0, K.PREEMPTED)], State.PENDING)])
    d = sim.tick([_requeued([(0, K.PREEMPTED), (1, K.PREEMPTED)], State.PENDING)])
    assert kinds_of(d) == ["RecordEnd", "Stop"]
    gone = _requeued([(0, K.PREEMPTED), (1, K.PREEMPTED)], State.CANCELLED, K.CANCELLED)
    d = sim.tick([gone])
    assert kinds_of(d) == ["RecordEnd", "Commit", "Escalate"], d
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
    assert sim.job.outcome.cause.kind is K.PREEMPTED
    assert sim.tick([gone]) == []
    assert sim.status([gone]).state is State.FAILED


# --- Where the state comes from ------------------------------------------------------------


def test_history_holds_committed_transitions_not_running() -> None:
    """"Status.History holds the transitions committed to the record (recoveries, holds,
    outcomes) and not running. Whether a job is running comes from what the scheduler shows
    when you ask; it's in Status.State, not the history." """
    sim = Sim([PREEMPT_OR_LOST, rule([K.UNKNOWN], Action.HOLD)])
    running_first(sim)
    assert sim.status([obj(1, State.RUNNING)]).state is State.RUNNING
    sim.tick([ended(1, K.PREEMPTED)])
    sim.tick([obj(2, State.RUNNING)])
    assert sim.status([obj(2, State.RUNNING)]).state is State.RUNNING
    sim.tick([ended(2, K.UNKNOWN, "weird")])
    sim.inject(ev.HoldReleased, actor="bob", resubmit=True)
    sim.tick([])
    sim.tick([obj(3, State.RUNNING)])
    sim.tick([ended(3, K.NONE)])
    history = sim.status([ended(3, K.NONE)]).history
    assert [t.state for t in history] == [State.PENDING, State.RECOVERING, State.HELD,
                                          State.RECOVERING, State.SUCCEEDED]
    assert all(t.state is not State.RUNNING for t in history)
    assert [t.seq for t in history] == sorted(t.seq for t in history)


# --- The node-loss fence -------------------------------------------------------------------


def test_node_loss_fence() -> None:
    """"Inside the window the job is running with cause node-lost: the one case where a
    running job carries a cause. Past it, Next asks for the object to be stopped, then
    applies the plan for node-lost. A replacement may be started, but its gate isn't opened
    until the scheduler shows the old object ended." """
    window = timedelta(minutes=5)
    sim = Sim([PREEMPT_OR_LOST], declarations=Declarations(backend="kubeflow",
                                                           node_loss_window=window))
    running_first(sim)
    lost_at = sim.later(10)
    stuck = obj(1, State.RUNNING, K.NODE_LOST, detail="FailureTarget", lost_since=lost_at)
    for seconds in (0, 60, 299):
        sim.now = lost_at + timedelta(seconds=seconds)
        assert sim.tick([stuck]) == []
        status = sim.status([stuck])
        assert status.state is State.RUNNING
        assert status.cause is not None and status.cause.kind is K.NODE_LOST
    sim.now = lost_at + window
    d = sim.tick([stuck])
    assert kinds_of(d) == ["Stop", "RecordEnd", "StartRecovery", "Submit"]
    assert only(d, Stop)[0].ref == "r1"
    assert only(d, StartRecovery)[0].cause.kind is K.NODE_LOST
    assert only(d, Submit)[0].gated is True
    assert sim.job.budget_used == (1,)
    replacement = obj(2, State.HELD, K.HELD, gated=True)
    # The old object still shows running: the replacement's gate stays closed.
    for _ in range(3):
        sim.later(40)
        d = sim.tick([stuck, replacement])
        assert not only(d, OpenGate)
        assert not only(d, Submit) and not only(d, StartRecovery)
    assert sim.job.budget_used == (1,)
    # Missing from an incomplete look is not "ended".
    assert not only(sim.tick([replacement], complete=False), OpenGate)
    assert not only(sim.tick(None), OpenGate)
    # The scheduler shows the old object ended: now the gate opens.
    d = sim.tick([ended(1, K.CANCELLED), replacement])
    assert [x for x in d if isinstance(x, OpenGate)] == [OpenGate(submission=2, ref="r2")]
    assert sim.job.outcome is None and sim.job.budget_used == (1,)


def test_fenced_execution_past_its_budget_fails_with_node_lost() -> None:
    """"Past it, Next asks for the object to be stopped, then applies the plan for
    node-lost": with no rule for node-lost, the job fails with node-lost and an
    escalation."""
    sim = Sim([rule([K.PREEMPTED], Action.RESUBMIT, 3)],
              declarations=Declarations(backend="kubeflow", node_loss_window=timedelta(0)))
    running_first(sim)
    d = sim.tick([obj(1, State.RUNNING, K.NODE_LOST, lost_since=sim.now)])
    assert kinds_of(d) == ["Stop", "RecordEnd", "Commit", "Escalate"]
    assert sim.job.outcome is not None and sim.job.outcome.cause.kind is K.NODE_LOST
    # After the commit the still-running object is stopped again (later), never recovered.
    sim.later(3600)
    d = sim.tick([obj(1, State.RUNNING, K.NODE_LOST, lost_since=T0)])
    assert kinds_of(d) == ["Stop"]


@pytest.mark.parametrize("path", ["hold-released", "verdict-recorded-apart"])
def test_replacement_after_a_fence_is_gated_even_when_the_scheduler_cannot_be_asked(
        path: str) -> None:
    """"A replacement may be started, but its gate isn't opened until the scheduler shows
    the old object ended": a replacement submitted while the scheduler cannot be asked (no
    discovery) after a fence must be gated, since nothing showed the old object ended."""
    rules = [rule([K.NODE_LOST], Action.HOLD)] if path == "hold-released" else [
        PREEMPT_OR_LOST]
    sim = Sim(rules, declarations=Declarations(backend="kubeflow",
                                               node_loss_window=timedelta(0)))
    running_first(sim)
    stuck = obj(1, State.RUNNING, K.NODE_LOST, lost_since=T0)
    if path == "hold-released":
        sim.tick([stuck])
        assert sim.job.hold is not None
        sim.inject(ev.HoldReleased, actor="alice", resubmit=True)
    else:
        # The fence's end was recorded, the verdict not yet (a crash between two appends).
        d = decide_now(sim, [stuck])
        sim.append(to_events([x for x in d if isinstance(x, Stop | RecordEnd)], sim.job,
                             sim.now))
        assert sim.job.awaiting is not None
    d = sim.tick(None)
    subs = only(d, Submit)
    assert len(subs) == 1 and subs[0].gated is True, d
    # The old object still runs: no gate opened; once it ended, the gate opens.
    sim.tick([stuck, obj(2, State.HELD, K.HELD, gated=True)])
    assert not only(sim.tick([stuck, obj(2, State.HELD, K.HELD, gated=True)]), OpenGate)
    d = sim.tick([ended(1, K.CANCELLED), obj(2, State.HELD, K.HELD, gated=True)])
    assert only(d, OpenGate) == [OpenGate(submission=2, ref="r2")]


def decide_now(sim: Sim, objects: list) -> list:
    return decide(sim.job, sim.discovery(objects), sim.plan, sim.now)


# --- Without a record ----------------------------------------------------------------------


@pytest.mark.parametrize("states, expected", [
    ([], State.PENDING),
    ([State.PENDING], State.PENDING),
    ([State.RUNNING], State.RUNNING),
    ([State.FAILED, State.RUNNING], State.RUNNING),
    ([State.SUCCEEDED], State.PENDING),
    ([State.FAILED], State.PENDING),
    ([State.CANCELLED, State.FAILED], State.PENDING),
])
def test_without_a_record_level_is_object_only_and_never_terminal(
        states: list[State], expected: State) -> None:
    """"Its Status has Level object-only, and its state is pending or running, from whether
    any object of the job is alive. It's never terminal, because an object ending isn't the
    job ending, and only the record knows which it was." """
    objects = [obj(i + 1, s, K.NONE if s is not State.FAILED else K.NON_ZERO_EXIT)
               for i, s in enumerate(states)]
    status = project_objects("j", "train", objects)
    assert status.level is Level.OBJECT_ONLY
    assert status.state is expected
    assert not status.state.terminal and status.history == ()
    assert status.objects == tuple(o.ref for o in objects)


# --- Refusing what it doesn't understand ---------------------------------------------------


@pytest.mark.parametrize("enum", [State, CauseKind, Provenance, Level, Action, Enforcer])
def test_every_enum_encodes_as_its_name_and_unknown_names_are_refused(enum: type) -> None:
    """"Every state, cause kind and other enum encodes as its name, and decoding refuses a
    name it doesn't know." """
    for member in enum:
        assert encode(member) == f'"{member.value}"'.encode()
        assert decode(encode(member), enum) is member
    for word in ("bogus", "NODE_LOST", "Pending", "0", ""):
        if word in {m.value for m in enum}:
            continue
        with pytest.raises(DecodeError) as err:
            decode(f'"{word}"'.encode(), enum)
        assert repr(word) in str(err.value)
    with pytest.raises(DecodeError):
        decode(b"0", enum)  # never an int


def test_a_record_from_a_newer_build_is_refused_not_misread() -> None:
    """"A record written by a newer build that added a cause is refused by an older one,
    rather than misread as something it isn't." """
    good = ev.ExecutionEnded(seq=4, at=T0, submission=1, ref="r1", execution=0,
                             cause=Cause(kind=K.PREEMPTED, detail="PREEMPTED"))
    raw = encode_event(good)
    assert decode_event(raw, job_id="j", seq=4) == good
    newer = raw.replace(b'"preempted"', b'"thermal-throttled"')
    with pytest.raises(DecodeError) as err:
        decode_event(newer, job_id="j", seq=4)
    assert err.value.field == "$.cause.kind"
    assert "thermal-throttled" in str(err.value) and "job j" in str(err.value)


# --- S15: duplicates ------------------------------------------------------------------------


def test_duplicate_object_is_stopped_and_never_counted() -> None:
    """S15 (our reading of `duplicate`): a second object carrying an already-bound token is
    stopped and recorded with cause duplicate; it never counts as the job's execution and
    never spends a budget."""
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    twin = obj(1, State.RUNNING, ref="r1-twin")
    d = sim.tick([obj(1, State.RUNNING), twin])
    assert kinds_of(d) == ["StopDuplicate"]
    stop = only(d, StopDuplicate)[0]
    assert (stop.ref, stop.token, stop.cause.kind) == ("r1-twin", "j.1", K.DUPLICATE)
    assert sim.job.duplicates_stopped == frozenset({"r1-twin"})
    assert sim.tick([obj(1, State.RUNNING), twin]) == []  # stopped once, recorded
    # The twin ends (cancelled by our stop, or preempted): neither counts nor ends the job.
    for kind in (K.CANCELLED, K.PREEMPTED, K.NON_ZERO_EXIT):
        assert sim.tick([obj(1, State.RUNNING), ended(1, kind, ref="r1-twin")]) == []
    assert sim.job.outcome is None and sim.job.budget_used == (0,)
    assert sim.job.submissions[0].ref == "r1" and not sim.job.submissions[0].ended
    assert sim.status([obj(1, State.RUNNING), ended(1, K.CANCELLED, ref="r1-twin")]).state \
        is State.RUNNING


def test_duplicate_of_an_unbound_submission_binds_one_and_stops_the_other() -> None:
    """S15: "a second object carrying a submission token that is already bound (a crash
    between submit and record)": one object is bound, the other stopped as a duplicate."""
    sim = Sim([])
    sim.tick([])
    d = sim.tick([obj(1, State.RUNNING, ref="a"), obj(1, State.PENDING, ref="b")])
    assert d[0] == Bind(submission=1, ref="a")
    assert [x.ref for x in only(d, StopDuplicate)] == ["b"]
    assert sim.job.submissions[0].ref == "a"


# --- Crash safety: idempotent resubmission -------------------------------------------------


def test_intended_submission_whose_object_shows_up_is_bound_not_submitted_again() -> None:
    """R1 (kill -9 between submit and record): the intended-but-unbound submission whose
    object shows up in discovery is Bound, never submitted a second time."""
    sim = Sim([PREEMPT_OR_LOST])
    sim.tick([])
    sim.later(ATTEMPT_LEASE.total_seconds() * 3)  # the supervisor was down for a while
    d = sim.tick([obj(1, State.RUNNING, ref="slurm-77")])
    assert d == [Bind(submission=1, ref="slurm-77")]
    assert not only(d, Submit) and not only(d, RetrySubmit)
    assert sim.job.submissions[0].ref == "slurm-77"


def test_intended_submission_without_an_object_is_retried_only_after_the_lease() -> None:
    """R1/R2: with no object carrying its token, an intended submission is retried only
    after its attempt lease (another supervisor's submit may still be in flight), and only
    on a complete look at the scheduler."""
    sim = Sim([PREEMPT_OR_LOST])
    sim.tick([])
    start = sim.now
    for seconds in (0, 1, ATTEMPT_LEASE.total_seconds() - 1):
        assert sim.tick([], at=start + timedelta(seconds=seconds)) == []
    sim.now = start + ATTEMPT_LEASE
    assert sim.tick([], complete=False) == []
    assert sim.tick(None) == []
    d = sim.tick([])
    assert d == [RetrySubmit(submission=1, token="j.1", gated=False)]
    # The retry renews the lease.
    assert sim.tick([], at=sim.now + timedelta(seconds=1)) == []
    assert len(sim.job.submissions) == 1


# --- A person's cancel ---------------------------------------------------------------------


def test_person_cancel_while_running_cancels_the_object_then_commits_cancelled() -> None:
    """A cancel requested by a person while an object runs is sent to the scheduler, and
    the job is cancelled once the object ended (the actor's cause, not a recovery)."""
    sim = Sim([rule([K.PREEMPTED, K.NODE_LOST, K.NON_ZERO_EXIT], Action.RESUBMIT, 3)])
    running_first(sim)
    sim.inject(ev.CancelRequested, actor="alice")
    d = sim.tick([obj(1, State.RUNNING)])
    assert d == [CancelObject(ref="r1")]
    assert sim.job.outcome is None
    assert sim.tick([obj(1, State.RUNNING)], at=sim.now + timedelta(seconds=1)) == []
    d = sim.tick([ended(1, K.CANCELLED, "CANCELLED by 0")])
    assert kinds_of(d) == ["RecordEnd", "Commit"]
    commit = only(d, Commit)[0]
    assert commit.state is State.CANCELLED
    assert (commit.cause.kind, commit.cause.provenance, commit.cause.actor) == (
        K.CANCELLED, Provenance.ACTOR, "alice")
    assert sim.job.budget_used == (0,) and sim.job.escalations == ()


def test_person_cancel_is_not_committed_while_the_object_is_missing_from_an_incomplete_look(
        ) -> None:
    """A person's cancel "commits cancelled once it ended": an object missing from an
    incomplete look has not been seen ended (Discovery.complete False), so nothing is
    committed until a complete look shows it."""
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    sim.inject(ev.CancelRequested, actor="alice")
    assert sim.tick([], complete=False) == []
    assert sim.job.outcome is None
    assert sim.tick([obj(1, State.RUNNING)]) == [CancelObject(ref="r1")]
    sim.tick([ended(1, K.CANCELLED)])
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED


def test_person_cancel_racing_a_preemption_is_still_cancelled() -> None:
    """A person's cancel wins over a recovery: the job does not resubmit after a cancel was
    requested, whatever ended the object."""
    sim = Sim([PREEMPT_OR_LOST])
    running_first(sim)
    sim.inject(ev.CancelRequested, actor="alice")
    d = sim.tick([ended(1, K.PREEMPTED)])
    assert not only(d, Submit) and not only(d, StartRecovery)
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED


# --- R3: no transition on missing information ----------------------------------------------


def _scenarios() -> list[tuple[str, Sim]]:
    out = []
    s = Sim([PREEMPT_OR_LOST])
    running_first(s)
    out.append(("running", s))
    s = Sim([PREEMPT_OR_LOST])
    running_first(s)
    s.inject(ev.CancelRequested, actor="alice")
    out.append(("cancel-requested", s))
    s = Sim([PREEMPT_OR_LOST])
    s.tick([])
    s.later(3600)
    out.append(("unbound-past-lease", s))
    s = Sim([PREEMPT_OR_LOST], declarations=Declarations(backend="kubeflow",
                                                         node_loss_window=timedelta(0)))
    running_first(s)
    s.tick([obj(1, State.RUNNING, K.NODE_LOST, lost_since=T0)])
    out.append(("gated-after-fence", s))
    s = Sim([PREEMPT_OR_LOST])
    running_first(s)
    s.inject(ev.StopRequested, submission=1, ref="r1", cause=Cause(kind=K.PREEMPTED))
    s.later(3600)
    out.append(("stop-pending", s))
    return out


@pytest.mark.parametrize("name, sim", _scenarios(), ids=[n for n, _ in _scenarios()])
def test_decide_without_discovery_makes_no_transition_that_needs_the_scheduler(
        name: str, sim: Sim) -> None:
    """R3 "scheduler outage: no transition made on missing information": with discovery
    None, decide records no end, binds nothing, stops, cancels or opens nothing, retries no
    submit and commits nothing."""
    before = sim.job
    d = sim.tick(None, at=sim.now + timedelta(hours=1))
    assert d == [], (name, d)
    assert sim.job.outcome == before.outcome
    assert sim.job.submissions == before.submissions



# --- Pure functions with the time passed in ------------------------------------------------

CORE_MODULES = ("model", "policy", "spec", "events", "codec", "record", "decide", "status")


def _drive_everything() -> None:
    """A scripted life touching every core path: fence, gate, native requeue, hold, cancel,
    duplicates, retry after the lease, projection with and without a record."""
    sim = Sim([PREEMPT_OR_LOST, rule([K.UNKNOWN], Action.HOLD)],
              declarations=Declarations(backend="slurm", native_actions=frozenset(
                  {Action.REQUEUE}), node_loss_window=timedelta(seconds=5)))
    sim.tick([])
    sim.tick([], at=sim.now + timedelta(minutes=5))
    sim.tick([obj(1, State.RUNNING), obj(1, State.RUNNING, ref="dup")])
    stuck = obj(1, State.RUNNING, K.NODE_LOST, lost_since=sim.now)
    sim.tick([stuck], at=sim.now + timedelta(seconds=10))
    sim.tick([stuck, obj(2, State.HELD, K.HELD, gated=True)])
    sim.tick([ended(1, K.CANCELLED), obj(2, State.HELD, K.HELD, gated=True)])
    sim.tick([ended(1, K.CANCELLED), _requeued([(0, K.PREEMPTED), (1, None)], State.RUNNING)])
    sim.tick(None)
    sim.tick([ended(1, K.CANCELLED), ended(2, K.UNKNOWN, "weird")])
    sim.status([ended(2, K.UNKNOWN)])
    sim.status(None)
    sim.inject(ev.HoldReleased, actor="a", resubmit=True)
    sim.tick([])
    sim.inject(ev.CancelRequested, actor="a")
    sim.tick([obj(3, State.RUNNING)])
    sim.tick([ended(3, K.CANCELLED)])
    fold(sim.record, sim.now)
    sim.status([ended(3, K.CANCELLED)])
    project_objects("j", "train", [obj(1, State.RUNNING)])
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED


def test_the_core_never_reads_a_clock(monkeypatch: pytest.MonkeyPatch) -> None:
    """"dispatch.Fold replays ... dispatch.Project combines ... Both are pure functions with
    the time passed in, so the state can't drift between adapters or between the processes
    reading it." Every clock raises while the core runs."""
    import datetime as dt
    import importlib
    import time

    _drive_everything()  # once with clocks, so lazily built codecs/types are ready

    def no_clock(*_: object, **__: object) -> object:
        raise AssertionError("the core read a clock")

    class NoClock(dt.datetime):
        now = classmethod(no_clock)  # type: ignore[assignment]
        utcnow = classmethod(no_clock)  # type: ignore[assignment]
        today = classmethod(no_clock)  # type: ignore[assignment]

    class NoClockDate(dt.date):
        today = classmethod(no_clock)  # type: ignore[assignment]

    for name in CORE_MODULES:
        mod = importlib.import_module(f"dispatch.core.{name}")
        if getattr(mod, "datetime", None) is dt.datetime:
            monkeypatch.setattr(mod, "datetime", NoClock)
        if getattr(mod, "date", None) is dt.date:
            monkeypatch.setattr(mod, "date", NoClockDate)
    for fn in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter",
               "perf_counter_ns", "localtime", "gmtime"):
        monkeypatch.setattr(time, fn, no_clock)
    _drive_everything()
    monkeypatch.undo()
    with pytest.raises(AssertionError, match="read a clock"):  # the trap itself works
        NoClock.now()


def test_the_core_modules_name_no_clock() -> None:
    """The same, read from the source: no now(), utcnow(), today() or time module calls."""
    import ast
    import importlib
    import inspect

    for name in CORE_MODULES:
        tree = ast.parse(inspect.getsource(importlib.import_module(f"dispatch.core.{name}")))
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute):
                assert node.attr not in {"now", "utcnow", "today", "monotonic",
                                         "perf_counter", "time_ns"}, (name, node.lineno)
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names]
                module = getattr(node, "module", None) or ""
                assert "time" not in names and module != "time", (name, node.lineno)
