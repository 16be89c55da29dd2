"""Recovery policy: rules written against causes (S4), the plan (S5) and who enforces what (S9).

Pure: validation and verdicts are functions of their inputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from enum import StrEnum

import msgspec

from dispatch.core.model import CauseKind
from dispatch.errors import BadInput


class Action(StrEnum):
    RESUBMIT = "resubmit"
    HOLD = "hold"
    ESCALATE = "escalate"
    RESTART = "restart"
    REQUEUE = "requeue"


class Enforcer(StrEnum):
    SUPERVISOR = "supervisor"
    BACKEND = "backend"


BUDGETED_ACTIONS = frozenset({Action.RESUBMIT, Action.RESTART, Action.REQUEUE})
SUPERVISOR_ACTIONS = frozenset({Action.RESUBMIT, Action.HOLD, Action.ESCALATE})

# Kinds no rule may cover, and why (S4, S14). Only these two: every other kind can end an
# execution and so can be covered (S5: held, released, requeued and duplicate included).
UNCOVERABLE: dict[CauseKind, str] = {
    CauseKind.NONE: "none is success; there is nothing to recover from",
    CauseKind.CANCELLED: "cancelled from the scheduler is final and is never recovered (S14)",
}

# Every cause a rule may cover, which Plan.uncovered lists when none does. A rule naming
# duplicate is accepted but changes nothing: a duplicate is never the job's execution and
# never spends a budget (S15), so decide runs the job again whatever the rule says.
ENDING_KINDS: tuple[CauseKind, ...] = tuple(k for k in CauseKind if k not in UNCOVERABLE)


class Rule(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Covers causes ``on`` with ``action``; budgeted actions may run ``budget`` times."""

    on: tuple[CauseKind, ...]
    action: Action
    budget: int | None = None
    enforcer: Enforcer | None = None

    @property
    def enforced_by(self) -> Enforcer:
        """restart and requeue default to the backend; the rest to the supervisor."""
        if self.enforcer is not None:
            return self.enforcer
        if self.action in (Action.RESTART, Action.REQUEUE):
            return Enforcer.BACKEND
        return Enforcer.SUPERVISOR

    @property
    def name(self) -> str:
        """The rule's one name everywhere it is shown (the CLI, history, escalations, the
        API's ``budget_used``, metrics, the dashboard): its causes and its action,
        ``preempted, node-lost (resubmit)``. Unique within a policy (a cause is covered by
        one rule at most)."""
        return f"{', '.join(k.value for k in self.on)} ({self.action.value})"

    def describe(self) -> str:
        kinds = ", ".join(k.value for k in self.on)
        budget = f" budget {self.budget}" if self.budget is not None else ""
        return f"[{kinds}] -> {self.action.value}{budget} ({self.enforced_by.value})"


def rule_name(rules: Sequence[Rule], index: int) -> str:
    """``Rule.name`` of ``rules[index]``; ``rules[N]`` for an index no rule has (a record
    that names a rule its spec lacks)."""
    return rules[index].name if 0 <= index < len(rules) else f"rules[{index}]"


class PolicyError(BadInput, ValueError):
    """A policy that cannot be used. ``problems`` lists every problem, not only the first."""

    def __init__(self, problems: list[str], where: str = "policy") -> None:
        self.problems = problems
        self.where = where
        super().__init__(f"{where}: " + "; ".join(problems))


class RecoveryPolicy(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    rules: tuple[Rule, ...] = ()

    def problems(self) -> list[str]:
        found: list[str] = []
        first_rule: dict[CauseKind, int] = {}
        for i, rule in enumerate(self.rules):
            where = f"rules[{i}]"
            if not rule.on:
                found.append(f"{where}: covers no cause ('on' is empty)")
            seen_here: set[CauseKind] = set()
            for kind in rule.on:
                if kind in seen_here:
                    found.append(f"{where}: names {kind.value} twice")
                    continue
                seen_here.add(kind)
                if kind in UNCOVERABLE:
                    found.append(f"{where}: {kind.value} cannot be covered: {UNCOVERABLE[kind]}")
                if kind is CauseKind.UNKNOWN and rule.action not in (Action.HOLD, Action.ESCALATE):
                    found.append(
                        f"{where}: unknown may only be covered by hold or escalate, not "
                        f"{rule.action.value}: resubmitting on a cause nobody understands "
                        "is a guess"
                    )
                if kind in first_rule:
                    found.append(
                        f"{where}: {kind.value} is already covered by rules[{first_rule[kind]}]; "
                        "a cause may be covered by one rule only"
                    )
                else:
                    first_rule[kind] = i
            if rule.action in BUDGETED_ACTIONS:
                if rule.budget is None:
                    found.append(f"{where}: {rule.action.value} needs a budget")
                elif rule.budget < 0:
                    found.append(f"{where}: budget must be >= 0, got {rule.budget}")
            elif rule.budget is not None:
                found.append(f"{where}: budget is meaningless for {rule.action.value}; remove it")
            if rule.enforcer is Enforcer.BACKEND and rule.action in SUPERVISOR_ACTIONS:
                found.append(
                    f"{where}: {rule.action.value} is carried out by the supervisor, "
                    "not the backend"
                )
        return found

    def validate(self) -> RecoveryPolicy:
        problems = self.problems()
        if problems:
            raise PolicyError(problems)
        return self

    def rule_for(self, kind: CauseKind) -> tuple[int, Rule] | None:
        for i, rule in enumerate(self.rules):
            if kind in rule.on:
                return i, rule
        return None


class Declarations(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What a backend declares about itself: native recovery actions and its node-loss window."""

    backend: str
    native_actions: frozenset[Action] = frozenset()
    node_loss_window: timedelta = timedelta(minutes=5)
    # The backend marks its own stops at the scheduler (Slurm: the job's Comment; Kubeflow:
    # a TrainJob annotation) and names "dispatch" for a cancel that carries the mark: a
    # cancel from the supervisor's uid without it is a person's (S14, decide._own_stop).
    marks_stops: bool = False


class Plan(msgspec.Struct, frozen=True, kw_only=True):
    """A validated policy on one backend: what is covered, and who enforces it."""

    policy: RecoveryPolicy
    declarations: Declarations

    def uncovered(self) -> list[CauseKind]:
        covered = {k for r in self.policy.rules for k in r.on}
        return [k for k in ENDING_KINDS if k not in covered]

    def unenforced_reason(self, rule: Rule) -> str | None:
        """Why nobody will carry ``rule`` out on this backend, or None when someone will."""
        if rule.enforced_by is Enforcer.SUPERVISOR:
            if rule.action in (Action.RESTART, Action.REQUEUE):
                return f"supervisor recovery for {rule.action.value} isn't implemented"
            return None
        if rule.action not in self.declarations.native_actions:
            return (
                f"the {self.declarations.backend} backend does not enforce "
                f"{rule.action.value} natively"
            )
        return None

    def unenforced(self) -> list[str]:
        out = []
        for i, rule in enumerate(self.policy.rules):
            reason = self.unenforced_reason(rule)
            if reason is not None:
                out.append(f"rules[{i}] {rule.describe()}: {reason}")
        return out


def kinds(names: Iterable[str]) -> tuple[CauseKind, ...]:
    return tuple(CauseKind(n) for n in names)
