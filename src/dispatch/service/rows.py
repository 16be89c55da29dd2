"""The list's rows and its search: what a list shows of a job (a row carries what the list
shows, never the job's whole status: issue 36) and whether a job answers a search.

A search matches a job whose name contains the text, whose id starts with it, or whose
cause (its kind, the scheduler's words, dispatch's note) or application error (the first
failing rank's exception line) contains it, in any case. Pure functions of a JobView.
"""

from __future__ import annotations

from typing import Any

from dispatch.core.app_error import one_line, short
from dispatch.core.model import Cause, CauseKind
from dispatch.service.views import SCHEDULER_OK, JobView, error_json, recovered_from

# What a row keeps of the words (the job's page has them whole), so that a row stays under
# 600 bytes whatever the words (tests/unit/http/test_list_rows.py): issue 36.
ROW_NAME = 40
ROW_DETAIL = 48  # the scheduler's words
ROW_NOTE = 32  # dispatch's note
ROW_ACTOR = 24
ROW_ERROR = 64  # the application's error
ROW_PROBLEM = 40  # why the scheduler could not be asked


def shown_cause(view: JobView) -> tuple[Cause | None, bool]:
    """The cause a row shows: the job's own, else the last one it recovered from (and
    whether it is that one)."""
    s = view.status
    if s is None:
        return None, False
    if s.cause is not None:
        return s.cause, False
    for t in reversed(s.history):
        if t.cause is not None:
            return t.cause, True
    return None, False


def had_cause(view: JobView, kind: CauseKind) -> bool:
    """Whether a job answers a filter by cause: its shown cause (``shown_cause``) is
    ``kind``, or any transition of its committed history carries it (a success recovered
    from a preemption answers ``preempted``). The stores' causes table (stores/query.py,
    ``JobQuery.cause``) narrows the jobs read to those; this decides on the record."""
    s = view.status
    if s is None:
        return False
    shown, _ = shown_cause(view)
    if shown is not None and shown.kind is kind:
        return True
    return any(t.cause is not None and t.cause.kind is kind for t in s.history)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _row_cause(c: Cause | None) -> dict[str, Any] | None:
    if c is None:
        return None
    doc: dict[str, Any] = {"kind": c.kind.value, "provenance": c.provenance.value}
    if c.exit_code is not None:
        doc["exit_code"] = c.exit_code
    for key, text, width in (("actor", c.actor, ROW_ACTOR), ("detail", c.detail, ROW_DETAIL),
                             ("note", c.note, ROW_NOTE)):
        if text:
            doc[key] = _cut(text, width)
    return doc


def list_row_json(view: JobView) -> dict[str, Any]:
    """One row of the list: id, name, state (settled or not), the shown cause (its words
    cut), the application's error shortened to ROW_ERROR characters (``app_error``, absent
    when none), submissions, creation, backend, and what the scheduler said when it was not
    ``ok`` (``scheduler``, ``scheduler_problem``); ``recovered`` only when true; for a job
that recovered, ``recoveries`` (how many) and ``recovered_from`` (each cause once). A job whose
    record cannot be trusted is its id and the error."""
    s = view.status
    if s is None:
        assert view.error is not None
        return {"job": view.job_id, **error_json(view.error)}
    cause, recovered = shown_cause(view)
    row: dict[str, Any] = {
        "job": s.job, "name": _cut(s.name, ROW_NAME), "state": s.state.value,
        "settled": s.settled, "cause": _row_cause(cause),
        "submissions": s.submissions, "backend": s.backend,
        "created_at": s.created_at.isoformat() if s.created_at else None,
    }
    # what most rows lack is left out, not sent as null
    if s.ended_at is not None:  # when the outcome was committed: the dashboard's ended and
        row["ended_at"] = s.ended_at.isoformat()  # duration columns (times, never ages)
    if recovered:
        row["recovered"] = True
    kinds = recovered_from(s)
    if kinds:  # how many recoveries, and from what (each cause once: a row stays short)
        row["recoveries"] = len(kinds)
        row["recovered_from"] = list(dict.fromkeys(k.value for k in kinds))
    if s.error is not None:
        row["app_error"] = short(s.error, ROW_ERROR)
    if view.scheduler != SCHEDULER_OK:
        row["scheduler"] = view.scheduler
    if view.problem:
        row["scheduler_problem"] = _cut(view.problem, ROW_PROBLEM)
    return row


def answers(view: JobView, text: str, *, job_id: str = "", name: str = "") -> bool:
    """Whether the job answers the search ``text`` (see the module's doc). ``job_id`` and
    ``name`` come from the store's row, for a job whose record cannot be read."""
    needle = text.strip().lower()
    if not needle:
        return True
    s = view.status
    ident = (s.job if s is not None else job_id or view.job_id).lower()
    title = (s.name if s is not None else name).lower()
    if ident.startswith(needle) or needle in title:
        return True
    if s is None:
        return False
    cause, _ = shown_cause(view)
    words = [cause.kind.value, cause.detail, cause.note] if cause is not None else []
    if s.error is not None:
        words += [one_line(s.error), s.error.message]
    return any(needle in w.lower() for w in words if w)


__all__ = ["ROW_ERROR", "answers", "had_cause", "list_row_json", "shown_cause"]
