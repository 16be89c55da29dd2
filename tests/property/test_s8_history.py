"""S8 on any record (issue 21, item 14): recovering never goes back to pending, neither in
the folded history nor in the projected status, whatever events a record holds. Records are
drawn with recovery, hold and release events made common, and with releases that say
``resubmit=False`` (a value no producer writes and the codec refuses, built here in memory so
that fold itself is held to S8 whatever it is handed)."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.strategies_core import EVENT_STRATEGIES, T0, Sim, causes, later_event, renumber

from dispatch.core import events as ev
from dispatch.core.codec import DecodeError, decode_event, encode_event
from dispatch.core.model import Cause, CauseKind, Discovery, State
from dispatch.core.policy import Action
from dispatch.core.record import fold
from dispatch.core.status import project

EXAMPLES = int(os.environ.get("CORE_EXAMPLES", 300))

_at = st.just(T0)
released_any_way = st.builds(ev.HoldReleased, seq=st.just(0), at=_at,
                             actor=st.none() | st.just("ann"),
                             resubmit=st.booleans())  # False only in memory: see the docstring
hold_cycle = st.tuples(EVENT_STRATEGIES[ev.RecoveryStarted], EVENT_STRATEGIES[ev.HoldPlaced],
                       released_any_way).map(list)
pieces = st.one_of(later_event.map(lambda e: [e]), hold_cycle,
                   st.builds(ev.HoldPlaced, seq=st.just(0), at=_at, cause=causes).map(
                       lambda e: [e]),
                   released_any_way.map(lambda e: [e]))


def _flat(chunks: list[list[ev.Event]]) -> list[ev.Event]:
    return [e for chunk in chunks for e in chunk]


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(chunks=st.lists(pieces, max_size=12), minutes=st.integers(0, 600))
def test_recovering_never_goes_back_to_pending_on_any_record(
        chunks: list[list[ev.Event]], minutes: int) -> None:
    sim = Sim([])
    record = [sim.record[0], *renumber(_flat(chunks), 1)]
    job = fold(record, T0)
    states = [t.state for t in job.history]
    if State.RECOVERING in states:
        after = states[states.index(State.RECOVERING):]
        assert State.PENDING not in after, states
    now = T0 + timedelta(minutes=minutes)
    for look in (None, Discovery(at=now, objects=())):
        status = project(job, look, now)
        shown = [t.state for t in status.history]
        if State.RECOVERING in shown:
            assert State.PENDING not in shown[shown.index(State.RECOVERING):], shown
            if job.outcome is None:
                assert status.state is not State.PENDING, (states, status.state)


def test_a_release_after_a_recovery_is_recovering_not_pending() -> None:
    """The case the issue names: recovery, hold, a release written as resubmit=False."""
    sim = Sim([])
    cause = Cause(kind=CauseKind.NODE_LOST, detail="node gone")
    record = [sim.record[0], *renumber([
        ev.RecoveryStarted(seq=0, at=T0, rule=0, action=Action.RESUBMIT, cause=cause),
        ev.HoldPlaced(seq=0, at=T0, cause=cause),
        ev.HoldReleased(seq=0, at=T0, actor="ann", resubmit=False),  # type: ignore[arg-type]
    ], 1)]
    job = fold(record, T0)
    assert [t.state for t in job.history] == [State.PENDING, State.RECOVERING, State.HELD,
                                             State.RECOVERING]
    assert job.resubmit_requested is not None and job.hold is None


def test_a_stored_release_without_resubmission_is_refused_naming_the_field() -> None:
    good = encode_event(ev.HoldReleased(seq=4, at=T0, actor="ann"))
    assert decode_event(good, job_id="j", seq=4) == ev.HoldReleased(seq=4, at=T0, actor="ann")
    spelled = good[:-1] + b',"resubmit":true}'
    assert decode_event(spelled, job_id="j", seq=4).resubmit is True
    with pytest.raises(DecodeError) as err:
        decode_event(good[:-1] + b',"resubmit":false}', job_id="j", seq=4)
    assert err.value.field == "$.resubmit" and err.value.exit_code == 5
    assert "job j, seq 4" in str(err.value)
