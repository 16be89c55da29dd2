"""A job's timeline for the dashboard: its submissions and their executions as intervals,
each ending with its cause, the fence (a stop asked for on a lost node), holds, recoveries,
person requests and escalations. Pure: a function of the job's committed events and ``now``.

The record knows when a submission was intended and bound to a scheduler object, and when
each execution's end was recorded (the scheduler's own end time, when it gave one, is the
cause's ``at``); an execution is drawn from the previous boundary to its recorded end.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from dispatch.core import events as ev
from dispatch.core.codec import cause_json
from dispatch.core.goodput import job_time
from dispatch.core.model import Cause
from dispatch.core.policy import Rule, rule_name
from dispatch.service.goodput import job_goodput_json


def _t(at: datetime | None) -> str | None:
    return at.isoformat() if at is not None else None


def _cause(c: Cause | None) -> dict[str, Any] | None:
    return cause_json(c) if c is not None else None


def timeline_json(events: Sequence[ev.Event], now: datetime) -> dict[str, Any]:  # noqa: C901
    """The timeline of one job's record (``events`` ordered by seq)."""
    subs: dict[int, dict[str, Any]] = {}
    holds: list[dict[str, Any]] = []
    marks: list[dict[str, Any]] = []  # points on the axis: recoveries, requests, escalations
    escalations: list[dict[str, Any]] = []
    outcome: dict[str, Any] | None = None
    created: datetime | None = None
    rules: tuple[Rule, ...] = ()
    for e in events:
        if isinstance(e, ev.JobCreated):
            created = e.at
            rules = e.spec.policy.rules
        elif isinstance(e, ev.SubmissionIntended):
            subs[e.submission] = {
                "number": e.submission, "token": e.token, "ref": None, "gated": e.gated,
                "intended_at": _t(e.at), "bound_at": None, "gate_opened_at": None,
                "recovered_from": _cause(e.cause), "executions": [], "end": None,
                "end_cause": None, "stop": None, "cancel_sent_at": None, "rejected": False,
            }
        elif isinstance(e, ev.SubmissionBound) and e.submission in subs:
            subs[e.submission].update(ref=e.ref, bound_at=_t(e.at))
        elif isinstance(e, ev.SubmissionRejected) and e.submission in subs:
            subs[e.submission].update(end=_t(e.at), end_cause=_cause(e.cause), rejected=True)
        elif isinstance(e, ev.ExecutionEnded) and e.submission in subs:
            s = subs[e.submission]
            start = s["executions"][-1]["end"] if s["executions"] else (
                s["bound_at"] or s["intended_at"])
            s["executions"].append({"index": e.execution, "start": start, "end": _t(e.at),
                                    "cause": _cause(e.cause), "final": e.final})
            if e.final:
                s.update(end=_t(e.at), end_cause=_cause(e.cause))
        elif isinstance(e, ev.GateOpened) and e.submission in subs:
            subs[e.submission]["gate_opened_at"] = _t(e.at)
        elif isinstance(e, ev.StopRequested) and e.submission in subs:
            if subs[e.submission]["stop"] is None:
                subs[e.submission]["stop"] = {"at": _t(e.at), "cause": _cause(e.cause)}
        elif isinstance(e, ev.CancelSent):
            for s in subs.values():
                if s["ref"] == e.ref:
                    s["cancel_sent_at"] = _t(e.at)
        elif isinstance(e, ev.HoldPlaced):
            holds.append({"start": _t(e.at), "end": None, "cause": _cause(e.cause),
                          "recovery": e.recovery, "released_by": None, "resubmit": None})
        elif isinstance(e, ev.HoldReleased) and holds and holds[-1]["end"] is None:
            holds[-1].update(end=_t(e.at), released_by=e.actor, resubmit=e.resubmit)
        elif isinstance(e, ev.RecoveryStarted):
            marks.append({"at": _t(e.at), "kind": "recovery", "cause": _cause(e.cause),
                          "text": f"{e.action.value} by rule {rule_name(rules, e.rule)}"
                                  + (" (native)" if e.native else "")})
        elif isinstance(e, (ev.CancelRequested, ev.GiveUpRequested)):
            what = "cancel" if isinstance(e, ev.CancelRequested) else "give-up"
            marks.append({"at": _t(e.at), "kind": what, "cause": None,
                          "text": f"{what} requested by {e.actor or 'someone'}"})
        elif isinstance(e, ev.EscalationRaised):
            item = {"at": _t(e.at), "message": e.message, "cause": _cause(e.cause)}
            escalations.append(item)
            marks.append({"at": item["at"], "kind": "escalation", "cause": item["cause"],
                          "text": e.message})
        elif isinstance(e, ev.OutcomeCommitted) and outcome is None:
            outcome = {"at": _t(e.at), "state": e.state.value, "cause": _cause(e.cause)}
    end = outcome["at"] if outcome is not None else now.isoformat()
    if outcome is None:  # what still runs is drawn up to now
        for s in subs.values():
            if s["end"] is None and s["ref"] is not None:
                start = s["executions"][-1]["end"] if s["executions"] else s["bound_at"]
                s["executions"].append({"index": len(s["executions"]), "start": start,
                                        "end": None, "cause": None, "final": False})
    doc: dict[str, Any] = {
        "start": _t(created), "end": end, "now": now.isoformat(),
        "submissions": [subs[n] for n in sorted(subs)], "holds": holds, "marks": marks,
        "escalations": escalations, "outcome": outcome,
    }
    if events and isinstance(events[0], ev.JobCreated):
        # G1-G4: the exact split, its pieces and the lost work (service/goodput.py); the
        # page's durations are the same split's phases (one computation: issue 36).
        goodput = job_goodput_json(job_time(events, now))
        doc["goodput"] = goodput
        doc["durations"] = goodput["durations"]
    return doc
