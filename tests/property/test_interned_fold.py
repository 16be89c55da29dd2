"""Issue 49: a folded job keeps one copy of the equal immutable values many jobs share
(core/interned.py). The same values, so the same job: for any record, the fold with
interning equals, and encodes to the same bytes as, the fold that keeps each record's own
objects, whole or folded on from any split point."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies import records

from dispatch.core import events as ev
from dispatch.core import interned as interning
from dispatch.core import record as record_module
from dispatch.core.codec import EVENT_DECODER, encode_event
from dispatch.core.policy import Declarations
from dispatch.core.record import Job, RecordError, advance, fold
from dispatch.core.spec import JobSpec

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def decoded(record: list[Any]) -> list[Any]:
    """As a store gives it: each event decoded from its stored bytes (its own objects)."""
    return [EVENT_DECODER.decode(encode_event(e)) for e in record]


def folded(record: list[Any], split: int | None = None) -> Job | None:
    try:
        if split is None:
            return fold(record, NOW)
        return advance(fold(record[:split], NOW), record[split:])
    except RecordError:
        return None


@settings(max_examples=200, deadline=None)
@given(record=records(max_events=20), data=st.data())
def test_interning_changes_no_folded_job(record: list[Any], data: st.DataObject) -> None:
    record = decoded(record)
    split = data.draw(st.integers(min_value=1, max_value=len(record)), label="split")
    kept = (folded(record), folded(record, split))
    with pytest.MonkeyPatch.context() as mp:  # each record's own objects, as before
        mp.setattr(record_module, "interned", lambda value, kind=None: value)
        mp.setattr(record_module, "EMPTY", frozenset())
        own = (folded(decoded(record)), folded(decoded(record), split))
    assert kept == own
    # Byte for byte once sets are sorted (a set's order is not part of any answer: equal
    # sets built in another order iterate in another order, as across processes).
    assert ([msgspec.json.encode(j, order="sorted") for j in kept]
            == [msgspec.json.encode(j, order="sorted") for j in own])


def created(i: int) -> ev.JobCreated:
    return ev.JobCreated(seq=1, at=NOW + timedelta(seconds=i), job_id=f"j{i}",
                         spec=JobSpec(name=f"n{i}", command=("true",), backend="local"),
                         declarations=Declarations(backend="local"))


def test_jobs_keep_one_copy_of_what_they_share() -> None:
    holder = ev.Holder(host="h", boot_id="b", pid=7, start_ticks=9)
    jobs = []
    for i in range(2):
        at = NOW + timedelta(minutes=1)
        jobs.append(fold(decoded([
            created(i),
            ev.SubmissionIntended(seq=2, at=at, submission=1, token=f"j{i}.1", holder=holder),
            ev.ExecutionStarted(seq=3, at=at, submission=1, execution=0, started=at)]), NOW))
    a, b = jobs
    assert a.declarations == Declarations(backend="local")
    assert a.declarations is b.declarations
    assert a.submissions[0].holders is b.submissions[0].holders
    assert a.submissions[0].holders == (holder,)
    assert a.submissions[0].executions_started is b.submissions[0].executions_started
    assert a.duplicates_stopped is b.duplicates_stopped == frozenset()


def test_the_table_stays_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interning, "LIMIT", 3)
    monkeypatch.setattr(interning, "_kept", {})
    monkeypatch.setattr(interning, "_last", {})
    for i in range(10):
        assert interning.interned((i,)) == (i,)
        assert len(interning._kept[tuple]) <= 3
    one = interning.interned(frozenset({1}))
    assert interning.interned((1,)) == (1,)
    assert interning.interned(frozenset({1})) is one  # kept, and not only as the last one
    assert interning.interned((1,)) is not one  # equal sets and tuples are kept apart
    assert interning.interned(frozenset({1, 2})) == frozenset({1, 2})
    assert interning.interned(frozenset({1})) is one


def test_a_kind_keeps_its_own_table(monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's holders and its budget are both tuples: each kind is kept apart, so that the
    last value of one is not forever compared with the other's (a hash per job)."""
    monkeypatch.setattr(interning, "_kept", {})
    monkeypatch.setattr(interning, "_last", {})
    holders, budget = interning.interned(("h",), "holders"), interning.interned((0,), "budget")
    assert interning.interned(("h",), "holders") is holders
    assert interning.interned((0,), "budget") is budget
    assert interning._last == {"holders": holders, "budget": budget}
    assert tuple not in interning._kept
