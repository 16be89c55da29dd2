"""Slurm words -> (state, cause): every row of docs/scheduler-signals.md "Slurm -> (state, cause)",
and the real captures in tests/fixtures/slurm/. No Slurm needed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.backends.slurm import mapping, node_health
from dispatch.backends.slurm.array_mapping import array_report
from dispatch.backends.slurm.mapping import Signal, classify, object_report
from dispatch.backends.slurm.nodes import parse_sinfo_json
from dispatch.backends.slurm.parse import (
    ExitStatus,
    group_sacct,
    parse_sacct,
    parse_squeue_json,
    wait_status,
)
from dispatch.core.model import CauseKind as K
from dispatch.core.model import Provenance as P
from dispatch.core.model import State as S

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "slurm"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def sig(state: str, reason: str = "", **kw: object) -> Signal:
    return Signal(state=state, reason=reason, **kw)  # type: ignore[arg-type]


# Every row of the table, one or more signals each: (signal, state, kind, provenance).
TABLE = [
    # PENDING + ordinary reasons -> pending, none
    *[(sig("PENDING", r), S.PENDING, K.NONE, P.SCHEDULER)
      for r in ("Priority", "BeginTime", "Dependency", "JobArrayTaskLimit", "Licenses",
                "Reservation", "Prolog", "None", "")],
    # PENDING + capacity -> pending, no-capacity
    *[(sig("PENDING", r), S.PENDING, K.NO_CAPACITY, P.SCHEDULER)
      for r in ("Resources", "ReqNodeNotAvail", "ReqNodeNotAvail, UnavailableNodes:n4",
                "NodeDown", "PartitionDown", "PartitionInactive", "AssocGrpCpuLimit",
                "AssocGrpNodeLimit", "QOSGrpCpuLimit", "QOSGrpMemLimit")],
    # PENDING + a reason that never clears -> pending, no-capacity (never runs)
    *[(sig("PENDING", r), S.PENDING, K.NO_CAPACITY, P.SCHEDULER)
      for r in ("DependencyNeverSatisfied", "BadConstraints", "PartitionNodeLimit",
                "PartitionTimeLimit", "InvalidAccount", "InvalidQOS", "QOSNotAllowed",
                "AccountNotAllowed", "QOSMaxCpuPerJobLimit", "AssocMaxNodesPerJobLimit")],
    # PENDING again after an execution ended -> recovering (cause of that end: see below)
    (sig("PENDING", "BeginTime", restarts=1), S.RECOVERING, K.REQUEUED, P.SCHEDULER),
    (sig("PENDING", "Priority", restarts=2), S.RECOVERING, K.REQUEUED, P.SCHEDULER),
    # held
    (sig("PENDING", "JobHeldUser"), S.HELD, K.HELD, P.ACTOR),
    (sig("PENDING", "JobHeldAdmin"), S.HELD, K.HELD, P.ACTOR),
    (sig("SPECIAL_EXIT"), S.HELD, K.HELD, P.SCHEDULER),
    (sig("RESV_DEL_HOLD"), S.HELD, K.HELD, P.SCHEDULER),
    (sig("REQUEUE_HOLD", "", description="launch failed requeued held"), S.HELD,
     K.LAUNCH_FAILED, P.SCHEDULER),
    (sig("PENDING", "launch failed requeued held", description="launch failed requeued held"),
     S.HELD, K.LAUNCH_FAILED, P.SCHEDULER),
    (sig("REQUEUE_HOLD"), S.HELD, K.REQUEUED, P.SCHEDULER),
    (sig("PENDING", "JobHoldMaxRequeue"), S.HELD, K.REQUEUED, P.SCHEDULER),
    (sig("PENDING", "JobHeldUser", description="job requeued in held state", restarts=1),
     S.HELD, K.REQUEUED, P.SCHEDULER),
    # running
    *[(sig(w), S.RUNNING, K.NONE, P.SCHEDULER)
      for w in ("RUNNING", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT", "COMPLETING")],
    (sig("SUSPENDED"), S.HELD, K.HELD, P.SCHEDULER),
    (sig("STOPPED"), S.HELD, K.HELD, P.SCHEDULER),
    # ended
    (sig("COMPLETED"), S.SUCCEEDED, K.NONE, P.SCHEDULER),
    (sig("CANCELLED by 1000"), S.CANCELLED, K.CANCELLED, P.ACTOR),
    (sig("CANCELLED"), S.CANCELLED, K.CANCELLED, P.SCHEDULER),
    # dispatch's stop mark in the Comment (S14): the cancel is dispatch's own
    (sig("CANCELLED by 0", stop_mark="dispatch-stop:j1.2"), S.CANCELLED, K.CANCELLED, P.ACTOR),
    (sig("FAILED", "NonZeroExitCode", exit=ExitStatus(code=3, text="3:0")), S.FAILED,
     K.NON_ZERO_EXIT, P.APPLICATION),
    (sig("FAILED", "JobLaunchFailure"), S.FAILED, K.LAUNCH_FAILED, P.SCHEDULER),
    (sig("FAILED", "JobLaunchFailure", exit=ExitStatus(signal=9, text="0:9")), S.FAILED,
     K.UNKNOWN, P.SCHEDULER),
    (sig("TIMEOUT"), S.FAILED, K.TIME_LIMIT, P.SCHEDULER),
    (sig("DEADLINE"), S.FAILED, K.TIME_LIMIT, P.SCHEDULER),
    (sig("NODE_FAIL"), S.FAILED, K.NODE_LOST, P.SCHEDULER),
    (sig("BOOT_FAIL"), S.FAILED, K.LAUNCH_FAILED, P.SCHEDULER),
    (sig("OUT_OF_MEMORY"), S.FAILED, K.OUT_OF_MEMORY, P.SCHEDULER),
    (sig("PREEMPTED"), S.FAILED, K.PREEMPTED, P.SCHEDULER),
    (sig("REQUEUED"), S.RECOVERING, K.REQUEUED, P.SCHEDULER),
    (sig("REQUEUE_FED"), S.RECOVERING, K.REQUEUED, P.SCHEDULER),
    (sig("REVOKED"), S.CANCELLED, K.DUPLICATE, P.SCHEDULER),
    # anything else -> unknown, words kept
    (sig("WEIRD_NEW_STATE", "SomeReason"), S.UNKNOWN, K.UNKNOWN, P.SCHEDULER),
    (sig(""), S.UNKNOWN, K.UNKNOWN, P.SCHEDULER),
    (sig("PENDING", "ABrandNewReason"), S.PENDING, K.UNKNOWN, P.SCHEDULER),
    (sig("FAILED"), S.FAILED, K.UNKNOWN, P.SCHEDULER),
]


@pytest.mark.parametrize(("signal", "state", "kind", "provenance"), TABLE,
                         ids=[f"{t[0].state or 'empty'}/{t[0].reason}" for t in TABLE])
def test_table_row(signal: Signal, state: S, kind: K, provenance: P) -> None:
    got_state, cause = classify(signal)
    assert (got_state, cause.kind, cause.provenance) == (state, kind, provenance)
    # The scheduler's words are always kept verbatim.
    if signal.state:
        assert signal.state in cause.detail
    if signal.reason and signal.reason != "None":
        assert signal.reason in cause.detail


def test_cancelled_by_uid_names_the_actor() -> None:
    _, cause = classify(sig("CANCELLED by 1000"))
    assert cause.actor == "1000"
    assert cause.detail.startswith("CANCELLED by 1000")


def test_never_runs_is_flagged_in_the_note_not_the_detail() -> None:
    _, cause = classify(sig("PENDING", "PartitionNodeLimit"))
    assert cause.note == "can never start"
    assert cause.detail == "PENDING; reason=PartitionNodeLimit"
    _, cause = classify(sig("PENDING", "Resources"))
    assert "can never start" not in cause.note + cause.detail


def test_recovering_carries_the_ended_executions_cause() -> None:
    preempted = classify(sig("PREEMPTED", nodes="n1"))[1]
    state, cause = classify(sig("PENDING", "BeginTime", restarts=1), previous=preempted)
    assert state is S.RECOVERING and cause.kind is K.PREEMPTED
    assert "PREEMPTED" in cause.detail and "BeginTime" in cause.detail


def test_suspended_is_preempted_only_under_preempt_mode_suspend() -> None:
    assert classify(sig("SUSPENDED"), preempt_mode="SUSPEND")[1].kind is K.PREEMPTED
    assert classify(sig("SUSPENDED"), preempt_mode="REQUEUE")[1].kind is K.HELD


def test_step_oom_wins_over_the_job_rows_exit() -> None:
    s = sig("FAILED", exit=ExitStatus(code=1, text="1:0"),
            steps=(("batch", "FAILED", "1:0"), ("0", "OUT_OF_MEMORY", "0:125")))
    state, cause = classify(s)
    assert (state, cause.kind) == (S.FAILED, K.OUT_OF_MEMORY)
    assert "step 0 OUT_OF_MEMORY 0:125" in cause.detail


def test_non_zero_exit_keeps_the_code() -> None:
    _, cause = classify(sig("FAILED", "NonZeroExitCode", exit=wait_status(768)))
    assert cause.exit_code == 3 and "ExitCode=768" in cause.detail


@given(state=st.text(max_size=40), reason=st.text(max_size=40),
       description=st.text(max_size=40), restarts=st.integers(0, 10),
       code=st.one_of(st.none(), st.integers(0, 1 << 16)))
def test_classify_never_crashes_and_keeps_words(state: str, reason: str, description: str,
                                                restarts: int, code: int | None) -> None:
    s = Signal(state=state, reason=reason, description=description, restarts=restarts,
               exit=None if code is None else wait_status(code))
    got, cause = classify(s)
    assert isinstance(got, S)
    if state.strip():
        assert state.strip() in cause.detail
    if cause.kind is K.NON_ZERO_EXIT:
        assert cause.exit_code and cause.provenance is P.APPLICATION


# --------------------------------------------------------------------------- real captures


def load(name: str) -> tuple[dict[str, object], dict[str, list]]:  # type: ignore[type-arg]
    jobs = {j.ref: j for j in parse_squeue_json((FIX / f"{name}.squeue.json").read_text()).jobs}
    sacct_path = FIX / f"{name}.sacct-D.txt"
    groups = group_sacct(parse_sacct(sacct_path.read_text())) if sacct_path.exists() else {}
    return jobs, groups  # type: ignore[return-value]


# (fixture, job id, state, kind, provenance, actor, exit code): squeue + sacct -D together.
CAPTURED = [
    ("completed", "19", S.SUCCEEDED, K.NONE, P.SCHEDULER, None, None),
    ("exit3", "20", S.FAILED, K.NON_ZERO_EXIT, P.APPLICATION, None, 3),
    ("exit137", "21", S.FAILED, K.NON_ZERO_EXIT, P.APPLICATION, None, 137),
    ("oom", "22", S.FAILED, K.OUT_OF_MEMORY, P.SCHEDULER, None, None),
    ("multinode", "23", S.SUCCEEDED, K.NONE, P.SCHEDULER, None, None),
    ("signal", "24", S.FAILED, K.UNKNOWN, P.SCHEDULER, None, None),
    ("timeout", "18", S.FAILED, K.TIME_LIMIT, P.SCHEDULER, None, None),
    ("cancelled", "31", S.CANCELLED, K.CANCELLED, P.ACTOR, "0", None),
    ("preempt-before", "25", S.RUNNING, K.NONE, P.SCHEDULER, None, None),
    ("preempted", "25", S.RECOVERING, K.PREEMPTED, P.SCHEDULER, None, None),
    ("preempted", "26", S.FAILED, K.PREEMPTED, P.SCHEDULER, None, None),
    ("preempted", "27", S.RUNNING, K.NONE, P.SCHEDULER, None, None),
    ("nodefail", "28", S.RECOVERING, K.NODE_LOST, P.SCHEDULER, None, None),
    ("nodefail", "29", S.FAILED, K.NODE_LOST, P.SCHEDULER, None, None),
    ("notresponding-ended", "47", S.FAILED, K.NODE_LOST, P.SCHEDULER, None, None),
    ("held-submit", "32", S.HELD, K.HELD, P.ACTOR, None, None),
    ("held-admin", "33", S.HELD, K.HELD, P.ACTOR, None, None),
    ("held-user", "33", S.HELD, K.HELD, P.ACTOR, None, None),
    ("begin-later", "33", S.PENDING, K.NONE, P.SCHEDULER, None, None),
    ("released", "32", S.RUNNING, K.NONE, P.SCHEDULER, None, None),
    ("requeued", "34", S.RECOVERING, K.REQUEUED, P.SCHEDULER, None, None),
    ("requeued", "35", S.HELD, K.REQUEUED, P.SCHEDULER, None, None),
    ("pending-reasons", "43", S.PENDING, K.NO_CAPACITY, P.SCHEDULER, None, None),
    ("never-fits", "37", S.PENDING, K.NO_CAPACITY, P.SCHEDULER, None, None),
    ("never-fits", "46", S.PENDING, K.NO_CAPACITY, P.SCHEDULER, None, None),
    ("array-held", "44", S.HELD, K.HELD, P.ACTOR, None, None),
]


@pytest.mark.parametrize(("name", "ref", "state", "kind", "prov", "actor", "code"), CAPTURED,
                         ids=[f"{c[0]}-{c[1]}" for c in CAPTURED])
def test_captured(name: str, ref: str, state: S, kind: K, prov: P, actor: str | None,
                  code: int | None) -> None:
    jobs, groups = load(name)
    report = object_report(ref=ref, token=None, job=jobs[ref], groups=groups.get(ref, []),  # type: ignore[arg-type]
                           nodes={}, lost_since=None, now=NOW)
    assert (report.state, report.cause.kind, report.cause.provenance) == (state, kind, prov)
    assert report.cause.actor == actor
    assert report.cause.exit_code == code
    assert report.token == (jobs[ref].comment or None)  # type: ignore[attr-defined]


# The same jobs once squeue forgot them (MinJobAge): accounting alone.
SACCT_ONLY = [
    ("completed", "19", S.SUCCEEDED, K.NONE, None),
    ("exit3", "20", S.FAILED, K.NON_ZERO_EXIT, 3),
    ("exit137", "21", S.FAILED, K.NON_ZERO_EXIT, 9),  # the 128 trap: detail says so
    ("oom", "22", S.FAILED, K.OUT_OF_MEMORY, None),
    ("signal", "24", S.FAILED, K.UNKNOWN, None),
    ("timeout", "18", S.FAILED, K.TIME_LIMIT, None),
    ("cancelled", "31", S.CANCELLED, K.CANCELLED, None),
    ("preempted", "26", S.FAILED, K.PREEMPTED, None),
    ("nodefail", "28", S.RECOVERING, K.NODE_LOST, None),  # NODE_FAIL row, then PENDING again
    ("nodefail", "29", S.FAILED, K.NODE_LOST, None),
    ("requeued", "34", S.RECOVERING, K.REQUEUED, None),
]


@pytest.mark.parametrize(("name", "ref", "state", "kind", "code"), SACCT_ONLY,
                         ids=[f"{c[0]}-{c[1]}" for c in SACCT_ONLY])
def test_captured_accounting_only(name: str, ref: str, state: S, kind: K,
                                  code: int | None) -> None:
    _, groups = load(name)
    report = object_report(ref=ref, token=None, job=None, groups=groups[ref], nodes={},
                           lost_since=None, now=NOW)
    assert (report.state, report.cause.kind, report.cause.exit_code) == (state, kind, code)
    assert report.token  # the comment: found by token after a crash


def test_exit_137_from_accounting_says_it_may_be_137() -> None:
    _, groups = load("exit137")
    report = object_report(ref="21", token=None, job=None, groups=groups["21"], nodes={},
                           lost_since=None, now=NOW)
    assert "ExitCode=9:0" in report.cause.detail and "137" not in report.cause.detail
    assert "9 or 137" in report.cause.note


def test_cancelled_by_a_person_names_uid_from_accounting() -> None:
    _, groups = load("cancelled")
    report = object_report(ref="31", token=None, job=None, groups=groups["31"], nodes={},
                           lost_since=None, now=NOW)
    assert report.cause.actor == "0" and report.cause.provenance is P.ACTOR
    assert report.cause.detail.startswith("CANCELLED by 0")


def test_requeued_executions_each_have_their_cause() -> None:
    jobs, groups = load("nodefail")
    report = object_report(ref="28", token=None, job=jobs["28"], groups=groups["28"],  # type: ignore[arg-type]
                           nodes={}, lost_since=None, now=NOW)
    assert [e.cause.kind if e.cause else None for e in report.executions] == [K.NODE_LOST]
    assert report.executions[0].nodes == ("n2",)
    jobs, groups = load("preempted")
    report = object_report(ref="25", token=None, job=jobs["25"], groups=groups["25"],  # type: ignore[arg-type]
                           nodes={}, lost_since=None, now=NOW)
    assert report.state is S.RECOVERING
    assert [e.cause.kind if e.cause else None for e in report.executions] == [K.PREEMPTED]
    assert "restarts=1" in report.cause.detail


def test_synthetic_two_executions_then_running() -> None:
    """sacct -D with a PREEMPTED then a NODE_FAIL execution, and squeue RUNNING again."""
    header = (FIX / "preempted.sacct-D.txt").read_text().splitlines()[0]
    text = "\n".join([
        header,
        "25|25|PREEMPTED|0:0|0:0|None|2026-11-30T11:33:45|2026-11-30T11:33:48|"
        "2026-11-30T11:33:51|n1|low|tok.1",
        "25|25|NODE_FAIL|0:0|0:0|None|2026-11-30T11:33:52|2026-11-30T11:36:00|"
        "2026-11-30T11:37:00|n2|low|tok.1",
    ])
    groups = group_sacct(parse_sacct(text))["25"]
    jobs, _ = load("preempt-before")
    running = jobs["25"]
    report = object_report(ref="25", token="tok.1", job=running, groups=groups,  # type: ignore[arg-type]
                           nodes={}, lost_since=None, now=NOW)
    kinds = [e.cause.kind if e.cause else None for e in report.executions]
    assert kinds == [K.PREEMPTED, K.NODE_LOST, None]
    assert [e.index for e in report.executions] == [0, 1, 2]
    assert report.state is S.RUNNING and report.cause.kind is K.NONE


# --------------------------------------------------------------------------- node loss


def test_running_on_a_lost_node_is_node_lost_with_lost_since() -> None:
    jobs, _ = load("preempt-before")  # job 25 RUNNING on n1
    nodes = {n.name: n for n in parse_sinfo_json((FIX / "notresponding.sinfo.json").read_text())}
    assert node_health.node_lost(nodes["n1"])
    report = object_report(ref="25", token=None, job=jobs["25"], groups=[], nodes=nodes,  # type: ignore[arg-type]
                           lost_since=None, now=NOW)
    assert report.state is S.RUNNING and report.cause.kind is K.NODE_LOST
    assert report.lost_since == nodes["n1"].reason_at  # Slurm's own time for the reason
    assert "n1 DOWN+NOT_RESPONDING reason=Not responding" in report.cause.detail
    (unit,) = report.unhealthy_units
    assert (unit.unit, unit.nodes) == ("25", ("n1",))
    assert unit.detail.startswith("n1 DOWN+NOT_RESPONDING reason=Not responding")
    earlier = NOW - timedelta(minutes=3)
    report = object_report(ref="25", token=None, job=jobs["25"], groups=[], nodes=nodes,  # type: ignore[arg-type]
                           lost_since=earlier, now=NOW)
    assert report.lost_since == earlier
    # The other job (on n2) is untouched.
    other = object_report(ref="26", token=None, job=jobs["26"], groups=[], nodes=nodes,  # type: ignore[arg-type]
                          lost_since=None, now=NOW)
    assert other.cause.kind is K.NONE and other.lost_since is None
    assert other.unhealthy_units == ()


def test_node_health_words() -> None:
    nodes = {n.name: n for n in parse_sinfo_json((FIX / "idle.sinfo.json").read_text())}
    assert not any(node_health.node_unhealthy(n) for n in nodes.values())
    drained = mapping.NodeInfo(name="n9", state="IDLE", flags=("DRAIN",))
    assert node_health.node_unhealthy(drained) and not node_health.node_lost(drained)


def test_gated_is_held_since_submission() -> None:
    jobs, _ = load("held-submit")
    report = object_report(ref="32", token=None, job=jobs["32"], groups=[], nodes={},  # type: ignore[arg-type]
                           lost_since=None, now=NOW)
    assert report.gated
    jobs, _ = load("held-user")  # a person's uhold on a job that was eligible
    report = object_report(ref="33", token=None, job=jobs["33"], groups=[], nodes={},  # type: ignore[arg-type]
                           lost_since=None, now=NOW)
    assert report.state is S.HELD and not report.gated


def test_released_after_being_held() -> None:
    jobs, _ = load("begin-later")
    report = object_report(ref="33", token=None, job=jobs["33"], groups=[], nodes={},  # type: ignore[arg-type]
                           lost_since=None, now=NOW, was_held=True)
    assert (report.state, report.cause.kind, report.cause.provenance) == (
        S.PENDING, K.RELEASED, P.ACTOR)


def test_missing_everywhere_is_not_seen_never_ended() -> None:
    # S16: neither squeue nor accounting knowing a job is silence, not Slurm's word.
    assert object_report(ref="999", token="tok.1", job=None, groups=[], nodes={},
                         lost_since=None, now=NOW) is None
    assert array_report(ref="999", token="tok.1", tasks=[], now=NOW) is None


def test_an_end_accounting_has_not_finished_writing_is_not_recorded_yet() -> None:
    """The OOM of an srun step is only in the step row: while squeue says FAILED but
    accounting lacks the steps, the object still counts as running (no end is recorded on
    half the words); past the grace, squeue's word is used."""
    jobs, groups = load("oom")
    job = jobs["22"]
    row_only = [(row, []) for row, _ in groups["22"]]  # the allocation row, no steps yet
    end = datetime.fromtimestamp(1796038420, UTC)
    soon = object_report(ref="22", token=None, job=job, groups=row_only,  # type: ignore[arg-type]
                         nodes={}, lost_since=None, now=end + timedelta(seconds=5))
    assert (soon.state, soon.cause.kind) == (S.RUNNING, K.NONE)
    assert "waiting for accounting" in soon.cause.note
    assert soon.cause.detail.startswith("OUT_OF_MEMORY") or soon.cause.detail.startswith(
        jobs["22"].state)  # type: ignore[attr-defined]
    assert "waiting" not in soon.cause.detail
    written = object_report(ref="22", token=None, job=job,  # type: ignore[arg-type]
                            groups=groups["22"], nodes={}, lost_since=None,
                            now=end + timedelta(seconds=5))
    assert (written.state, written.cause.kind) == (S.FAILED, K.OUT_OF_MEMORY)
    late = object_report(ref="22", token=None, job=job, groups=row_only,  # type: ignore[arg-type]
                         nodes={}, lost_since=None,
                         now=end + mapping.ACCOUNTING_GRACE + timedelta(seconds=1))
    assert late.state is S.FAILED  # squeue's word, once accounting is overdue


