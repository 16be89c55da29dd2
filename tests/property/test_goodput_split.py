"""G1-G4 as properties over any record tests/strategies can draw (fold may refuse it: the
split must still be exact)."""

from __future__ import annotations

from datetime import timedelta

from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies import records, times

from dispatch.core import events as ev
from dispatch.core.goodput import ZERO, By, Phase, Split, fleet, job_time, split
from dispatch.service.goodput import node_time_text

RECORDS = records(max_events=25)


@settings(max_examples=150, deadline=None)
@given(record=RECORDS, now=times)
def test_g1_segments_tile_the_wall_time_exactly(record: list, now) -> None:  # type: ignore[type-arg]
    jt = job_time(record, now)
    at = jt.start
    for s in jt.segments:
        assert s.start == at and s.end > s.start  # contiguous, in order, never empty
        at = s.end
    assert at == jt.end
    part = split(jt)
    assert sum(part.parts.values(), ZERO) == part.wall == jt.end - jt.start


@settings(max_examples=150, deadline=None)
@given(record=RECORDS, now=times)
def test_g2_node_time_is_each_segment_times_its_nodes(record: list, now) -> None:  # type: ignore[type-arg]
    jt = job_time(record, now)
    part = split(jt)
    assert part.node_wall == sum(((s.end - s.start) * s.nodes for s in jt.segments), ZERO)
    assert sum(part.node_parts.values(), ZERO) == part.node_wall
    # held: waiting for a person, no node-time (issue 48); every other piece on its nodes
    assert all(s.nodes == 0 if s.phase is Phase.HELD else s.nodes >= 1 for s in jt.segments)


@settings(max_examples=150, deadline=None)
@given(record=RECORDS, now=times)
def test_g3_lost_work_lies_inside_running_time(record: list, now) -> None:  # type: ignore[type-arg]
    jt = job_time(record, now)
    running = [s for s in jt.segments if s.phase is Phase.RUNNING]
    for lost in jt.lost:
        assert lost.end > lost.start
        assert any(r.start <= lost.start and lost.end <= r.end and r.nodes == lost.nodes
                   for r in running)
    part = split(jt)
    for nodes in (True, False):
        assert part.good(nodes=nodes) >= ZERO
        g = part.goodput(nodes=nodes)
        assert g is None or 0.0 <= g <= 1.0


@settings(max_examples=100, deadline=None)
@given(record=RECORDS, now=times, window=st.timedeltas(min_value=timedelta(0),
                                                       max_value=timedelta(days=3)))
def test_windows_add_up_to_the_whole(record: list, now, window) -> None:  # type: ignore[type-arg]
    jt = job_time(record, now)
    cut = jt.start + window
    before, after = split(jt, until=cut), split(jt, since=cut)
    assert before.wall + after.wall == split(jt).wall
    assert before.lost_total() + after.lost_total() == split(jt).lost_total()


def _counters(record: list, now) -> dict:  # type: ignore[type-arg]
    """What /metrics counts: the segments and lost work the committed events closed."""
    jt = job_time(record, now)
    out: dict = {}  # type: ignore[type-arg]
    for s in jt.segments[:jt.closed]:
        k = ("t", s.phase, s.cause)
        out[k] = out.get(k, ZERO) + (s.end - s.start)
    for s in jt.lost:
        k = ("l", s.cause)
        out[k] = out.get(k, ZERO) + (s.end - s.start)
    return out


@settings(max_examples=100, deadline=None)
@given(record=RECORDS, now=times, later=times)
def test_counters_never_go_down_as_events_are_appended(record: list, now, later) -> None:  # type: ignore[type-arg]
    prev: dict = {}  # type: ignore[type-arg]
    for k in range(1, len(record) + 1):
        cur = _counters(record[:k], now if k % 2 else later)
        for key, value in prev.items():
            assert cur.get(key, ZERO) >= value, (k, key)
        prev = cur


