"""The dashboard's timeline, a pure function of a job's events (table-style cases)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import msgspec

from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind, Provenance, State
from dispatch.core.policy import Action, Declarations, RecoveryPolicy, Rule
from dispatch.core.spec import JobSpec
from dispatch.http.timeline import timeline_json

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(s: int) -> datetime:
    return T0 + timedelta(seconds=s)


def created(policy: RecoveryPolicy | None = None) -> ev.JobCreated:
    return ev.JobCreated(seq=1, at=at(0), job_id="j", spec=JobSpec(
        name="n", command=("x",), policy=policy or RecoveryPolicy()),
        declarations=Declarations(backend="local"))


LOST = Cause(kind=CauseKind.NODE_LOST, detail="n2 DOWN reason=gone", at=at(20))
PRE = Cause(kind=CauseKind.PREEMPTED, detail="PREEMPTED", at=at(28))
OK = Cause(kind=CauseKind.NONE, provenance=Provenance.APPLICATION, exit_code=0, at=at(50))


def test_a_fenced_submission_then_a_recovered_one_then_success() -> None:
    events = [
        created(RecoveryPolicy(rules=(Rule(on=(CauseKind.NODE_LOST, CauseKind.PREEMPTED),
                                           action=Action.RESUBMIT, budget=3),))),
        ev.SubmissionIntended(seq=2, at=at(1), submission=1, token="j.1"),
        ev.SubmissionBound(seq=3, at=at(2), submission=1, ref="r1"),
        ev.ExecutionStarted(seq=3, at=at(3), submission=1, execution=0),
        ev.StopRequested(seq=4, at=at(25), submission=1, ref="r1", cause=LOST),
        ev.ExecutionEnded(seq=5, at=at(30), submission=1, ref="r1", execution=0, cause=PRE),
        ev.RecoveryStarted(seq=6, at=at(30), rule=0, action=Action.RESUBMIT, cause=LOST),
        ev.SubmissionIntended(seq=7, at=at(31), submission=2, token="j.2", gated=True,
                              cause=LOST),
        ev.SubmissionBound(seq=8, at=at(32), submission=2, ref="r2"),
        ev.GateOpened(seq=9, at=at(33), submission=2, ref="r2"),
        ev.ExecutionStarted(seq=9, at=at(34), submission=2, execution=0),
        ev.ExecutionEnded(seq=10, at=at(50), submission=2, ref="r2", execution=0, cause=OK),
        ev.OutcomeCommitted(seq=11, at=at(51), state=State.SUCCEEDED, cause=OK),
    ]
    events = [msgspec.structs.replace(e, seq=i + 1) for i, e in enumerate(events)]
    tl = timeline_json(events, at(99))
    assert tl["start"] == at(0).isoformat() and tl["end"] == at(51).isoformat()
    one, two = tl["submissions"]
    assert one["stop"]["cause"]["kind"] == "node-lost"
    assert one["stop"]["cause"]["detail"] == "n2 DOWN reason=gone"
    assert one["executions"] == [{"index": 0, "start": at(2).isoformat(),
                                  "end": at(30).isoformat(), "cause": one["end_cause"],
                                  "final": True}]
    assert one["end_cause"]["kind"] == "preempted"
    assert two["recovered_from"]["kind"] == "node-lost" and two["gated"]
    assert two["gate_opened_at"] == at(33).isoformat()
    assert two["executions"][0]["cause"]["kind"] == "none"
    assert [m["kind"] for m in tl["marks"]] == ["recovery"]
    # the rule by its name (what it covers and does), not by its index
    assert tl["marks"][0]["text"] == "resubmit by rule node-lost, preempted (resubmit)"
    assert tl["outcome"]["state"] == "succeeded"
    # the goodput split's phases (one computation for both: issue 36): queued until the
    # first run (0-3), running 3-28 (the scheduler's end time) and 34-50, recovering 28-34,
    # settling 50-51 (the run is over, the outcome not yet committed: issue 48)
    assert tl["durations"] == {"queued": 3.0, "running": 41.0, "recovering": 6.0,
                               "held": 0.0, "stopping": 0.0, "settling": 1.0,
                               "total": 51.0}
    assert tl["durations"] == tl["goodput"]["durations"]
    parts = {(p["phase"], p["cause"]): p["seconds"] for p in tl["goodput"]["split"]["parts"]}
    for phase in ("queued", "running", "recovering", "held", "stopping", "settling"):
        assert tl["durations"][phase] == sum(v for (p, _), v in parts.items() if p == phase)


def test_a_running_requeued_object_and_a_hold_drawn_up_to_now() -> None:
    held = Cause(kind=CauseKind.UNKNOWN, detail="signal 11")
    events = [
        created(),
        ev.SubmissionIntended(seq=2, at=at(1), submission=1, token="j.1"),
        ev.SubmissionBound(seq=3, at=at(2), submission=1, ref="r1"),
        ev.ExecutionEnded(seq=4, at=at(10), submission=1, ref="r1", execution=0, cause=PRE,
                          final=False),
        ev.HoldPlaced(seq=5, at=at(12), cause=held),
        ev.HoldReleased(seq=6, at=at(15), actor="ann", resubmit=True),
        ev.EscalationRaised(seq=7, at=at(16), message="look at it", cause=held),
        ev.CancelRequested(seq=8, at=at(17), actor="bob"),
    ]
    tl = timeline_json(events, at(20))
    (sub,) = tl["submissions"]
    assert [(x["start"], x["end"], x["final"]) for x in sub["executions"]] == [
        (at(2).isoformat(), at(10).isoformat(), False), (at(10).isoformat(), None, False)]
    assert tl["holds"] == [{"start": at(12).isoformat(), "end": at(15).isoformat(),
                            "cause": {"kind": "unknown", "provenance": "scheduler",
                                      "actor": None, "detail": "signal 11", "note": "",
                                      "exit_code": None, "at": None},
                            "recovery": True, "released_by": "ann", "resubmit": True}]
    assert [m["kind"] for m in tl["marks"]] == ["escalation", "cancel"]
    assert tl["escalations"][0]["message"] == "look at it"
    assert tl["end"] == at(20).isoformat() and tl["outcome"] is None