def test_sig_oom_in_the_derived_exit_code_is_out_of_memory_before_the_step_rows() -> None:
    """Slurm marks a step its cgroup OOM-killed with SIG_OOM (wait status 253, sacct 0:125);
    squeue's derived_exit_code carries it before accounting has the step rows."""
    jobs, _ = load("oom")
    late = object_report(ref="22", token=None, job=jobs["22"], groups=[],  # type: ignore[arg-type]
                         nodes={}, lost_since=None, now=NOW)
    assert (late.state, late.cause.kind) == (S.FAILED, K.OUT_OF_MEMORY)
    assert "DerivedExitCode=" in late.cause.detail


# --------------------------------------------------------------------------- detail = words


# dispatch's own phrases that once were appended to the detail (issue 12, item 6).
DISPATCH_PHRASES = ("can never start", "lost:", "waiting for accounting", "per squeue",
                    "sacct prints", "less 128", "squeue exit_code ", "; now ", "no such job")
# Field names detail() puts before a value: Slurm's own names for those fields.
LABELS = ("reason=", "description=", "ExitCode=", "DerivedExitCode=", "exit_code=",
          "restarts=", "nodes=")


def _fixture_words(name: str) -> str:
    return "\n".join(p.read_text() for p in sorted(FIX.glob(f"{name}.*"))
                     if p.suffix in (".json", ".txt"))


