"""The list's rows and its search (service/rows.py): pure functions of a JobView."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import msgspec

from dispatch.core.app_error import AppError, ErrorSource
from dispatch.core.model import Cause, CauseKind, Level, State, Status, Transition
from dispatch.service.rows import ROW_ERROR, answers, list_row_json, shown_cause
from dispatch.service.views import JobView
from dispatch.stores.base import RecordDamaged

T0 = datetime(2026, 12, 3, tzinfo=UTC)
NAN = AppError(source=ErrorSource.OUTPUT_TAIL, message="FloatingPointError: loss is NaN",
               rank=1, node="node1", traceback_tail="Traceback ...\n" * 200)


def view(**fields: object) -> JobView:
    base: dict[str, object] = {"job": "3b8ea6a9a2", "name": "training-nan",
                               "state": State.FAILED, "level": Level.FULL, "settled": True,
                               "cause": Cause(kind=CauseKind.NON_ZERO_EXIT, exit_code=1,
                                              detail="node1 exited 1"),
                               "error": NAN, "backend": "local", "created_at": T0}
    base.update(fields)
    return JobView(Status(**base))  # type: ignore[arg-type]


def test_search_reads_names_ids_causes_and_errors_in_any_case() -> None:
    v = view()
    for text in ("training", "NAN", "3b8e", "non-zero-exit", "node1 exited",
                 "floatingpointerror", "loss is nan"):
        assert answers(v, text), text
    for text in ("8ea6", "out-of-memory", "Traceback", "nothing"):  # an id only by prefix
        assert not answers(v, text), text
    assert answers(v, "  ")  # an empty search keeps every job


def test_a_recovered_job_is_found_by_the_cause_it_recovered_from() -> None:
    v = view(state=State.SUCCEEDED, cause=None, error=None, history=(
        Transition(at=T0, state=State.RECOVERING, cause=Cause(kind=CauseKind.PREEMPTED)),
        Transition(at=T0, state=State.SUCCEEDED)))
    cause, recovered = shown_cause(v)
    assert cause is not None and cause.kind is CauseKind.PREEMPTED and recovered
    assert answers(v, "preempted")
    row = list_row_json(v)
    assert row["cause"]["kind"] == "preempted" and row["recovered"] is True
    assert "app_error" not in row  # what a row lacks is left out


def test_a_row_is_light_whatever_the_words() -> None:
    huge = "x" * 5000
    v = view(name="n" * 100, cause=Cause(kind=CauseKind.UNKNOWN, detail=huge, note=huge,
                                         actor="a" * 100, exit_code=137),
             error=AppError(source=ErrorSource.OUTPUT_TAIL, message=huge, traceback_tail=huge))
    v = JobView(v.status, scheduler="unreachable", problem=huge)  # every optional key
    row = list_row_json(v)
    # as serve sends it (Starlette: UTF-8, not ASCII escapes)
    assert len(json.dumps(row, ensure_ascii=False).encode()) <= 600
    assert len(row["app_error"]) == ROW_ERROR and row["app_error"].endswith("…")
    assert "traceback_tail" not in json.dumps(row) and "history" not in row
    assert answers(v, huge[:50])  # the search reads the whole words, not the cut ones
    # a finished job's row says when it ended; a finished job's scheduler is never asked
    assert v.status is not None
    done = JobView(msgspec.structs.replace(v.status, ended_at=T0))
    row = list_row_json(done)
    assert row["ended_at"] == T0.isoformat() and "scheduler" not in row
    assert len(json.dumps(row, ensure_ascii=False).encode()) <= 600
    assert "ended_at" not in list_row_json(v)  # unfinished: left out, as what most rows lack


def test_a_job_whose_record_cannot_be_used_is_its_id_and_error() -> None:
    err = RecordDamaged("store", "bad1", 3, "seq 3 is missing")
    v = JobView.broken("bad1", err)
    row = list_row_json(v)
    assert row["job"] == "bad1" and "seq 3 is missing" in row["error"]["message"]
    assert answers(v, "bad", job_id="bad1") and answers(v, "sweep", name="sweep-1")
    assert not answers(v, "seq 3")
