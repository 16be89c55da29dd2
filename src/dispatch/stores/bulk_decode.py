"""Decoding many stored records at once: the same events and the same refusals as
``base.decode_record`` and ``base.decode_tail``, at less cost per event (issue 49).

Those check each record step by step (its seqs, each event's seq, its 'created' event), a
few Python calls per event: at a server's start that folds 100,000 live jobs, or a /metrics
scrape that reads the 1,000 jobs that ended, the calls cost more than decoding the bytes.
Here one loop per record checks the same things, and a record any check is unsure of is
handed whole to the step-by-step function, which decodes it again and raises its own error:
so a damaged record is refused in the very words it always was, and a whole one gives the
very events (one decoder: core/codec.py ``EVENT_DECODER``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from dispatch.core import events as ev
from dispatch.core.codec import EVENT_DECODER
from dispatch.stores.base import decode_record, decode_tail


def _decoded(stored: Sequence[tuple[Any, bytes | str]], first: int) -> list[ev.Event] | None:
    """The events of ``stored``, whose seqs must run ``first``, ``first + 1``, ... and each
    event say its own seq, with no 'created' event past seq 1; None if anything is amiss."""
    out: list[ev.Event] = []
    want = first
    decode = EVENT_DECODER.decode
    try:
        for seq, body in stored:
            if type(seq) is not int or seq != want:
                return None
            event = decode(body)
            if event.seq != seq or (seq > 1 and isinstance(event, ev.JobCreated)):
                return None
            out.append(event)
            want += 1
    except Exception:  # noqa: BLE001 - the step-by-step decode raises the error
        return None
    return out


def record_events(where: str, job_id: str, version: object,
                  stored: Sequence[tuple[Any, bytes | str]]) -> list[ev.Event]:
    """``base.decode_record``: a job's whole record, checked and decoded."""
    if type(version) is int and version == len(stored) and version > 0:
        events = _decoded(stored, 1)
        if events is not None:
            created = events[0]
            if isinstance(created, ev.JobCreated) and created.job_id == job_id:
                return events
    return decode_record(where, job_id, version, stored)


def tail_events(where: str, job_id: str, after: int, version: object,
                stored: Sequence[tuple[Any, bytes | str]]) -> list[ev.Event]:
    """``base.decode_tail``: a job's events after seq ``after``, checked and decoded."""
    if type(version) is int and version >= after and version - after == len(stored):
        events = _decoded(stored, after + 1)
        if events is not None:
            return events
    return decode_tail(where, job_id, after, version, stored)


__all__ = ["record_events", "tail_events"]