def _scheduler_parts(detail: str, raw: str) -> list[str]:
    """The parts of a detail that are not the fixture's own words (should be none)."""
    foreign = []
    for part in detail.split("; "):
        for label in LABELS:
            if part.startswith(label):
                part = part[len(label):]
                break
        if part.startswith("step "):
            pieces = part[len("step "):].split(" ")
        else:
            pieces = [part]
        foreign += [p for p in pieces if p and p not in raw]
    return foreign


@pytest.mark.parametrize("name", sorted({c[0] for c in CAPTURED} | {c[0] for c in SACCT_ONLY}))
def test_every_captured_cause_has_only_the_schedulers_words_in_detail(name: str) -> None:
    """Issue 12 item 6: "detail is the scheduler's own words, verbatim. No stripping, no
    appended text." For every job of every capture, as squeue + sacct, and as sacct alone:
    each part of the detail is a word the capture holds, under Slurm's name for the field;
    dispatch's own words are only in the note."""
    jobs, groups = load(name)
    raw = _fixture_words(name)
    refs = set(jobs) | set(groups)
    assert refs
    for ref in sorted(refs):
        views = []
        if ref in jobs:
            views.append(object_report(ref=ref, token=None, job=jobs[ref],  # type: ignore[arg-type]
                                       groups=groups.get(ref, []), nodes={}, lost_since=None,
                                       now=NOW))
        if ref in groups:
            views.append(object_report(ref=ref, token=None, job=None, groups=groups[ref],
                                       nodes={}, lost_since=None, now=NOW))
        causes = [c for r in views for c in (r.cause, *(e.cause for e in r.executions)) if c]
        for cause in causes:
            assert not any(p in cause.detail for p in DISPATCH_PHRASES), (ref, cause)
            assert _scheduler_parts(cause.detail, raw) == [], (ref, cause.detail)