@settings(max_examples=150, deadline=None)
@given(record=RECORDS, now=times)
def test_allocated_node_time_is_running_and_stopping_only(record: list, now) -> None:  # type: ignore[type-arg]
    """Issue 36: allocated node-time counts only the phases that hold nodes; a queued,
    recovering or held second never counts, nor a stopping one before any run started
    (issue 47 item 7); it bounds time to result from below and its goodput from above."""
    jt = job_time(record, now)
    part = split(jt)
    holding = sum(((s.end - s.start) * s.nodes for s in jt.segments
                   if s.phase in (Phase.RUNNING, Phase.STOPPING)), ZERO)
    assert part.allocated() == holding
    assert ZERO <= part.allocated() <= part.node_wall
    waiting = sum(((s.end - s.start) * s.nodes for s in jt.segments
                   if s.phase in (Phase.QUEUED, Phase.RECOVERING, Phase.HELD,
                                  Phase.SETTLING)), ZERO)
    assert part.allocated() + waiting == part.node_wall
    g, ga = part.goodput(), part.allocated_goodput()
    assert (ga is None) == (part.allocated() == ZERO)
    if ga is not None:
        assert 0.0 <= ga <= 1.0
        assert g is not None and g <= ga + 1e-12


@settings(max_examples=100, deadline=None)
@given(seconds=st.floats(min_value=0, max_value=1e9, allow_nan=False))
def test_node_time_text_scales_its_unit_and_reads_back(seconds: float) -> None:
    """Issue 36: a figure is shown in the unit that fits it, never a row of 0.00 node-h:
    the text read back is within its rounding of the figure."""
    text = node_time_text(seconds)
    number, unit = text.split(" ")
    scale = {"node-s": 1, "node-min": 60, "node-h": 3600}[unit]
    value = float(number.replace(",", ""))
    assert value > 0 or seconds < 0.05
    assert abs(value * scale - seconds) <= max(0.05, 0.0051 * seconds)
    if seconds >= 1:
        assert value >= 1  # each unit is used from one of it up


@settings(max_examples=100, deadline=None)
@given(record=RECORDS, now=times)
def test_issue_48_phases_still_sum_exactly(record: list, now) -> None:  # type: ignore[type-arg]
    """Issue 48 moved time between phases (settling; held time carries no node-time): each
    denominator is still exactly the sum of its phases, time and node-time, and allocated
    node-time never holds a settling or held second."""
    jt = job_time(record, now)
    part = split(jt)
    assert sum((part.phase(p, nodes=False) for p in Phase), ZERO) == part.wall
    assert sum((part.phase(p) for p in Phase), ZERO) == part.node_wall
    assert part.allocated() == part.phase(Phase.RUNNING) + part.phase(Phase.STOPPING)
    assert part.phase(Phase.HELD) == ZERO
    # an end nothing recovered from before the outcome is never "recovering"
    if jt.settled and jt.segments and jt.segments[-1].phase is Phase.RECOVERING:
        last = jt.segments[-1].start
        assert any(isinstance(e, ev.SubmissionIntended | ev.RecoveryStarted
                              | ev.SubmissionRejected | ev.HoldReleased)
                   and e.at <= jt.end for e in record), last


@settings(max_examples=50, deadline=None)
@given(records_=st.lists(RECORDS, min_size=1, max_size=4), now=times)
def test_groups_by_job_sum_to_the_fleet_exactly(records_: list, now) -> None:  # type: ignore[type-arg]
    """``goodput --by job`` (sorted, limited) and the fleet's one split are the same time:
    the rows sum to the whole, phase by phase."""
    jobs = [job_time(r, now) for r in records_]
    whole = fleet(jobs, None).get("", Split())
    total = Split()
    for part in fleet(jobs, By.JOB).values():
        total.add(part)
    assert total.node_parts == whole.node_parts and total.parts == whole.parts
    assert total.node_wall == whole.node_wall and total.lost == whole.lost
