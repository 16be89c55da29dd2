"""Decoding many stored records at once: the same events and the same refusals as
``base.decode_record`` and ``decode_tail`` (here), at less cost per event (issue 49).

Those check each record step by step (its seqs, each event's seq, its 'created' event), a
few Python calls per event: at a server's start that folds 100,000 live jobs, or a /metrics
scrape that reads the 1,000 jobs that ended, the calls cost more than decoding the bytes.
Here one loop per record checks the same things, and a record any check is unsure of is
handed whole to the step-by-step function, which decodes it again and raises its own error:
so a damaged record is refused in the very words it always was, and a whole one gives the
very events (one decoder: core/codec.py ``EVENT_DECODER``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from dispatch.core import events as ev
from dispatch.core.codec import EVENT_DECODER
from dispatch.stores.base import RecordDamaged, decode_record, decode_stored


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
    """``decode_tail``: a job's events after seq ``after``, checked and decoded. The rows
    may come in any order (SQLite's ``read_after`` asks for none: sorting every row of a
    first look cost about 2 µs a job, and its plan gives each job's rows in seq order)."""
    if type(version) is int and version >= after and version - after == len(stored):
        events = _decoded(stored, after + 1)
        if events is not None:
            return events
    stored = sorted(stored, key=seq_order)  # rows in another order, or a damaged record
    if type(version) is int and version >= after and version - after == len(stored):
        events = _decoded(stored, after + 1)
        if events is not None:
            return events
    return decode_tail(where, job_id, after, version, stored)


_NO_JOB = object()


def tails_in_one_pass(rows: Iterable[Sequence[Any]]) -> tuple[dict[str, list[ev.Event]],
                                                                 set[str]]:
    """``(job_id, after, version, seq, body)`` rows as each job's events after ``after``,
    decoded and checked as ``tail_events`` checks them, in one loop over the rows without
    grouping them first (issue 49: a first look's 400,000 rows at 100,000 live jobs); and
    the jobs it was unsure of (their rows apart, in another order, or anything
    ``tail_events`` might refuse): the caller reads those with ``tail_events``, which
    decodes them again and refuses in its own words. Every job is a key of the first, in
    the order of its first row."""
    out: dict[str, list[ev.Event]] = {}
    unsure: set[str] = set()
    decode = EVENT_DECODER.decode
    created = ev.JobCreated
    key: object = _NO_JOB
    name = ""  # the job of the rows now read, as a key of ``out``
    events: list[ev.Event] | None = None  # None: the job's rows are read the careful way
    want = end = 0
    for job_id, after, version, seq, body in rows:
        if job_id != key:  # a job's first row
            if events is not None and want != end:
                unsure.add(name)
            key = job_id
            name = job_id if type(job_id) is str else str(job_id)
            if name in out:  # its rows apart: read again, all together
                unsure.add(name)
                events = None
                continue
            events = out[name] = []  # its place in the rows' order, whatever is read
            if type(job_id) is not str or type(after) is not int or \
                    type(version) is not int:
                unsure.add(name)
                events = None
                continue
            want, end = after + 1, version + 1
        elif events is None:
            continue
        if seq is None:  # no event after ``after`` (the query's outer join)
            continue
        try:
            if type(seq) is not int or seq != want:
                raise ValueError
            event = decode(body)
            if event.seq != seq or (seq > 1 and isinstance(event, created)):
                raise ValueError
        except Exception:  # noqa: BLE001 - tail_events says what is wrong
            unsure.add(name)
            events = None
            continue
        events.append(event)
        want += 1
    if events is not None and want != end:
        unsure.add(name)
    return out, unsure


def seq_order(row: tuple[Any, bytes | str]) -> tuple[bool, int, str]:
    """Seqs in order; anything that is not one after them, in its words' order (a damaged
    record: refused by decode_tail, whatever the order)."""
    seq = row[0]
    return (False, seq, "") if type(seq) is int else (True, 0, repr(seq))


def decode_tail(where: str, job_id: str, after: int, version: object,
                stored: Sequence[tuple[Any, bytes | str]]) -> list[ev.Event]:
    """A job's stored events after seq ``after``, checked whole (after+1 .. the job's
    version, no gap) and decoded. RecordDamaged when the job's version is below ``after``
    (the reader's state is ahead of the store: it must read the whole record again)."""
    if isinstance(version, bool) or not isinstance(version, int):
        raise RecordDamaged(where, job_id, None, f"the job's version is {version!r}, "
                            "not an integer")
    if version < after:
        raise RecordDamaged(where, job_id, None, f"the job's version is {version}, behind "
                            f"seq {after} that was read before")
    seqs = [s for s, _ in stored]
    if seqs != list(range(after + 1, version + 1)):
        raise RecordDamaged(where, job_id, after + 1, f"the events after seq {after} are "
                            f"seqs {seqs[:5]}, not {after + 1}..{version}")
    return [decode_stored(where, body, job_id, seq) for seq, body in stored]


__all__ = ["decode_tail", "record_events", "seq_order", "tail_events", "tails_in_one_pass"]