def test_a_lost_node_keeps_sinfos_words_in_detail_and_says_lost_in_the_note() -> None:
    jobs, _ = load("preempt-before")
    nodes = {n.name: n for n in parse_sinfo_json((FIX / "notresponding.sinfo.json").read_text())}
    report = object_report(ref="25", token=None, job=jobs["25"], groups=[], nodes=nodes,  # type: ignore[arg-type]
                           lost_since=None, now=NOW)
    assert report.cause.note == "node(s) lost under the running job: n1"
    assert "lost" not in report.cause.detail
    assert report.cause.detail.startswith("RUNNING; ")
    assert report.cause.detail.endswith(node_health.node_words(nodes["n1"]))


def test_squeues_exit_code_sits_beside_saccts_under_its_own_name() -> None:
    jobs, groups = load("exit137")
    report = object_report(ref="21", token=None, job=jobs["21"], groups=groups["21"],  # type: ignore[arg-type]
                           nodes={}, lost_since=None, now=NOW)
    assert report.cause.exit_code == 137
    assert "ExitCode=9:0" in report.cause.detail and "exit_code=" in report.cause.detail
    assert "(" not in report.cause.detail and report.cause.note == ""


def test_recovering_keeps_both_executions_words_and_no_word_of_its_own() -> None:
    preempted = classify(sig("PREEMPTED", nodes="n1"))[1]
    _, cause = classify(sig("PENDING", "BeginTime", restarts=1), previous=preempted)
    assert cause.detail == "PREEMPTED; nodes=n1; PENDING; reason=BeginTime; restarts=1"
    assert "now" in cause.note


