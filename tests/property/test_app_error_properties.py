"""Issue 23 / DESIGN "Three voices, never mixed": the application's error is shown and recorded,
never used to classify. Whatever the scheduler shows and whatever errors ride on it, decide
makes the same decisions (the same causes, states, recoveries and budgets) as it would with
no error at all; the errors only add their own record (once per execution) and ride along
on escalations."""

from __future__ import annotations

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.property import test_core_properties as core
from tests.strategies_core import Sim, app_errors

from dispatch.core.decide import Decision, Escalate, RecordError, decide, to_events
from dispatch.core.model import Discovery
from dispatch.core.policy import Declarations, RecoveryPolicy
from dispatch.core.status import project

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _without_errors(look: Discovery | None) -> Discovery | None:
    if look is None:
        return None
    return Discovery(at=look.at, complete=look.complete, objects=tuple(
        msgspec.structs.replace(o, executions=tuple(
            msgspec.structs.replace(e, error=None) for e in o.executions))
        for o in look.objects))


def _classifying(decisions: list[Decision]) -> list[Decision]:
    """The decisions with the error's own parts taken out."""
    out: list[Decision] = []
    for d in decisions:
        if isinstance(d, RecordError):
            continue
        if isinstance(d, Escalate) and d.error is not None:
            d = msgspec.structs.replace(d, error=None,
                                        message=d.message.split("; application error: ")[0])
        out.append(d)
    return out


@SETTINGS
@given(data=st.data(), policy=core.policies, decl=core.declarations,
       ticks=st.integers(1, 12))
def test_an_error_never_changes_what_is_decided(data: st.DataObject, policy: RecoveryPolicy,
                                                decl: Declarations, ticks: int) -> None:
    sim = Sim(policy.rules, declarations=decl)
    for _ in range(ticks):
        sim.later(data.draw(core.steps))
        core.person(data, sim)
        look = data.draw(core.chaotic_look(sim.job, sim.now))
        with_errors = decide(sim.job, look, sim.plan, sim.now)
        without = decide(sim.job, _without_errors(look), sim.plan, sim.now)
        # (an error already in the record rides on both sides' escalations: taken out of both)
        assert _classifying(with_errors) == _classifying(without)
        before = sim.job
        sim.append(to_events(with_errors, before, sim.now))
        # the state and the cause a caller reads do not depend on the errors either
        st_with = project(sim.job, look, sim.now)
        st_without = project(sim.job, _without_errors(look), sim.now)
        assert (st_with.state, st_with.cause, st_with.forecast) == (
            st_without.state, st_without.cause, st_without.forecast)
        # once per execution
        keys = [(r.submission, r.execution) for r in sim.job.errors]
        assert len(keys) == len(set(keys))
        core.act(data, sim, core.World(),
                 [d for d in with_errors if isinstance(d, core.Submit | core.RetrySubmit)])


@SETTINGS
@given(error=app_errors)
def test_every_error_renders_on_one_visible_line(error: object) -> None:
    from dispatch.core.app_error import AppError, one_line

    assert isinstance(error, AppError)
    text = one_line(error)
    assert "\n" not in text and "\x1b" not in text and "\r" not in text
