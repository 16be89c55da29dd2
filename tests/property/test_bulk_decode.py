"""Issue 49: stores/bulk_decode.py reads a record in one loop where base.decode_record and
bulk_decode.decode_tail take it step by step. Over drawn records, whole or damaged as a store
can hold them (a seq missing, repeated, out of order or not an integer; a body that is not an
event, or says another seq; seq 1 another job's or not a 'created' event; a second
'created'; the job's version off or not an integer), both give the very same events, or
the same error in the same words."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.strategies import records

from dispatch.core import events as ev
from dispatch.core.codec import encode_event
from dispatch.stores.base import decode_record
from dispatch.stores.bulk_decode import decode_tail, record_events, seq_order, tail_events

WHERE = "the test store"
Stored = list[tuple[Any, Any]]


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    try:
        return "events", fn(*args)
    except Exception as err:  # noqa: BLE001 - the error is what is compared
        return type(err).__name__, str(err)


@st.composite
def damaged(draw: st.DrawFn) -> tuple[str, Stored, Any]:
    """(job id asked for, stored (seq, body) rows, the job's version)."""
    record = draw(records(job_id="j1", max_events=6))
    stored: Stored = [(e.seq, encode_event(e)) for e in record]
    version: Any = len(stored)
    job_id = "j1"
    for _ in range(draw(st.integers(0, 2))):
        how = draw(st.sampled_from(["none", "drop", "repeat", "swap", "seq-text", "seq-bool",
                                    "garbage", "says-other-seq", "other-job", "second-created",
                                    "not-created-first", "version", "version-text",
                                    "version-bool", "str-body"]))
        i = draw(st.integers(0, len(stored) - 1)) if stored else 0
        if not stored or how == "none":
            continue
        seq, body = stored[i]
        # an earlier damage may have left a text body: these edits work on bytes
        raw = body if isinstance(body, bytes) else body.encode()
        if how == "drop":
            del stored[i]
        elif how == "repeat":
            stored.insert(i, stored[i])
        elif how == "swap" and i + 1 < len(stored):
            stored[i], stored[i + 1] = stored[i + 1], stored[i]
        elif how == "seq-text":
            stored[i] = (str(seq), body)
        elif how == "seq-bool":
            stored[i] = (True, body)
        elif how == "garbage":
            stored[i] = (seq, b'{"type":"no-such-event","seq":' + str(seq).encode() + b"}")
        elif how == "says-other-seq" and type(seq) is int:  # (an earlier damage may have
            # made the seq text or a bool: then this damage is not drawn)
            stored[i] = (seq, raw.replace(b'"seq":' + str(seq).encode(),
                                           b'"seq":' + str(seq + 7).encode()))
        elif how == "other-job":
            job_id = "j2"
        elif how == "second-created":
            created = record[0]
            assert isinstance(created, ev.JobCreated)
            stored[i] = (seq, encode_event(_created_at(created, seq)))
        elif how == "not-created-first" and len(stored) > 1:
            second = stored[1][1]
            second = second if isinstance(second, bytes) else second.encode()
            stored[0] = (1, second.replace(b'"seq":2', b'"seq":1'))
        elif how == "version":
            version = draw(st.integers(0, len(stored) + 2))
        elif how == "version-text":
            version = str(version)
        elif how == "version-bool":
            version = True
        elif how == "str-body":
            stored[i] = (seq, raw.decode())
    return job_id, stored, version


def _created_at(created: ev.JobCreated, seq: int) -> ev.JobCreated:
    import msgspec

    return msgspec.structs.replace(created, seq=seq)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=damaged())
def test_a_whole_record_reads_as_the_step_by_step_read(case: tuple[str, Stored, Any]) -> None:
    job_id, stored, version = case
    assert outcome(record_events, WHERE, job_id, version, stored) == outcome(
        decode_record, WHERE, job_id, version, stored)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=damaged(), cut=st.integers(0, 8))
def test_a_tail_reads_as_the_step_by_step_read(case: tuple[str, Stored, Any],
                                               cut: int) -> None:
    job_id, stored, version = case
    after = min(cut, len(stored))
    tail = stored[after:]
    # A tail's rows may come in any order (SQLite's read_after asks for none): read as the
    # step-by-step read of the same rows in seq order.
    assert outcome(tail_events, WHERE, job_id, after, version, tail) == outcome(
        decode_tail, WHERE, job_id, after, version, sorted(tail, key=seq_order))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record=records(job_id="j1", max_events=8), cut=st.integers(0, 8), data=st.data())
def test_a_tail_in_any_row_order_reads_as_in_seq_order(record: list[ev.Event], cut: int,
                                                      data: st.DataObject) -> None:
    stored: Stored = [(e.seq, encode_event(e)) for e in record]
    after = min(cut, len(stored))
    rows = data.draw(st.permutations(stored[after:]))
    assert tail_events(WHERE, "j1", after, len(stored), rows) == list(record[after:])


def grouped_then_each(rows: list[tuple[Any, ...]], versions: dict[str, int]) -> Any:
    """decode_tails as it was before its one pass: the rows grouped by job (in the order of
    each job's first row), then each job's tail read by tail_events."""
    from dispatch.stores.base import JobNotFound

    by_job: dict[str, tuple[int, Any, Stored]] = {}
    for job_id, after, version, seq, body in rows:
        entry = by_job.setdefault(str(job_id), (int(after), version, []))
        if seq is not None:
            entry[2].append((seq, body))
    missing = [j for j in versions if j not in by_job]
    if missing:
        raise JobNotFound(missing)
    return {j: tail_events(WHERE, j, a, v, s) for j, (a, v, s) in by_job.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases=st.lists(st.tuples(damaged(), st.integers(0, 8)), min_size=1, max_size=4),
       data=st.data())
def test_many_tails_in_one_pass_read_as_each_tail_alone(
        cases: list[tuple[tuple[str, Stored, Any], int]], data: st.DataObject) -> None:
    """decode_tails reads the rows of many jobs in one pass: the same events, in the same
    order, or the same first refusal, as grouping them and reading each job's tail alone.
    The rows come grouped by job, as the stores' queries give them, or in any order."""
    from dispatch.stores.changes import decode_tails

    rows: list[tuple[Any, ...]] = []
    versions: dict[str, int] = {}
    for n, ((_, stored, version), cut) in enumerate(cases):
        job_id = f"j{n}"
        after = min(cut, len(stored))
        versions[job_id] = after
        tail = stored[after:] or [(None, None)]  # the outer join's row for no event
        rows.extend((job_id, after, version, seq, body) for seq, body in tail)
    if data.draw(st.booleans()):
        rows = data.draw(st.permutations(rows))
    if data.draw(st.booleans()):
        versions[f"j{len(cases)}"] = 0  # a job the store does not hold
    assert outcome(decode_tails, WHERE, rows, versions) == outcome(
        grouped_then_each, rows, versions)
