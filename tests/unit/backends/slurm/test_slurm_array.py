"""Slurm job arrays: one dispatch submission = one array = ONE object report.

The pure part (task strings, sacct rows by task, the aggregation table) and the backend's
discover() against recorded-shape tool output (no Slurm): the array is found by its token,
reported once, its tasks' unhealthy nodes named per task, and sacct asked only when a task
ended or left squeue.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.backends.base import Submission
from dispatch.backends.slurm.array_mapping import array_report, task_ranges
from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.backends.slurm.parse import (
    SACCT_FIELDS,
    array_task_of,
    expand_array_tasks,
    group_sacct,
    group_sacct_array_tasks,
    parse_sacct,
    parse_sacct_time,
)
from dispatch.backends.slurm.tools import Result
from dispatch.core.model import Cause, Execution, ObjectReport, UnitHealth
from dispatch.core.model import CauseKind as K
from dispatch.core.model import State as S
from dispatch.core.spec import JobSpec

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "slurm"
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
T = [NOW - timedelta(minutes=10 - i) for i in range(10)]
HEADER = "|".join(SACCT_FIELDS)

# ----------------------------------------------------------------------------- task strings


@pytest.mark.parametrize(("text", "tasks"), [
    ("0-3", ("0", "1", "2", "3")),
    ("7", ("7",)),
    ("1,3,5", ("1", "3", "5")),
    ("0-7:2", ("0", "2", "4", "6")),
    ("0-15%4", tuple(str(i) for i in range(16))),
    ("[0-1]", ("0", "1")),
    ("[1,4-5%2]", ("1", "4", "5")),
    ("1-2,2-3", ("1", "2", "3")),
])
def test_expand_array_tasks(text: str, tasks: tuple[str, ...]) -> None:
    assert expand_array_tasks(text) == tasks


@pytest.mark.parametrize("text", ["", "a", "3-1", "0-", "0-1%0", "0-7:0", "5:2", "1,,2",
                                  "0-99999999"])
def test_bad_array_task_strings(text: str) -> None:
    with pytest.raises(ValueError, match="array task string"):
        expand_array_tasks(text)


def test_array_task_of_sacct_ids() -> None:
    assert array_task_of("123_4") == ("123", "4")
    assert array_task_of("123_4.batch") == ("123", "4")
    assert array_task_of("123_[0-3]") == ("123", "[0-3]")
    assert array_task_of("123") is None and array_task_of("123.0") is None


@given(st.sets(st.integers(min_value=0, max_value=200), min_size=1, max_size=30))
def test_task_ranges_round_trip(tasks: set[int]) -> None:
    text = task_ranges([str(t) for t in sorted(tasks)])
    assert set(expand_array_tasks(text)) == {str(t) for t in tasks}


# ----------------------------------------------------------------------------- sacct rows

SACCT_ARRAY = "\n".join([
    HEADER,
    # task 0 (its own raw id 101) ended; task 1 is the array's record (raw id 100), running;
    # tasks 2-3 have not started (one row for both).
    "100_0|101|FAILED|1:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|"
    "2026-11-30T11:52:00|n[1-2]|low|tok.1",
    "100_0.batch|101.batch|FAILED|1:0|||2026-11-30T11:50:01|2026-11-30T11:50:01|"
    "2026-11-30T11:52:00|n1||",
    "100_0.0|101.0|FAILED|1:0|||2026-11-30T11:50:01|2026-11-30T11:50:01|2026-11-30T11:52:00"
    "|n[1-2]||",
    "100_1|100|RUNNING|0:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|Unknown|n[3-4]"
    "|low|",
    "100_[2-3]|102|PENDING|0:0|0:0|Resources|2026-11-30T11:50:00|Unknown|Unknown|"
    "None assigned|low|",
    "200|200|COMPLETED|0:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|"
    "2026-11-30T11:51:00|n1|low|other.1",
])


def test_sacct_rows_by_array_task() -> None:
    by_array = group_sacct_array_tasks(group_sacct(parse_sacct(SACCT_ARRAY)))
    assert set(by_array) == {"100"}  # 200 is no array
    tasks = by_array["100"]
    assert sorted(tasks) == ["0", "1", "2", "3"]
    row, steps = tasks["0"][0]
    assert row.state == "FAILED" and [s.job_id for s in steps] == ["100_0.batch", "100_0.0"]
    assert tasks["1"][0][0].raw_id == "100"
    assert tasks["2"][0][0] is tasks["3"][0][0]  # one row stands for both


# ----------------------------------------------------------------------------- aggregation


def task(ref: str, state: S, kind: K = K.NONE, *, detail: str = "", start: int | None = 0,
         end: int | None = None, nodes: tuple[str, ...] = (), exit_code: int | None = None,
         unhealthy: tuple[str, ...] = (), lost_since: datetime | None = None,
         gated: bool = False) -> ObjectReport:
    cause = Cause(kind=kind, detail=detail or state.value.upper(), exit_code=exit_code,
                  at=T[end] if end is not None else None)
    execs = ()
    if start is not None:
        execs = (Execution(index=0, started_at=T[start],
                           ended_at=T[end] if end is not None else None,
                           cause=cause if state.terminal else None, nodes=nodes),)
    return ObjectReport(ref=ref, token="tok.1", state=state, cause=cause, executions=execs,
                        nodes=nodes, lost_since=lost_since, gated=gated,
                        unhealthy_units=(UnitHealth(unit=ref, nodes=unhealthy),)
                        if unhealthy else ())


def agg(*tasks: ObjectReport) -> ObjectReport:
    return array_report(ref="100", token="tok.1", now=NOW,
                        tasks=[(t.ref.rpartition("_")[2], t) for t in tasks])


R, F, C, OK = S.RUNNING, S.FAILED, S.CANCELLED, S.SUCCEEDED


@pytest.mark.parametrize(("states", "state", "speaker"), [
    # live while any task is; running while any task runs
    ((R, R), R, "0"),
    ((OK, R), R, "1"),
    ((F, R), R, "1"),
    ((S.PENDING, R), R, "1"),
    ((S.PENDING, S.HELD), S.PENDING, "0"),
    ((S.HELD, OK), S.HELD, "0"),
    ((S.RECOVERING, S.PENDING), S.RECOVERING, "0"),
    ((S.UNKNOWN, OK), S.UNKNOWN, "0"),
    # ended when all ended: the worst task speaks (cancel, then failure, then success)
    ((OK, OK), OK, "0"),
    ((OK, F), F, "1"),
    ((F, F), F, "0"),
    ((F, C), C, "1"),
    ((OK, C, F), C, "1"),
])
def test_array_state_table(states: Sequence[S], state: S, speaker: str) -> None:
    kinds = {F: K.NON_ZERO_EXIT, C: K.CANCELLED}
    tasks = [task(f"100_{i}", s, kinds.get(s, K.NONE), detail=f"words of task {i}",
                  end=None if not s.terminal else 3 + i)
             for i, s in enumerate(states)]
    report = agg(*tasks)
    assert report.ref == "100" and report.token == "tok.1"
    assert report.state is state
    chosen = tasks[int(speaker)]
    assert report.cause.kind is chosen.cause.kind
    assert report.cause.detail == f"words of task {speaker}"  # Slurm's words, verbatim
    assert report.cause.note.startswith(f"task {speaker} speaks for the array")


def test_failed_task_cause_names_the_task_and_the_others() -> None:
    report = agg(task("100_0", OK, end=4), task("100_1", F, K.NON_ZERO_EXIT,
                                                detail="FAILED; ExitCode=1:0", end=5,
                                                exit_code=1))
    assert report.state is F and report.cause.kind is K.NON_ZERO_EXIT
    assert report.cause.exit_code == 1
    assert report.cause.detail == "FAILED; ExitCode=1:0"
    assert report.cause.note == "task 1 speaks for the array; others: 0 succeeded"


def test_all_completed_is_succeeded_with_no_cause() -> None:
    report = agg(*(task(f"100_{i}", OK, end=2 + i) for i in range(4)))
    assert report.state is OK and report.cause.kind is K.NONE
    assert report.cause.note.endswith("; others: 1-3 succeeded")


def test_one_execution_for_the_array_closed_only_when_every_task_ended() -> None:
    running = agg(task("100_0", F, K.NON_ZERO_EXIT, start=1, end=4, nodes=("n1", "n2")),
                  task("100_1", R, start=2, nodes=("n3", "n4")))
    (run,) = running.executions
    assert run.index == 0 and run.started_at == T[1] and not run.ended
    assert run.nodes == ("n1", "n2", "n3", "n4") and running.nodes == run.nodes
    ended = agg(task("100_0", F, K.NON_ZERO_EXIT, start=1, end=4, nodes=("n1",)),
                task("100_1", OK, start=2, end=6, nodes=("n3",)))
    (run,) = ended.executions
    assert run.ended_at == T[6] and run.cause == ended.cause


def test_no_execution_before_any_task_started() -> None:
    report = agg(task("100_0", S.PENDING, start=None), task("100_1", S.PENDING, start=None))
    assert report.executions == () and report.state is S.PENDING


def test_unhealthy_units_are_the_live_tasks_with_bad_nodes() -> None:
    report = agg(task("100_0", R, nodes=("n1", "n2")),
                 task("100_1", R, nodes=("n3", "n4"), unhealthy=("n3",)),
                 task("100_2", F, K.NON_ZERO_EXIT, end=3, nodes=("n5",), unhealthy=("n5",)))
    assert report.unhealthy_units == (UnitHealth(unit="100_1", nodes=("n3",)),)


def test_running_array_with_a_lost_node_speaks_for_the_fence() -> None:
    lost = task("100_1", R, K.NODE_LOST, detail="RUNNING; lost: n3 DOWN", lost_since=T[5],
                unhealthy=("n3",))
    report = agg(task("100_0", R), lost)
    assert report.cause.kind is K.NODE_LOST and report.lost_since == T[5]
    assert report.cause.detail == "RUNNING; lost: n3 DOWN"
    assert report.cause.note.startswith("task 1 speaks for the array")
    healthy = agg(task("100_0", R), task("100_1", R))
    assert healthy.lost_since is None


def test_gated_only_when_every_live_task_is() -> None:
    held = [task(f"100_{i}", S.HELD, K.HELD, start=None, gated=True) for i in range(2)]
    assert agg(*held).gated
    assert not agg(held[0], task("100_1", S.HELD, K.HELD, start=None)).gated


def test_no_tasks_is_not_seen() -> None:
    assert array_report(ref="100", token="tok.1", tasks=[], now=NOW) is None  # S16


# ----------------------------------------------------------------------------- the backend

TEMPLATE = json.loads((FIX / "multinode.squeue.json").read_text())
# The tasks start when the sacct rows below say (sacct prints local time).
STARTED = int(parse_sacct_time("2026-11-30T11:50:01").timestamp())  # type: ignore[union-attr]


def squeue_entry(job_id: int, task_id: int | None, state: str, *, nodes: str = "",
                 task_string: str = "", exit_code: int = 0, comment: str = "tok.1",
                 start: int = STARTED, end: int = 0) -> dict[str, Any]:
    job = dict(TEMPLATE["jobs"][0])
    job.update(job_id=job_id, array_job_id=100, array_task_id=task_id,
               array_task_string=task_string, job_state=state, nodes=nodes,
               exit_code=exit_code, comment=comment,
               state_reason="None" if state != "PENDING" else "Resources",
               start_time=start if state != "PENDING" else 0, end_time=end,
               standard_output="/out/tok.1.%A_%a.out")
    return job


def squeue_json(*jobs: dict[str, Any]) -> str:
    return json.dumps({**TEMPLATE, "jobs": list(jobs)})


def sinfo_json(drained: Sequence[str] = ()) -> str:
    nodes = []
    for i in range(1, 5):
        name = f"n{i}"
        flags = ["DRAIN"] if name in drained else []
        nodes.append({"name": name, "state": "mixed", "state_flags": flags,
                      "reason": "e2e" if flags else "", "reason_changed_at": 1796038500,
                      "reason_set_by_user": "root"})
    return json.dumps({"meta": {}, "errors": [], "nodes": nodes})


class Tools:
    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []
        self.answers: dict[str, str] = {}

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        self.calls.append(tuple(argv))
        if argv[0] == "sbatch":
            return Result(tuple(argv), 0, "100\n", "")
        if argv[0] not in self.answers:
            raise AssertionError(f"unexpected call {argv}")
        return Result(tuple(argv), 0, self.answers[argv[0]], "")

    def count(self, tool: str) -> int:
        return sum(1 for c in self.calls if c[0] == tool)


RUNNING_BOTH = (squeue_entry(101, 0, "RUNNING", nodes="n[1-2]"),
                squeue_entry(100, 1, "RUNNING", nodes="n[3-4]"))


def test_a_running_array_is_one_object_found_by_its_token(tmp_path: Path) -> None:
    tools = Tools()
    tools.answers["squeue"] = squeue_json(*RUNNING_BOTH)
    tools.answers["sinfo"] = sinfo_json(drained=("n4",))
    tools.answers["sacct"] = HEADER + "\n" + SACCT_ARRAY.split("\n", 1)[1].replace(
        "FAILED", "RUNNING").replace("2026-11-30T11:52:00", "Unknown")
    b = SlurmBackend(runner=tools, clock=lambda: NOW, output_dir=tmp_path,
                        queries="json")
    d = b.discover({"tok.1"}, ())
    (obj,) = d.objects
    assert obj.ref == "100" and obj.token == "tok.1" and obj.state is S.RUNNING
    assert obj.nodes == ("n1", "n2", "n3", "n4")
    (unit,) = obj.unhealthy_units
    assert (unit.unit, unit.nodes) == ("100_1", ("n4",))
    assert unit.detail.startswith("n4 MIXED+DRAIN reason=e2e by root at ")
    # The token was searched in accounting once; then a steady tick asks squeue and sinfo only.
    sacct_before = tools.count("sacct")
    d2 = b.discover({"tok.1"}, {"100"})
    assert tools.count("sacct") == sacct_before
    assert [o.ref for o in d2.objects] == ["100"] and d2.objects[0].state is S.RUNNING


def test_submitted_array_pending_then_one_task_fails_then_all_end(tmp_path: Path) -> None:
    tools = Tools()
    b = SlurmBackend(runner=tools, clock=lambda: NOW, output_dir=tmp_path,
                        queries="json")
    spec = JobSpec(name="a", command=("x",), backend="slurm", nodes=2, slurm={"array": "0-1"})
    ref = b.submit(Submission(job_id="tok", number=1, token="tok.1", spec=spec))
    assert ref == "100"
    assert any(a == "--array=0-1" for a in tools.calls[-1])

    # Pending: the array's one record stands for both tasks; no node query, no sacct.
    tools.answers["squeue"] = squeue_json(squeue_entry(100, None, "PENDING", task_string="0-1"))
    (obj,) = b.discover({"tok.1"}, {"100"}).objects
    assert obj.state is S.PENDING and obj.executions == ()
    assert tools.count("sinfo") == 0 and tools.count("sacct") == 0

    # Task 1 ended non-zero while task 0 runs: still running, one open execution; sacct
    # asked once (for the array), and its answer kept for the ended task.
    tools.answers["squeue"] = squeue_json(
        squeue_entry(101, 0, "RUNNING", nodes="n[1-2]"),
        squeue_entry(100, 1, "FAILED", nodes="n[3-4]", exit_code=1 << 8, end=STARTED + 119))
    tools.answers["sinfo"] = sinfo_json()
    tools.answers["sacct"] = "\n".join([
        HEADER,
        "100_0|101|RUNNING|0:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|Unknown|"
        "n[1-2]|low|",
        "100_1|100|FAILED|1:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|"
        "2026-11-30T11:52:00|n[3-4]|low|tok.1",
        "100_1.0|100.0|FAILED|1:0|||2026-11-30T11:50:01|2026-11-30T11:50:01|"
        "2026-11-30T11:52:00|n[3-4]||",
    ])
    (obj,) = b.discover({"tok.1"}, {"100"}).objects
    assert obj.state is S.RUNNING and obj.cause.kind is K.NONE
    assert "task 0 " in obj.cause.note and "1 failed (non-zero-exit)" in obj.cause.note
    assert len(obj.executions) == 1 and not obj.executions[0].ended
    sacct_calls = [c for c in tools.calls if c[0] == "sacct"]
    assert len(sacct_calls) == 1 and sacct_calls[0][-2:] == ("-j", "100")

    # Task 1 leaves squeue: its end is known, so no sacct.
    tools.answers["squeue"] = squeue_json(squeue_entry(101, 0, "RUNNING", nodes="n[1-2]"))
    (obj,) = b.discover({"tok.1"}, {"100"}).objects
    assert obj.state is S.RUNNING and tools.count("sacct") == 1

    # Task 0 completes and leaves: sacct once more; the array failed, task 1 speaks.
    tools.answers["squeue"] = squeue_json()
    tools.answers["sacct"] = "\n".join([
        HEADER,
        "100_0|101|COMPLETED|0:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|"
        "2026-11-30T11:55:00|n[1-2]|low|tok.1",
        "100_1|100|FAILED|1:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|"
        "2026-11-30T11:52:00|n[3-4]|low|tok.1",
    ])
    (obj,) = b.discover({"tok.1"}, {"100"}).objects
    assert obj.state is S.FAILED and obj.cause.kind is K.NON_ZERO_EXIT
    assert obj.cause.detail.startswith("FAILED") and obj.cause.note.startswith("task 1 ")
    assert "others: 0 succeeded" in obj.cause.note
    assert obj.executions[0].ended and obj.executions[0].cause == obj.cause
    assert tools.count("sacct") == 2
    # Confirmed by accounting: cached, never asked again.
    assert b.discover({"tok.1"}, {"100"}).objects == (obj,) and tools.count("sacct") == 2


def test_an_array_ref_only_accounting_knows_is_still_one_object(tmp_path: Path) -> None:
    # A fresh backend (a new CLI process): the ref is not known to be an array until sacct
    # shows its task rows; task 1's raw id is the array id itself.
    tools = Tools()
    tools.answers["squeue"] = squeue_json()
    tools.answers["sacct"] = "\n".join([
        HEADER,
        "100_0|101|COMPLETED|0:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|"
        "2026-11-30T11:55:00|n[1-2]|low|tok.1",
        "100_1|100|COMPLETED|0:0|0:0|None|2026-11-30T11:50:00|2026-11-30T11:50:01|"
        "2026-11-30T11:56:00|n[3-4]|low|tok.1",
    ])
    b = SlurmBackend(runner=tools, clock=lambda: NOW, output_dir=tmp_path,
                        queries="json")
    (obj,) = b.discover((), {"100"}).objects
    assert obj.ref == "100" and obj.state is S.SUCCEEDED and obj.cause.kind is K.NONE
    assert obj.token == "tok.1" and obj.nodes == ("n1", "n2", "n3", "n4")


def test_array_logs_are_one_file_per_task(tmp_path: Path) -> None:
    for name in ("tok.1.100_10.out", "tok.1.100_2.out", "tok.1.1000_1.out"):
        (tmp_path / name).write_text("x")
    b = SlurmBackend(runner=Tools(), clock=lambda: NOW, output_dir=tmp_path,
                        queries="json")
    b._arrays.add("100")
    assert [p.name for p in b.logs("100")] == ["tok.1.100_2.out", "tok.1.100_10.out"]


def test_an_ended_arrays_error_is_the_speaking_tasks_own() -> None:
    """Issue 23: each task's error was read from that task's own files; the array carries the
    error of the task that speaks for it, never another task's, and none while live."""
    from dispatch.core.app_error import AppError, ErrorSource

    def failed(ref: str, words: str, end: int) -> ObjectReport:
        t = task(ref, F, K.NON_ZERO_EXIT, start=1, end=end, nodes=("n1",))
        err = AppError(source=ErrorSource.TORCHELASTIC_ERROR_FILE, message=words, node="n1")
        ex = t.executions[0]
        return ObjectReport(ref=t.ref, token=t.token, state=t.state, cause=t.cause,
                            nodes=t.nodes, executions=(Execution(
                                index=0, started_at=ex.started_at, ended_at=ex.ended_at,
                                cause=ex.cause, nodes=ex.nodes, error=err),))

    ended = agg(task("100_0", OK, end=3), failed("100_1", "ValueError: task 1", 4),
                failed("100_2", "KeyError: task 2", 5))
    (run,) = ended.executions
    assert ended.cause.note.startswith("task 1 speaks")
    assert run.error is not None and run.error.message == "ValueError: task 1"
    live = agg(failed("100_0", "ValueError: task 0", 4), task("100_1", R, start=2))
    assert live.executions[0].error is None
