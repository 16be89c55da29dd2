"""Issue 27: folding on from a kept state equals folding the whole record, for any record
and any split point (the supervisor's LiveFolds and the snapshot cache rely on it)."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies import records

from dispatch.core.record import RecordError, advance, fold

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@settings(max_examples=300, deadline=None)
@given(record=records(max_events=25), data=st.data())
def test_state_plus_the_events_after_it_is_the_whole_fold(record: list, data: st.DataObject
                                                          ) -> None:
    split = data.draw(st.integers(min_value=1, max_value=len(record)), label="split")
    try:
        whole = fold(record, NOW)
    except RecordError:
        whole = None
    try:
        on = advance(fold(record[:split], NOW), record[split:])
    except RecordError:
        on = None
    assert on == whole


@settings(max_examples=100, deadline=None)
@given(record=records(max_events=25), data=st.data())
def test_folding_on_in_many_steps_is_the_whole_fold(record: list, data: st.DataObject
                                                    ) -> None:
    cuts = sorted(data.draw(st.sets(st.integers(min_value=2, max_value=max(2, len(record))),
                                    max_size=6), label="cuts"))
    try:
        whole = fold(record, NOW)
    except RecordError:
        return  # a record fold refuses: the split one is refused too (test above)
    job = fold(record[:1], NOW)
    start = 1
    for cut in [*cuts, len(record)]:
        job = advance(job, record[start:cut])
        start = max(start, cut)
    assert job == whole
