"""Issue 39 items 1 and 3 in the pure core: what a supervisor that took a scope over does with
the sends and submits the previous holder recorded (decide's ``takeover``).

Item 1: a stop or cancel recorded before the takeover may never have reached the scheduler
(the holder died between the record and the send), so it is sent again at once while the
scheduler still shows the object alive; the 30 s resend stays for a supervisor's own sends.
Item 3: a submit claimed before the takeover is retried the backend's own bound after the
takeover, not ATTEMPT_LEASE after the claim.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.strategies_core import Sim, kinds_of, obj, rule

from dispatch.core import events as ev
from dispatch.core.decide import ATTEMPT_LEASE, RESEND_AFTER, Takeover, decide
from dispatch.core.model import Cause, CauseKind, Provenance, State
from dispatch.core.next_due import next_due
from dispatch.core.policy import Action

K = CauseKind
LOST = rule([K.PREEMPTED, K.NODE_LOST], Action.RESUBMIT, 3)
S = timedelta(seconds=1)


def _running(sim: Sim) -> None:
    assert kinds_of(sim.tick([])) == ["Submit"]
    assert kinds_of(sim.tick([obj(1, State.RUNNING)])) == ["Bind"]


def _cancel_sent(sim: Sim) -> None:
    """A person's cancel, and the CancelSent the (previous) holder recorded for r1."""
    _running(sim)
    sim.later(1)
    sim.inject(ev.CancelRequested, actor="alice")
    assert kinds_of(sim.tick([obj(1, State.RUNNING)])) == ["CancelObject"]


def _stop_sent(sim: Sim) -> None:
    """A StopRequested for r1 (the supervisor's own stop: spent native budget)."""
    _running(sim)
    sim.later(1)
    sim.inject(ev.StopRequested, submission=1, ref="r1", by="1000",
               cause=Cause(kind=K.PREEMPTED, provenance=Provenance.SCHEDULER))


# (what was recorded, seconds after the record the takeover came, seconds after the record
#  the new holder looks, whether the object still runs) -> is it sent again?
CASES = [
    # The previous holder's send, object alive: at once, whatever the time.
    ("cancel", 2, 2, True, True),
    ("cancel", 2, 3, True, True),
    ("stop", 2, 2, True, True),
    # The scheduler shows it carried out (object ended): nothing to send.
    ("cancel", 2, 2, False, False),
    ("stop", 2, 2, False, False),
    # The acting supervisor's own send (recorded after its takeover): the 30 s wait stays.
    ("cancel", -1, 2, True, False),
    ("cancel", -1, 31, True, True),
    ("stop", -1, 2, True, False),
    ("stop", -1, 31, True, True),
]


@pytest.mark.parametrize(("sent", "takeover_after", "look_after", "alive", "again"), CASES)
def test_a_send_recorded_before_the_takeover_is_sent_again_at_once(
        sent: str, takeover_after: float, look_after: float, alive: bool,
        again: bool) -> None:
    sim = Sim([LOST])
    (_cancel_sent if sent == "cancel" else _stop_sent)(sim)
    recorded = sim.now
    takeover = Takeover(at=recorded + takeover_after * S, submit_in_flight=timedelta(0))
    sim.now = recorded + look_after * S
    state = State.RUNNING if alive else State.CANCELLED
    look = sim.discovery([obj(1, state, K.NONE if alive else K.CANCELLED)])
    out = decide(sim.job, look, sim.plan, sim.now, takeover=takeover)
    want = "CancelObject" if sent == "cancel" else "Stop"
    assert (want in kinds_of(out)) is again, (out, sim.job.submissions)
    if not again and alive:
        # Quiet until the 30 s resend of its own send, and no earlier threshold.
        due = next_due(sim.job, look, sim.plan, sim.now, takeover=takeover)
        assert due == recorded + RESEND_AFTER


def test_without_a_takeover_a_recorded_cancel_waits_the_resend() -> None:
    """The behaviour before issue 39 (and still that of a supervisor without a lease)."""
    sim = Sim([LOST])
    _cancel_sent(sim)
    sim.later(2)
    assert decide(sim.job, sim.discovery([obj(1, State.RUNNING)]), sim.plan, sim.now) == []


def test_after_its_own_resend_the_new_holder_waits_again() -> None:
    sim = Sim([LOST])
    _cancel_sent(sim)
    takeover = Takeover(at=sim.later(2), submit_in_flight=timedelta(0))
    look = [obj(1, State.RUNNING)]
    out = decide(sim.job, sim.discovery(look), sim.plan, sim.now, takeover=takeover)
    assert kinds_of(out) == ["CancelObject"]
    from dispatch.core.decide import to_events
    sim.append(to_events(out, sim.job, sim.now))
    sim.later(1)
    assert decide(sim.job, sim.discovery(look), sim.plan, sim.now, takeover=takeover) == []