def test_an_ended_job_squeue_still_shows_has_the_nodes_accounting_kept() -> None:
    """While a job is COMPLETING squeue's node list shrinks, each node leaving as its epilog
    ends (Slurm 26.05 in CI: a job on n2,n3 read as n2 only); the allocation is accounting's."""
    import msgspec

    jobs, _ = load("completed")
    job = msgspec.structs.replace(jobs["19"], nodes="n2")  # type: ignore[type-var]
    text = (FIX / "completed.sacct-D.txt").read_text().replace("|n3|", "|n[2-3]|")
    groups = group_sacct(parse_sacct(text))["19"]
    report = object_report(ref="19", token=None, job=job, groups=groups,  # type: ignore[arg-type]
                           nodes={}, lost_since=None, now=NOW)
    assert (report.state, report.nodes) == (S.SUCCEEDED, ("n2", "n3")), report



def test_a_completing_job_accounting_says_ended_has_the_nodes_accounting_kept() -> None:
    """squeue still says COMPLETING (its node list down to the nodes whose epilog runs) while
    accounting says how it ended: the end is accounting's, and so are its nodes (CI, Slurm
    22.05: a job on n2,n3 read as n2)."""
    import msgspec

    jobs, _ = load("completed")
    job = msgspec.structs.replace(jobs["19"], nodes="n2", state="COMPLETING",  # type: ignore[type-var]
                                  states=("COMPLETING",))
    text = (FIX / "completed.sacct-D.txt").read_text().replace("|n3|", "|n[2-3]|")
    groups = group_sacct(parse_sacct(text))["19"]
    report = object_report(ref="19", token=None, job=job, groups=groups,  # type: ignore[arg-type]
                           nodes={}, lost_since=None, now=NOW)
    assert (report.state, report.nodes) == (S.SUCCEEDED, ("n2", "n3")), report


