"""A job's running execution read from its record (core/story.running): `dispatch status`
shows it with the goodput line, and its JSON (``running``) is the same for the CLI and the
HTTP API. Only the record is read; no scheduler."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dispatch.core.story import Running, running
from dispatch.stores.base import RecordStore
from dispatch.stores.reading import fold_with_records


def running_and_goodput(store: RecordStore, job_id: str, now: datetime
                        ) -> tuple[Running | None, str] | None:
    """From one read of the job's record: its running execution (None when none runs) and
    its G4 goodput line; None when the record cannot be read or trusted."""
    from dispatch.core.goodput import job_time, split
    from dispatch.service.goodput import goodput_line

    found, _ = fold_with_records(store, [job_id], now)
    if not found:
        return None
    events = found[0][1]
    return running(events), goodput_line(split(job_time(events, now)))


def running_of(store: RecordStore, job_id: str, now: datetime) -> Running | None:
    """The job's running execution alone (the HTTP API's status), from its record."""
    found, _ = fold_with_records(store, [job_id], now)
    return running(found[0][1]) if found else None


def running_json(r: Running | None) -> dict[str, Any] | None:
    """``running`` in a status document: times, never ages (the same record gives the same
    document, whenever it is read)."""
    if r is None:
        return None
    ckpt = None if r.checkpoint_step is None or r.checkpoint_written is None else {
        "step": r.checkpoint_step, "written": r.checkpoint_written.isoformat()}
    return {"submission": r.submission, "execution": r.execution,
            "started": r.started.isoformat(), "checkpoint": ckpt}
