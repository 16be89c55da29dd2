"""RecoveryPolicy.validate (S4), Plan.uncovered / unenforced (S5, S9)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.strategies_core import KUBEFLOW, LOCAL, SLURM, rule

from dispatch.core.model import CauseKind
from dispatch.core.policy import (
    ENDING_KINDS,
    UNCOVERABLE,
    Action,
    Declarations,
    Enforcer,
    Plan,
    PolicyError,
    RecoveryPolicy,
    Rule,
)

K = CauseKind


def problems_of(*rules: Rule) -> list[str]:
    with pytest.raises(PolicyError) as err:
        RecoveryPolicy(rules=rules).validate()
    return err.value.problems


def test_a_valid_policy_validates_to_itself() -> None:
    policy = RecoveryPolicy(rules=(
        rule([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3),
        rule([K.UNKNOWN], Action.HOLD),
        rule([K.OUT_OF_MEMORY], Action.ESCALATE),
        rule([K.TIME_LIMIT], Action.REQUEUE, 0),
        rule([K.NON_ZERO_EXIT], Action.RESTART, 1),
    ))
    assert policy.problems() == []
    assert policy.validate() is policy
    assert RecoveryPolicy().validate().rules == ()


def test_validate_reports_every_problem_not_only_the_first() -> None:
    """S4: "It reports every problem, not the first." """
    problems = problems_of(
        rule([K.PREEMPTED, K.CANCELLED], Action.RESUBMIT),            # no budget, cancelled
        rule([K.PREEMPTED, K.UNKNOWN], Action.RESTART, -2),           # twice, unknown, < 0
        rule([K.NONE], Action.HOLD, 4),                               # none, budget on hold
        rule([], Action.ESCALATE, 1),                                 # empty, budget
        rule([K.OUT_OF_MEMORY, K.OUT_OF_MEMORY], Action.HOLD, None, Enforcer.BACKEND),
    )
    assert problems == [
        "rules[0]: cancelled cannot be covered: cancelled from the scheduler is final and is "
        "never recovered (S14)",
        "rules[0]: resubmit needs a budget",
        "rules[1]: preempted is already covered by rules[0]; a cause may be covered by one "
        "rule only",
        "rules[1]: unknown may only be covered by hold or escalate, not restart: "
        "resubmitting on a cause nobody understands is a guess",
        "rules[1]: budget must be >= 0, got -2",
        "rules[2]: none cannot be covered: none is success; there is nothing to recover from",
        "rules[2]: budget is meaningless for hold; remove it",
        "rules[3]: covers no cause ('on' is empty)",
        "rules[3]: budget is meaningless for escalate; remove it",
        "rules[4]: names out-of-memory twice",
        "rules[4]: hold is carried out by the supervisor, not the backend",
    ]


@pytest.mark.parametrize("action", [Action.RESUBMIT, Action.RESTART, Action.REQUEUE])
def test_budgeted_actions_need_a_non_negative_budget(action: Action) -> None:
    assert problems_of(rule([K.PREEMPTED], action)) == [f"rules[0]: {action.value} needs a budget"]
    assert problems_of(rule([K.PREEMPTED], action, -1)) == [
        "rules[0]: budget must be >= 0, got -1"]
    assert RecoveryPolicy(rules=(rule([K.PREEMPTED], action, 0),)).problems() == []


@pytest.mark.parametrize("action", [Action.HOLD, Action.ESCALATE])
@pytest.mark.parametrize("budget", [0, 1, 5])
def test_budget_on_hold_or_escalate_is_refused(action: Action, budget: int) -> None:
    assert problems_of(rule([K.PREEMPTED], action, budget)) == [
        f"rules[0]: budget is meaningless for {action.value}; remove it"]


@pytest.mark.parametrize("kind", sorted(UNCOVERABLE, key=lambda k: k.value))
def test_uncoverable_kinds_are_refused_under_every_action(kind: CauseKind) -> None:
    for action in Action:
        budget = 1 if action in (Action.RESUBMIT, Action.RESTART, Action.REQUEUE) else None
        problems = problems_of(rule([kind], action, budget))
        assert problems[0].startswith(f"rules[0]: {kind.value} cannot be covered: ")


def test_a_cause_in_two_rules_names_both_rules() -> None:
    problems = problems_of(rule([K.NODE_LOST], Action.RESUBMIT, 1),
                           rule([K.PREEMPTED], Action.HOLD),
                           rule([K.TIME_LIMIT, K.NODE_LOST], Action.ESCALATE))
    assert problems == ["rules[2]: node-lost is already covered by rules[0]; a cause may be "
                        "covered by one rule only"]


def test_rule_for_finds_the_covering_rule() -> None:
    policy = RecoveryPolicy(rules=(rule([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3),
                                   rule([K.UNKNOWN], Action.HOLD)))
    assert policy.rule_for(K.NODE_LOST) == (0, policy.rules[0])
    assert policy.rule_for(K.UNKNOWN) == (1, policy.rules[1])
    assert policy.rule_for(K.TIME_LIMIT) is None


def test_enforced_by_defaults() -> None:
    """S9: restart and requeue default to the backend; resubmit, hold, escalate to the
    supervisor; an explicit enforcer wins."""
    assert rule([K.PREEMPTED], Action.RESTART, 1).enforced_by is Enforcer.BACKEND
    assert rule([K.PREEMPTED], Action.REQUEUE, 1).enforced_by is Enforcer.BACKEND
    for action in (Action.RESUBMIT, Action.HOLD, Action.ESCALATE):
        assert rule([K.PREEMPTED], action).enforced_by is Enforcer.SUPERVISOR
    assert rule([K.PREEMPTED], Action.REQUEUE, 1, Enforcer.SUPERVISOR).enforced_by \
        is Enforcer.SUPERVISOR


def test_ending_kinds_are_every_kind_but_the_uncoverable_ones() -> None:
    """Seed: "Some causes can't be covered at all": only none and cancelled."""
    assert set(ENDING_KINDS) | set(UNCOVERABLE) == set(CauseKind)
    assert not set(ENDING_KINDS) & set(UNCOVERABLE)
    assert set(UNCOVERABLE) == {K.NONE, K.CANCELLED}


@pytest.mark.parametrize("kind", [K.HELD, K.RELEASED, K.REQUEUED, K.DUPLICATE])
@pytest.mark.parametrize("action, budget", [(Action.RESUBMIT, 2), (Action.HOLD, None),
                                            (Action.ESCALATE, None), (Action.REQUEUE, 1)])
def test_held_released_requeued_duplicate_can_be_covered(kind: CauseKind, action: Action,
                                                         budget: int | None) -> None:
    """S5: "every kind but none and cancelled (held, released, requeued, duplicate
    included)" can be covered, and is listed by uncovered() while no rule covers it."""
    policy = RecoveryPolicy(rules=(rule([kind], action, budget),))
    assert policy.problems() == []
    assert kind not in Plan(policy=policy, declarations=SLURM).uncovered()
    assert kind in Plan(policy=RecoveryPolicy(), declarations=SLURM).uncovered()