# (the backend's bound, seconds after the claim the takeover came, seconds after the
#  takeover the new holder looks) -> RetrySubmit?
SUBMIT_CASES = [
    (0, 3, 0, True),        # local: nothing in flight once the holder is gone
    (20, 3, 19, False),     # Slurm (--timeout 20): sbatch may still land until its timeout
    (20, 3, 20, True),
    (10, 3, 9.5, False),    # Kubeflow: one request's timeout
    (10, 3, 10, True),
    (60, 3, 27, True),      # never later than the attempt lease from the claim
]


@pytest.mark.parametrize(("bound", "takeover_after", "look_after", "retry"), SUBMIT_CASES)
def test_a_submit_claimed_before_the_takeover_waits_the_backends_bound(
        bound: float, takeover_after: float, look_after: float, retry: bool) -> None:
    sim = Sim([LOST])
    assert kinds_of(sim.tick([])) == ["Submit"]  # the claim; its submit never landed
    claimed = sim.now
    takeover = Takeover(at=claimed + takeover_after * S, submit_in_flight=bound * S)
    sim.now = takeover.at + look_after * S
    out = decide(sim.job, sim.discovery([]), sim.plan, sim.now, takeover=takeover)
    assert (kinds_of(out) == ["RetrySubmit"]) is retry, out
    if not retry:
        due = next_due(sim.job, sim.discovery([]), sim.plan, sim.now, takeover=takeover)
        assert due == min(takeover.at + bound * S, claimed + ATTEMPT_LEASE)


def test_a_submit_claimed_after_the_takeover_keeps_the_attempt_lease() -> None:
    """The acting supervisor's own claim: its submit may be in flight on its own thread."""
    sim = Sim([LOST])
    takeover = Takeover(at=sim.now - S, submit_in_flight=timedelta(0))
    assert kinds_of(sim.tick([])) == ["Submit"]
    sim.later(5)
    assert decide(sim.job, sim.discovery([]), sim.plan, sim.now, takeover=takeover) == []
    sim.later(25)
    assert kinds_of(decide(sim.job, sim.discovery([]), sim.plan, sim.now,
                           takeover=takeover)) == ["RetrySubmit"]


def test_a_cancel_waits_for_a_claimed_submit_only_the_backends_bound() -> None:
    """A cancel with a submit claimed and not bound waits until it cannot land any more:
    after a takeover, the bound from the takeover."""
    sim = Sim([LOST])
    assert kinds_of(sim.tick([])) == ["Submit"]
    sim.later(1)
    sim.inject(ev.CancelRequested, actor="alice")
    takeover = Takeover(at=sim.later(1), submit_in_flight=timedelta(0))
    out = decide(sim.job, sim.discovery([]), sim.plan, sim.now, takeover=takeover)
    assert [d.state for d in out if hasattr(d, "state")] == [State.CANCELLED], out
    assert decide(sim.job, sim.discovery([]), sim.plan, sim.now) == []  # before: 30 s


def test_a_duplicate_stop_recorded_before_the_takeover_is_sent_again_at_once() -> None:
    """Issue 45 item 16 (found by the crash matrix): a supervisor that recorded
    DuplicateStopped and died before stopping the object left the duplicate running for
    ever; the stop is now sent again as a submission's stop is."""
    sim = Sim([LOST])
    _running(sim)
    sim.later(1)
    twin = obj(1, State.RUNNING, ref="r1-twin")
    assert kinds_of(sim.tick([obj(1, State.RUNNING), twin])) == ["StopDuplicate"]
    recorded = sim.now
    look = sim.discovery([obj(1, State.RUNNING), twin])
    takeover = Takeover(at=sim.later(2), submit_in_flight=timedelta(0))
    out = decide(sim.job, look, sim.plan, sim.now, takeover=takeover)
    assert kinds_of(out) == ["StopDuplicate"], out
    # The acting supervisor's own stop waits the resend, and next_due says until when.
    assert decide(sim.job, look, sim.plan, sim.now) == []
    assert next_due(sim.job, look, sim.plan, sim.now) == recorded + RESEND_AFTER
    sim.now = recorded + RESEND_AFTER
    assert kinds_of(decide(sim.job, look, sim.plan, sim.now)) == ["StopDuplicate"]
    # Once the twin has ended nothing is sent.
    ended_twin = sim.discovery([obj(1, State.RUNNING),
                                obj(1, State.CANCELLED, K.CANCELLED, ref="r1-twin")])
    assert decide(sim.job, ended_twin, sim.plan, sim.now, takeover=takeover) == []
