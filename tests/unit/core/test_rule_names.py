"""Issue 48 item 6: a rule has one readable name (``Rule.name``: its causes and action,
``preempted, node-lost (resubmit)``) wherever it is shown: the status's budget (the API's
``budget_used``, the CLI's BUDGET USED), the history's note, ``dispatch history``'s line and
the message of the escalation a spent budget raises; never its index (``rules[1]``)."""

from __future__ import annotations

from tests.strategies_core import Sim, ended, kinds_of, obj, rule

from dispatch.core.model import CauseKind, State
from dispatch.core.policy import Action, rule_name
from dispatch.core.story import story

K = CauseKind
FAILURES = rule([K.NON_ZERO_EXIT], Action.RESUBMIT, 1)
PREEMPTIONS = rule([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3)


def test_a_rule_is_named_by_its_causes_and_action_everywhere() -> None:
    sim = Sim([FAILURES, PREEMPTIONS])
    assert kinds_of(sim.tick([])) == ["Submit"]
    sim.tick([obj(1, State.RUNNING)])
    sim.tick([ended(1, K.PREEMPTED)])  # recovered by the second rule
    sim.tick([ended(1, K.PREEMPTED), obj(2, State.RUNNING)])
    sim.tick([ended(1, K.PREEMPTED), ended(2, K.NON_ZERO_EXIT)])  # the first rule
    sim.tick([ended(1, K.PREEMPTED), ended(2, K.NON_ZERO_EXIT), obj(3, State.RUNNING)])
    sim.tick([ended(1, K.PREEMPTED), ended(2, K.NON_ZERO_EXIT),
              ended(3, K.NON_ZERO_EXIT)])  # its budget is spent: failed, escalated
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED
    status = sim.status(None)
    assert status.budget_used == {"non-zero-exit (resubmit)": 1,
                                  "preempted, node-lost (resubmit)": 1}
    notes = [t.note for t in status.history if t.state is State.RECOVERING]
    assert notes == ["resubmit by rule preempted, node-lost (resubmit)",
                     "resubmit by rule non-zero-exit (resubmit)"]
    lines = [text for _, text in story(sim.record) if text.startswith("RECOVERING")]
    assert [x.split(": resubmit")[0] for x in lines] == [
        "RECOVERING: rule preempted, node-lost (resubmit)",
        "RECOVERING: rule non-zero-exit (resubmit)"]
    said = [x.message for x in sim.job.escalations] + [sim.job.outcome.cause.note]
    assert any("rule non-zero-exit (resubmit): budget spent (1/1) on non-zero-exit" in m
               for m in said), said
    words = " ".join([*notes, *lines, *said, *status.budget_used])
    assert "rules[" not in words


def test_a_record_naming_a_rule_its_spec_lacks_says_its_index() -> None:
    assert rule_name([FAILURES], 0) == "non-zero-exit (resubmit)"
    assert rule_name([FAILURES], 3) == "rules[3]"
