"""Person requests that conflict are never both accepted (issue 21, item 13): the table of
core.person_requests.judge, row by row, on records built the way the supervisor builds them,
and what the supervisor then does with the request that was recorded."""

from __future__ import annotations

import pytest
from tests.strategies_core import Sim, ended, kinds_of, obj, rule

from dispatch.core import events as ev
from dispatch.core.model import CauseKind, State
from dispatch.core.person_requests import ALREADY, RECORD, PersonRequest, judge, pending
from dispatch.core.policy import Action

R = PersonRequest
EVENT = {R.CANCEL: (ev.CancelRequested, {}), R.GIVE_UP: (ev.GiveUpRequested, {}),
         R.RESUBMIT: (ev.HoldReleased, {})}


def held() -> Sim:
    sim = Sim([rule([CauseKind.NODE_LOST], Action.HOLD)])
    sim.tick([])
    sim.tick([obj(1, State.RUNNING)])
    sim.tick([ended(1, CauseKind.NODE_LOST)])
    assert sim.job.hold is not None and pending(sim.job) is None
    return sim


def with_pending(first: PersonRequest | None) -> Sim:
    sim = held()
    if first is not None:
        cls, fields = EVENT[first]
        sim.inject(cls, actor="ann", **fields)
        assert pending(sim.job) is not None and pending(sim.job)[0] is first  # type: ignore[index]
    return sim


# pending, new request -> "record" | "already" | "refused"
TABLE = {
    (None, R.CANCEL): "record", (None, R.GIVE_UP): "record", (None, R.RESUBMIT): "record",
    (R.CANCEL, R.CANCEL): "already", (R.CANCEL, R.GIVE_UP): "refused",
    (R.CANCEL, R.RESUBMIT): "refused",
    (R.GIVE_UP, R.CANCEL): "refused", (R.GIVE_UP, R.GIVE_UP): "already",
    (R.GIVE_UP, R.RESUBMIT): "refused",
    (R.RESUBMIT, R.CANCEL): "record", (R.RESUBMIT, R.GIVE_UP): "refused",
    (R.RESUBMIT, R.RESUBMIT): "already",
}


@pytest.mark.parametrize("first, second", list(TABLE),
                         ids=[f"{a.value if a else 'none'}-then-{b.value}" for a, b in TABLE])
def test_each_pair_of_requests_on_a_held_job(first: PersonRequest | None,
                                              second: PersonRequest) -> None:
    sim = with_pending(first)
    answer = judge(sim.job, second)
    want = TABLE[(first, second)]
    if want == "record":
        assert answer == RECORD
    elif want == "already":
        assert answer == ALREADY
    else:
        assert answer.refusal is not None and not answer.record
        assert first is not None
        # the person and time where the record keeps them (a resubmission keeps the hold's)
        named = f"a {first.value} requested" + ("" if first is R.RESUBMIT else " by ann")
        assert named in answer.refusal
        assert f"{second.value} refused" in answer.refusal and sim.job.id in answer.refusal


def test_the_request_recorded_is_the_one_carried_out() -> None:
    """give-up then resubmit: the resubmit is refused, so the give-up is what happens."""
    sim = with_pending(R.GIVE_UP)
    assert judge(sim.job, R.RESUBMIT).refusal is not None
    assert kinds_of(sim.tick([ended(1, CauseKind.NODE_LOST)]))[:2] == ["Commit", "Escalate"]
    assert sim.job.outcome is not None and sim.job.outcome.state is State.FAILED


def test_a_cancel_overrides_a_pending_resubmit_before_it_starts() -> None:
    sim = with_pending(R.RESUBMIT)
    sim.inject(ev.CancelRequested, actor="bob")
    decisions = sim.tick([ended(1, CauseKind.NODE_LOST)])
    assert "Submit" not in kinds_of(decisions)
    assert sim.job.outcome is not None and sim.job.outcome.state is State.CANCELLED


def test_a_resubmit_carried_out_is_no_longer_pending() -> None:
    sim = with_pending(R.RESUBMIT)
    assert kinds_of(sim.tick([ended(1, CauseKind.NODE_LOST)])) == ["Submit"]
    assert pending(sim.job) is None
    assert "not held" in (judge(sim.job, R.RESUBMIT).refusal or "")
    assert "not held" in (judge(sim.job, R.GIVE_UP).refusal or "")
    assert judge(sim.job, R.CANCEL) == RECORD


@pytest.mark.parametrize("request_", list(R))
def test_a_committed_job_refuses_every_request(request_: PersonRequest) -> None:
    sim = with_pending(R.CANCEL)
    sim.tick([ended(1, CauseKind.NODE_LOST)])
    assert sim.job.outcome is not None
    answer = judge(sim.job, request_)
    assert answer.refusal is not None and "cancelled" in answer.refusal


def test_a_job_that_is_not_held_refuses_give_up_and_resubmit() -> None:
    sim = Sim([])
    sim.tick([])
    assert "not held" in (judge(sim.job, R.GIVE_UP).refusal or "")
    assert "not held" in (judge(sim.job, R.RESUBMIT).refusal or "")
    assert judge(sim.job, R.CANCEL) == RECORD

