"""The list's rows and its search: what a list shows of a job (a row carries what the list
shows, never the job's whole status: issue 36) and whether a job answers a search.

A search matches a job whose name contains the text, whose id starts with it, or whose
cause (its kind, the scheduler's words, dispatch's note) or application error (the first
failing rank's exception line) contains it, in any case. Pure functions of a JobView.
"""

from __future__ import annotations

from typing import Any

from dispatch.core.app_error import one_line, short
from dispatch.core.model import Cause
from dispatch.service.views import JobView, error_json

ROW_WORDS = 160  # a cause's detail and note, cut for the row (the job's page has them whole)
ROW_ERROR = 100  # the application's error, shortened for the row


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


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _row_cause(c: Cause | None) -> dict[str, Any] | None:
    if c is None:
        return None
    doc: dict[str, Any] = {"kind": c.kind.value, "provenance": c.provenance.value}
    for key, value in (("actor", c.actor), ("exit_code", c.exit_code)):
        if value is not None and value != "":
            doc[key] = value
    for key, text in (("detail", c.detail), ("note", c.note)):
        if text:
            doc[key] = _cut(text, ROW_WORDS)
    if c.at is not None:
        doc["at"] = c.at.isoformat()
    return doc


def list_row_json(view: JobView) -> dict[str, Any]:
    """One row of the list: id, name, state (settled or not), the shown cause (its words cut
    to ROW_WORDS), the application's error shortened to ROW_ERROR characters, submissions,
    creation, backend and what the scheduler said. A job whose record cannot be trusted is
    its id and the error."""
    s = view.status
    if s is None:
        assert view.error is not None
        return {"job": view.job_id, **error_json(view.error)}
    cause, recovered = shown_cause(view)
    row: dict[str, Any] = {
        "job": s.job, "name": s.name, "state": s.state.value, "settled": s.settled,
        "cause": _row_cause(cause), "recovered": recovered,
        "app_error": short(s.error, ROW_ERROR) if s.error is not None else None,
        "submissions": s.submissions, "backend": s.backend,
        "created_at": s.created_at.isoformat() if s.created_at else None,
        "scheduler": view.scheduler,
    }
    if view.problem:
        row["scheduler_problem"] = _cut(view.problem, ROW_WORDS)
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


__all__ = ["ROW_ERROR", "ROW_WORDS", "answers", "list_row_json", "shown_cause"]