def _shrunken_accounting() -> list:  # type: ignore[type-arg]
    """As 22.05 printed it in the seconds after a 2-node job ended (seen on the testbed):
    the job row and its batch step on n2 only, its srun step on both nodes."""
    text = (FIX / "completed.sacct-D.txt").read_text()
    lines = [ln.replace("|n3|", "|n2|") if ln.startswith(("19|", "19.batch|"))
             else ln.replace("|n3|", "|n[2-3]|") for ln in text.splitlines()]
    return group_sacct(parse_sacct("\n".join(lines) + "\n"))["19"]


def test_an_ended_job_has_every_node_any_view_shows() -> None:
    """Accounting's job row can be as short as squeue's list while a job ends (22.05: the job
    row n2, its srun step n[2-3], squeue n[2-3]): the nodes are the union of the views."""
    import msgspec

    jobs, _ = load("completed")
    job = msgspec.structs.replace(jobs["19"], nodes="n[2-3]")  # type: ignore[type-var]
    groups = _shrunken_accounting()
    assert groups[-1][0].nodes == "n2"
    for seen in (job, None):  # squeue still shows it, or only accounting knows it
        report = object_report(ref="19", token=None, job=seen, groups=groups,  # type: ignore[arg-type]
                               nodes={}, lost_since=None, now=NOW)
        assert (report.state, report.nodes) == (S.SUCCEEDED, ("n2", "n3")), report
        assert [e.nodes for e in report.executions] == [("n2", "n3")]
