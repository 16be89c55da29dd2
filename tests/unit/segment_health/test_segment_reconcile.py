"""The segment outbox (issue 12 item 4): the pure plan, then reconcile against a real dir."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec
from hypothesis import given
from hypothesis import strategies as st
from tests.specs import parse_spec

from dispatch.backends.registry import declarations_for
from dispatch.core import events as ev
from dispatch.core.record import Job, SegmentDecision, fold
from dispatch.segment_health import publish, read_state
from dispatch.segment_health.reconcile import (
    RECORDED_CAUSE,
    Entry,
    Overflow,
    Plan,
    Refusal,
    StateWrite,
    UnitWrite,
    plan_reconcile,
    reconcile,
)
from dispatch.segment_health.state import MAX_STATE_LINE_BYTES, decode_state

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
REG = "regular file"


def decision(unit_job: str = "4242", task: str = "4242", reason: str = "n2 DRAIN",
             ) -> SegmentDecision:
    return SegmentDecision(unit_job_id=unit_job, task_id=task, reason=reason, at=T0,
                           actor="sup", nodes=("n2",))


def unit(task: str, size: int = 20, kind: str = REG, job: str = "4242") -> tuple[str, Entry]:
    return f"segment_health_check.{job}.{task}", Entry(kind, size)


def state(job: str = "4242", size: int = 9, kind: str = REG) -> tuple[str, Entry]:
    return f"segment_health_check.{job}.state", Entry(kind, size)


# -- the pure plan ----------------------------------------------------------------------


def test_nothing_on_disk_writes_the_unit_and_the_state() -> None:
    d = decision()
    assert plan_reconcile([d], {}, {}) == Plan(
        units=(UnitWrite(d, "missing"),),
        states=(StateWrite("4242", b'["4242"]\n', "missing"),))


def test_in_step_plans_nothing() -> None:
    listing = dict([unit("4242"), state()])
    plan = plan_reconcile([decision()], listing,
                          {"segment_health_check.4242.state": b'["4242"]\n'})
    assert plan == Plan() and not plan.writes


def test_a_zero_byte_unit_file_is_rewritten() -> None:
    d = decision()
    listing = dict([unit("4242", size=0), state()])
    plan = plan_reconcile([d], listing, {"segment_health_check.4242.state": b'["4242"]\n'})
    assert plan.units == (UnitWrite(d, "zero-byte"),) and plan.states == ()


def test_a_stale_state_is_rewritten_with_every_excluding_unit_file() -> None:
    # The record holds task 3; another publisher's non-empty file excludes task 12; a
    # zero-byte file and a link do not exclude.
    listing = dict([unit("3"), unit("12"), unit("5", size=0), unit("6", kind="symbolic link"),
                    state()])
    plan = plan_reconcile([decision(task="3")], listing,
                          {"segment_health_check.4242.state": b'["3"]\n'})
    assert plan.states == (StateWrite("4242", b'["3","12"]\n', "stale"),)
    assert plan.units == ()


def test_a_link_or_directory_under_a_name_to_write_is_refused() -> None:
    listing = dict([unit("4242", kind="symbolic link"), state(kind="directory")])
    plan = plan_reconcile([decision()], listing, {})
    assert plan.units == () and plan.states == ()
    assert plan.refused == (
        Refusal("segment_health_check.4242.4242", "is a symbolic link, not a regular file"),
        Refusal("segment_health_check.4242.state", "is a directory, not a regular file"))


def test_a_record_naming_no_slurm_unit_is_refused_not_raised() -> None:
    plan = plan_reconcile([decision(unit_job="x/..", task="1")], {}, {})
    assert plan.units == () and [r.name for r in plan.refused] == ["x/...1"]


def test_an_overflowing_state_keeps_what_fits_and_says_so() -> None:
    tasks = [str(10**9 + i) for i in range(631)]  # 13 bytes each: 630 fit in 8192
    decisions = [decision(task=t) for t in tasks]
    plan = plan_reconcile(decisions, {}, {})
    assert len(plan.units) == 631  # every per-unit file is still written
    [write] = plan.states
    assert len(write.content) == MAX_STATE_LINE_BYTES
    assert decode_state(write.content) == tasks[:630]
    assert plan.overflows == (Overflow("4242", 8205, 631, 630),)
    assert "8205 bytes" in plan.overflows[0].message


ids = st.integers(min_value=0, max_value=10**6).map(str)


@given(
    recorded=st.sets(ids, max_size=8),
    others=st.dictionaries(ids, st.sampled_from([(REG, 0), (REG, 5), ("symbolic link", 9),
                                                 ("directory", 0)]), max_size=8),
    state_is=st.sampled_from(["missing", "right", "wrong"]),
)
def test_applying_the_plan_leaves_nothing_to_do(recorded: set[str],
                                                others: dict[str, tuple[str, int]],
                                                state_is: str) -> None:
    """Property: carry a plan out on a model directory, plan again: no writes remain, and
    the state names every recorded task (the record is what the files say)."""
    decisions = [decision(task=t) for t in recorded]
    listing = {f"segment_health_check.4242.{t}": Entry(k, s) for t, (k, s) in others.items()}
    states: dict[str, bytes] = {}
    if state_is != "missing":
        listing["segment_health_check.4242.state"] = Entry(REG, 5)
        states["segment_health_check.4242.state"] = b'["1"]\n' if state_is == "wrong" else b""
    plan = plan_reconcile(decisions, listing, states)
    refused = {r.name for r in plan.refused}
    for w in plan.units:
        listing[f"segment_health_check.4242.{w.decision.task_id}"] = Entry(REG, 20)
    for s in plan.states:
        listing["segment_health_check.4242.state"] = Entry(REG, len(s.content))
        states["segment_health_check.4242.state"] = s.content
    again = plan_reconcile(decisions, listing, states)
    assert not again.writes
    if recorded:
        line = states["segment_health_check.4242.state"]
        assert set(recorded) <= set(decode_state(line))
    for t in recorded:
        name = f"segment_health_check.4242.{t}"
        assert listing[name].excludes or name in refused


# -- the shell, against a real directory ---------------------------------------------------


def job_in(directory: Path, *decisions: SegmentDecision) -> Job:
    spec = parse_spec({"name": "seg", "backend": "slurm", "command": ["train"], "nodes": 2,
                       "segment_health": {"dir": str(directory)}})
    job = fold([ev.JobCreated(seq=1, at=T0, job_id="j1", spec=spec,
                              declarations=declarations_for("slurm")),
                ev.SubmissionIntended(seq=2, at=T0, submission=1, token="j1.1"),
                ev.SubmissionBound(seq=3, at=T0, submission=1, ref="4242")], T0)
    return msgspec.structs.replace(job, segments=tuple(decisions))


def test_reconcile_writes_what_the_record_says(tmp_path: Path) -> None:
    seg = tmp_path / "seg"
    done = reconcile(job_in(seg, decision()))
    assert done.written == ("segment_health_check.4242.4242", "segment_health_check.4242.state")
    body = msgspec.json.decode((seg / "segment_health_check.4242.4242").read_bytes())
    assert body["why"] == "n2 DRAIN" and body["nodes"] == ["n2"] and body["who"] == "sup"
    assert body["cause"] == RECORDED_CAUSE and body["dispatch_job"] == "j1"
    assert read_state(seg, "4242") == ["4242"]


def test_reconcile_when_in_step_writes_nothing(tmp_path: Path) -> None:
    seg = tmp_path / "seg"
    job = job_in(seg, decision())
    reconcile(job, causes={("4242", "4242"): "node-unavailable"})
    before = {n: os.stat(seg / n).st_ino for n in os.listdir(seg)}
    rereads: list[int] = []

    def reread() -> Job:
        rereads.append(1)
        return job

    done = reconcile(job, reread=reread)
    assert done.written == () and rereads == []  # in step: no lock, no record read
    assert {n: os.stat(seg / n).st_ino for n in os.listdir(seg)} == before


def test_reconcile_rereads_the_record_under_the_lock(tmp_path: Path) -> None:
    """A stale view (the tick's) must not write back a decision the record has cleared."""
    seg = tmp_path / "seg"
    stale = job_in(seg, decision())
    cleared = job_in(seg)
    done = reconcile(stale, reread=lambda: cleared)
    assert done.written == ()
    assert [n for n in os.listdir(seg) if not n.startswith(".")] == []


def test_reconcile_never_removes_a_file_the_record_does_not_hold(tmp_path: Path) -> None:
    seg = tmp_path / "seg"
    publish(seg, "4242", "9", decision={"why": "another publisher"})
    reconcile(job_in(seg, decision(task="3")))
    assert (seg / "segment_health_check.4242.9").exists()
    assert read_state(seg, "4242") == ["3", "9"]


def test_reconcile_reports_a_planted_link_and_writes_through_nothing(tmp_path: Path) -> None:
    seg = tmp_path / "seg"
    seg.mkdir()
    victim = tmp_path / "victim"
    (seg / "segment_health_check.4242.4242").symlink_to(victim)
    done = reconcile(job_in(seg, decision()))
    assert not os.path.lexists(victim)
    [message] = done.escalations
    assert "segment_health_check.4242.4242" in message and "symbolic link" in message
    assert read_state(seg, "4242") == ["4242"]  # the record's word, for the H4 reader


def test_a_record_naming_no_slurm_unit_never_stops_the_others(tmp_path: Path) -> None:
    seg = tmp_path / "seg"
    job = job_in(seg, decision(unit_job="٣", task="1"), decision(unit_job="007", task="1"),
                 decision(task="5", reason=""), decision())
    done = reconcile(job, reread=lambda: job)
    assert sorted(r.name for r in done.refused) == ["007.1", "٣.1"]
    assert set(done.written) == {"segment_health_check.4242.4242",
                                 "segment_health_check.4242.5", "segment_health_check.4242.state"}
    assert read_state(seg, "4242") == ["5", "4242"]
    assert b"(no reason recorded)" in (seg / "segment_health_check.4242.5").read_bytes()