# --- Plan: uncovered and unenforced on each backend ----------------------------------------

MIXED = RecoveryPolicy(rules=(
    rule([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3),      # 0 supervisor
    rule([K.UNKNOWN], Action.HOLD),                             # 1 supervisor
    rule([K.OUT_OF_MEMORY], Action.ESCALATE),                   # 2 supervisor
    rule([K.TIME_LIMIT], Action.REQUEUE, 2),                    # 3 backend (default)
    rule([K.NON_ZERO_EXIT], Action.RESTART, 1),                 # 4 backend (default)
    rule([K.LAUNCH_FAILED], Action.REQUEUE, 1, Enforcer.SUPERVISOR),  # 5 nobody, ever
))
NOT_IMPLEMENTED = ("rules[5] [launch-failed] -> requeue budget 1 (supervisor): supervisor "
                   "recovery for requeue isn't implemented")


@pytest.mark.parametrize("declarations, unenforced", [
    pytest.param(LOCAL, [
        "rules[3] [time-limit] -> requeue budget 2 (backend): the local backend does not "
        "enforce requeue natively",
        "rules[4] [non-zero-exit] -> restart budget 1 (backend): the local backend does not "
        "enforce restart natively",
        NOT_IMPLEMENTED,
    ], id="local-no-native"),
    pytest.param(SLURM, [
        "rules[4] [non-zero-exit] -> restart budget 1 (backend): the slurm backend does not "
        "enforce restart natively",
        NOT_IMPLEMENTED,
    ], id="slurm-requeue-native"),
    pytest.param(KUBEFLOW, [
        "rules[3] [time-limit] -> requeue budget 2 (backend): the kubeflow backend does not "
        "enforce requeue natively",
        NOT_IMPLEMENTED,
    ], id="kubeflow-restart-native"),
    pytest.param(Declarations(backend="both", native_actions=frozenset(Action)),
                 [NOT_IMPLEMENTED], id="everything-native"),
])
def test_plan_unenforced_per_backend(declarations: Declarations, unenforced: list[str]) -> None:
    """S5/S9: "Plan.unenforced() lists rules that nobody will carry out on this backend";
    restart and requeue run only where the backend declares them native."""
    plan = Plan(policy=MIXED.validate(), declarations=declarations)
    assert plan.unenforced() == unenforced
    assert plan.uncovered() == [K.NO_CAPACITY, K.HELD, K.RELEASED, K.REQUEUED, K.DUPLICATE]


@pytest.mark.parametrize("declarations", [LOCAL, SLURM, KUBEFLOW], ids=lambda d: d.backend)
def test_plan_uncovered_does_not_depend_on_the_backend(declarations: Declarations) -> None:
    policy = RecoveryPolicy(rules=(rule([K.PREEMPTED], Action.REQUEUE, 2),)).validate()
    plan = Plan(policy=policy, declarations=declarations)
    assert plan.uncovered() == [k for k in ENDING_KINDS if k is not K.PREEMPTED]
    assert K.NONE not in plan.uncovered() and K.CANCELLED not in plan.uncovered()


def test_declarations_default_window_and_no_native_actions() -> None:
    d = Declarations(backend="local")
    assert d.native_actions == frozenset()
    assert d.node_loss_window == timedelta(minutes=5)


# Issue 21 item 18: which kind each action may cover, written out (DESIGN S4, S5), not
# computed from UNCOVERABLE: "R" refused, "ok" accepted.
COVERAGE = {
    K.NONE: dict.fromkeys(Action, "R"),
    K.CANCELLED: dict.fromkeys(Action, "R"),
    K.UNKNOWN: {Action.RESUBMIT: "R", Action.HOLD: "ok", Action.ESCALATE: "ok",
                Action.RESTART: "R", Action.REQUEUE: "R"},
    **{k: dict.fromkeys(Action, "ok") for k in (
        K.PREEMPTED, K.NODE_LOST, K.OUT_OF_MEMORY, K.TIME_LIMIT, K.NON_ZERO_EXIT,
        K.LAUNCH_FAILED, K.NO_CAPACITY, K.HELD, K.RELEASED, K.REQUEUED, K.DUPLICATE)},
}


def test_the_coverage_table_names_every_kind_and_action() -> None:
    assert set(COVERAGE) == set(CauseKind)
    assert all(set(row) == set(Action) for row in COVERAGE.values())


@pytest.mark.parametrize("kind", list(CauseKind), ids=lambda k: k.value)
@pytest.mark.parametrize("action", list(Action), ids=lambda a: a.value)
def test_validate_accepts_and_refuses_as_the_coverage_table_says(kind: CauseKind,
                                                                 action: Action) -> None:
    budget = 1 if action in (Action.RESUBMIT, Action.RESTART, Action.REQUEUE) else None
    policy = RecoveryPolicy(rules=(rule([kind], action, budget),))
    verdict = "R" if policy.problems() else "ok"
    assert verdict == COVERAGE[kind][action], policy.problems()


def test_uncovered_lists_every_kind_but_none_and_cancelled() -> None:
    """S5, on every backend: the kinds an empty policy leaves uncovered."""
    for declarations in (LOCAL, SLURM, KUBEFLOW):
        uncovered = Plan(policy=RecoveryPolicy(), declarations=declarations).uncovered()
        assert set(uncovered) == set(CauseKind) - {K.NONE, K.CANCELLED}


def test_the_spec_reference_lists_the_kinds_the_code_accepts() -> None:
    """docs/spec.md's `on` row says which kinds a rule may name and which it may not: the
    same ones validate accepts (it once said duplicate, held and released could not be)."""
    import re
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[3] / "docs" / "spec.md").read_text()
    row = next(x for x in doc.splitlines() if x.startswith("| `on` |"))
    coverable, uncoverable = re.search(
        r"\| `([^`]*)`; a cause may be covered by one rule only; `([^`]*)` cannot be "
        r"covered \|", row).groups()  # type: ignore[union-attr]
    assert {CauseKind(w) for w in coverable.split(", ")} == {
        k for k, row_ in COVERAGE.items() if "ok" in row_.values()}
    assert {CauseKind(w) for w in uncoverable.split(", ")} == {
        k for k, row_ in COVERAGE.items() if set(row_.values()) == {"R"}}
