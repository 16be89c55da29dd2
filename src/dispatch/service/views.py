"""The JSON shapes every front end prints (CLI ``--json``, the HTTP API): one place, so the
shapes cannot drift between them. Pure functions of the service's results."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from dispatch.core import events as ev
from dispatch.core.app_error import error_json as app_error_json
from dispatch.core.codec import cause_json, to_builtins
from dispatch.core.model import Cause, CauseKind, SchedulerUnreachable, State, Status
from dispatch.core.spec import JobSpec
from dispatch.errors import BackendError, DispatchError

# What a view says about the scheduler it came from.
SCHEDULER_OK = "ok"
SCHEDULER_UNREACHABLE = "unreachable"
SCHEDULER_UNUSABLE = "unusable"
SCHEDULER_NOT_ASKED = "not asked"


@dataclass(frozen=True, slots=True)
class JobView:
    """A job's Status plus what the scheduler behind it said when it was asked: ``ok``,
    ``unreachable`` (it could not be asked: the state comes from the record alone),
    ``unusable`` (the backend cannot be configured here) or ``not asked``; ``problem`` says
    why in the scheduler's or the backend's words. A job whose record cannot be trusted has
    no status, only ``error``."""

    status: Status | None
    scheduler: str = SCHEDULER_OK
    problem: str = ""
    job_id: str = ""
    error: DispatchError | None = None

    @classmethod
    def broken(cls, job_id: str, error: DispatchError) -> JobView:
        return cls(None, SCHEDULER_NOT_ASKED, str(error), job_id=job_id, error=error)

    @property
    def job(self) -> str:
        return self.status.job if self.status is not None else self.job_id

    def checked(self) -> Status:
        """The status, or the error that kept it from being whole: a record that cannot be
        trusted, or a scheduler that could not be asked (never a state)."""
        if self.error is not None:
            raise self.error
        assert self.status is not None
        if self.scheduler == SCHEDULER_UNREACHABLE:
            raise SchedulerUnreachable(self.status.backend, self.problem)
        if self.scheduler == SCHEDULER_UNUSABLE:
            raise BackendError(f"backend {self.status.backend}: {self.problem}")
        return self.status


def cause_text(c: Cause | None) -> str:
    """A cause in a few words: ``preempted``, ``non-zero-exit (exit 3)``, ``... by ann``."""
    if c is None:
        return "-"
    text = c.kind.value
    if c.exit_code is not None:
        text += f" (exit {c.exit_code})"
    if c.actor:
        text += f" by {c.actor}"
    return text


def recovered_from(s: Status) -> list[CauseKind]:
    """What each of the job's recoveries recovered from, in order: a recovery's own cause;
    for a hold a person released, the hold's cause (the release is how, not why)."""
    found: list[CauseKind] = []
    held: Cause | None = None
    for t in s.history:
        if t.state is State.HELD:
            held = t.cause
        elif t.state is State.RECOVERING and t.cause is not None:
            why = held if t.cause.kind is CauseKind.RELEASED and held is not None else t.cause
            found.append(why.kind)
            held = None
    return found


def recovery_text(s: Status) -> str:
    """``after 1 recovery: preempted``, ``after 3 recoveries: preempted, node-lost`` (each
    cause once, in the order first met); "" for a job that never recovered."""
    kinds = recovered_from(s)
    if not kinds:
        return ""
    n = len(kinds)
    return (f"after {n} recover{'y' if n == 1 else 'ies'}: "
            + ", ".join(dict.fromkeys(k.value for k in kinds)))


def status_json(view: JobView) -> dict[str, Any]:
    s = view.status
    if s is None:
        assert view.error is not None
        return {"job": view.job_id, **error_json(view.error)}
    return {
        "job": s.job, "name": s.name, "state": s.state.value, "cause": cause_json(s.cause),
        # The application's own error (the third voice); not "error", which every front end
        # uses for a refused request or an unusable record.
        "application_error": app_error_json(s.error),
        "level": s.level.value, "settled": s.settled, "backend": s.backend,
        "scope": s.scope or s.backend,
        "forecast": ({"state": s.forecast.state.value, "cause": cause_json(s.forecast.cause)}
                     if s.forecast is not None else None),
        "history": [{"at": t.at.isoformat(), "state": t.state.value,
                     "cause": cause_json(t.cause), "seq": t.seq, "note": t.note}
                    for t in s.history],
        "escalations": [{"at": x.at.isoformat(), "message": x.message,
                         "cause": cause_json(x.cause), "seq": x.seq} for x in s.escalations],
        "supersedes": s.supersedes, "superseded_by": s.superseded_by,
        "submissions": s.submissions, "budget_used": s.budget_used, "objects": list(s.objects),
        # one per recovery, in order: a recovered success is found and shown as one
        "recovered_from": [k.value for k in recovered_from(s)],
        "created_at": s.created_at.isoformat() if s.created_at else None,
        "ended_at": s.ended_at.isoformat() if s.ended_at else None,
        "segments": list(s.segments),
        "scheduler": view.scheduler,
        "scheduler_problem": view.problem or None,
    }


# What every front end shows in place of an env value: the names are shown, never the values
# (a secret in a spec's env would otherwise reach every reader of the API or a CI log).
HIDDEN = "<hidden>"


def event_json(e: ev.Event) -> dict[str, Any]:
    """An event as JSON for a front end: the spec's env values hidden, its names kept. The
    spec is shown whole, every key with its value (the record omits those at their
    default)."""
    doc: dict[str, Any] = to_builtins(e)
    if isinstance(whole := getattr(e, "spec", None), JobSpec):
        doc["spec"] = to_builtins(msgspec.structs.asdict(whole))
    spec = doc.get("spec")
    if isinstance(spec, dict) and isinstance(spec.get("env"), dict):
        doc["spec"] = {**spec, "env": dict.fromkeys(spec["env"], HIDDEN)}
    return doc


def history_json(lines: Sequence[tuple[ev.Event, str]]) -> list[dict[str, Any]]:
    return [{"seq": e.seq, "at": e.at.isoformat(), "type": type(e).__name__,
             "event": event_json(e), "text": text} for e, text in lines]


def error_json(err: DispatchError, message: str | None = None) -> dict[str, Any]:
    """``{"error": {"code", "exit_code", "message"}}``: what every front end prints for a
    refused request."""
    return {"error": {"code": err.error_code, "exit_code": err.exit_code,
                      "message": message if message is not None else str(err)}}
