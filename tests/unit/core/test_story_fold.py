"""Issue 48 item 8: an execution's checkpoints are one line of the story (the CLI's default),
every event its own line with --all; the record's running execution (started, last
checkpoint) for `dispatch status`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind, Provenance, State
from dispatch.core.story import line, running, span_text, story

T0 = datetime(2026, 12, 7, 14, 0, tzinfo=UTC)
DONE = Cause(kind=CauseKind.NONE, provenance=Provenance.SCHEDULER)


def ckpt(seq: int, sub: int, execution: int, step: int, secs: float) -> ev.CheckpointRecorded:
    at = T0 + timedelta(seconds=secs)
    return ev.CheckpointRecorded(seq=seq, at=at, submission=sub, execution=execution,
                                 step=step, written=at)


def started(seq: int, sub: int, execution: int, secs: float = 0) -> ev.ExecutionStarted:
    return ev.ExecutionStarted(seq=seq, at=T0 + timedelta(seconds=secs), submission=sub,
                               execution=execution, nodes=2)


def ended(seq: int, sub: int, execution: int) -> ev.ExecutionEnded:
    return ev.ExecutionEnded(seq=seq, at=T0, submission=sub, ref=f"l-{sub}",
                             execution=execution, cause=DONE)


# One piece of a record: an execution's checkpoint (submission, execution), or another event.
pieces = st.lists(st.one_of(st.tuples(st.integers(1, 3), st.integers(0, 2)), st.none()),
                  max_size=60)


def record_of(spec: list[tuple[int, int] | None]) -> list[ev.Event]:
    out: list[ev.Event] = []
    for seq, p in enumerate(spec, start=2):
        if p is None:
            out.append(ev.CancelRequested(seq=seq, at=T0, actor="ana"))
        else:
            out.append(ckpt(seq, p[0], p[1], step=seq, secs=3.0 * seq))
    return out


@given(pieces)
def test_folded_is_one_line_per_execution_and_all_is_every_line(
        spec: list[tuple[int, int] | None]) -> None:
    record = record_of(spec)
    every = story(record)
    assert [e for e, _ in every] == record  # unfolded (--all): every event, in order
    folded = story(record, folded=True)
    executions = {p for p in spec if p is not None}
    others = [p for p in spec if p is None]
    assert len(folded) == len(others) + len(executions)
    # Every non-checkpoint line is kept as it was, in record order.
    assert [x for x in folded if not isinstance(x[0], ev.CheckpointRecorded)] == \
        [x for x in every if not isinstance(x[0], ev.CheckpointRecorded)]
    for key in executions:
        mine = [e for e in record
                if isinstance(e, ev.CheckpointRecorded) and (e.submission, e.execution) == key]
        (shown,) = [(e, text) for e, text in folded if e in mine]
        assert shown[0] is mine[-1]  # the line stands where the last checkpoint stands
        if len(mine) == 1:
            assert shown[1] == line(mine[0])
        else:
            assert shown[1].startswith(f"checkpoints at steps {mine[0].step}\u2013"
                                       f"{mine[-1].step} ({len(mine)}, every ~")
            assert f"submission {key[0]} execution {key[1]}" in shown[1]


@pytest.mark.parametrize(("steps", "every_s", "says"), [
    ([3, 6, 9, 117], 3.0, "checkpoints at steps 3\u2013117 (4, every ~3 s; submission 1 "
                          "execution 0), the last at step 117"),
    ([10, 20], 600.0, "checkpoints at steps 10\u201320 (2, every ~10 min; submission 1 "
                      "execution 0), the last at step 20"),
    ([5, 5], 0.0, "checkpoints at step 5 (2; submission 1 execution 0), the last at step 5"),
])
def test_the_folded_line_says_steps_count_and_interval(steps: list[int], every_s: float,
                                                       says: str) -> None:
    record = [ckpt(i + 2, 1, 0, s, i * every_s) for i, s in enumerate(steps)]
    assert [text for _, text in story(record, folded=True)] == [says]


@pytest.mark.parametrize(("secs", "says"), [
    (0.05, "<0.1 s"), (0.5, "0.5 s"), (3.4, "3 s"), (119, "119 s"), (600, "10 min"),
    (5400, "90 min"),
    (9000, "2.5 h"), (3 * 86400, "3 d")])
def test_spans_are_said_roughly(secs: float, says: str) -> None:
    assert span_text(timedelta(seconds=secs)) == says


def test_running_is_the_latest_started_execution_not_ended() -> None:
    assert running([]) is None
    rec: list[ev.Event] = [started(2, 1, 0, 1), ckpt(3, 1, 0, 3, 4), ckpt(4, 1, 0, 6, 7)]
    r = running(rec)
    assert r is not None and (r.submission, r.execution) == (1, 0)
    assert r.started == T0 + timedelta(seconds=1)
    assert (r.checkpoint_step, r.checkpoint_written) == (6, T0 + timedelta(seconds=7))
    # The scheduler's own start time wins over when dispatch saw it.
    told = ev.ExecutionStarted(seq=2, at=T0 + timedelta(seconds=9), submission=1,
                               execution=0, started=T0)
    assert (running([told]) or pytest.fail("none")).started == T0
    # Ended: nothing runs; the next submission's execution runs without its checkpoints.
    assert running([*rec, ended(5, 1, 0)]) is None
    nxt = running([*rec, ended(5, 1, 0), started(6, 2, 0, 20)])
    assert nxt is not None and nxt.submission == 2 and nxt.checkpoint_step is None
    # A committed outcome: nothing runs any more.
    out = ev.OutcomeCommitted(seq=5, at=T0, state=State.CANCELLED, cause=DONE)
    assert running([*rec, out]) is None
