"""Parsers for squeue --json, sacct -P, sinfo --json, sbatch --parsable: real captures, the
23.11+ shapes, and fuzzing (bad output -> a typed error, never a crash). No Slurm needed."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.backends.slurm.nodes import parse_sinfo_json
from dispatch.backends.slurm.parse import (
    SACCT_FIELDS,
    ExitStatus,
    SlurmOutputError,
    SlurmQueryError,
    expand_nodelist,
    group_sacct,
    parse_exit_pair,
    parse_sacct,
    parse_sacct_time,
    parse_sbatch_parsable,
    parse_squeue_json,
    wait_status,
)

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "slurm"
HEADER = "|".join(SACCT_FIELDS)


@pytest.mark.parametrize("path", sorted(FIX.glob("*.squeue.json")), ids=lambda p: p.name)
def test_every_captured_squeue_parses(path: Path) -> None:
    snap = parse_squeue_json(path.read_text())
    assert snap.release == "22.05.8"
    assert snap.jobs
    for job in snap.jobs:
        assert job.job_id > 0 and job.state


@pytest.mark.parametrize("path", sorted(FIX.glob("*.sacct*.txt")), ids=lambda p: p.name)
def test_every_captured_sacct_parses(path: Path) -> None:
    rows = parse_sacct(path.read_text())
    for row in rows:
        assert row.base_id.isdigit()


@pytest.mark.parametrize("path", sorted(FIX.glob("*.sinfo.json")), ids=lambda p: p.name)
def test_every_captured_sinfo_parses(path: Path) -> None:
    nodes = parse_sinfo_json(path.read_text())
    assert sorted(n.name for n in nodes) == ["n1", "n2", "n3", "n4"]


def test_squeue_22_05_exit_codes_are_wait_statuses() -> None:
    jobs = {j.ref: j for j in parse_squeue_json((FIX / "exit3.squeue.json").read_text()).jobs}
    assert jobs["20"].exit == ExitStatus(code=3, text="768")
    jobs = {j.ref: j for j in parse_squeue_json((FIX / "exit137.squeue.json").read_text()).jobs}
    assert jobs["21"].exit is not None and jobs["21"].exit.code == 137
    jobs = {j.ref: j for j in parse_squeue_json((FIX / "signal.squeue.json").read_text()).jobs}
    assert jobs["24"].exit == ExitStatus(signal=9, text="9")


def test_squeue_times_and_fields() -> None:
    jobs = {j.ref: j for j in parse_squeue_json((FIX / "preempted.squeue.json").read_text()).jobs}
    requeued = jobs["25"]
    assert requeued.state == "PENDING" and requeued.reason == "BeginTime"
    assert requeued.restarts == 1 and requeued.requeue is True
    assert requeued.end_time is None  # 22.05 prints a far-future guess for pending jobs
    assert requeued.comment == "cap.preempt-requeue.0"
    assert jobs["27"].nodes == "n[1-2]" and jobs["27"].partition == "high"
    assert jobs["27"].start_time == datetime.fromtimestamp(1796038434, tz=UTC)


def test_squeue_unreachable_exits_0_with_errors() -> None:
    """With slurmctld stopped, 22.05's squeue --json exits 0, prints an errors entry and no
    jobs: that must not read as "no jobs"."""
    text = (FIX / "unreachable.squeue.txt").read_text()
    body = text[: text.rindex("}") + 1]
    with pytest.raises(SlurmQueryError, match="slurm_load_jobs"):
        parse_squeue_json(body)


# The 23.11+ (openapi v0.0.40) shapes, as documented: job_state a list of the base state and
# its flags; exit_code a structure; times {set, infinite, number}; meta.slurm lower case.
V40_JOB = {
    "job_id": 501,
    "job_state": ["PENDING", "REQUEUED"],
    "state_reason": "BeginTime",
    "state_description": "",
    "exit_code": {"status": ["ERROR"], "return_code": {"set": True, "infinite": False,
                                                       "number": 3},
                  "signal": {"id": {"set": False, "infinite": False, "number": 0},
                             "name": ""}},
    "derived_exit_code": {"status": ["SUCCESS"], "return_code": {"set": True,
                                                                 "infinite": False,
                                                                 "number": 0},
                          "signal": {"id": {"set": False, "infinite": False, "number": 0},
                                     "name": ""}},
    "restart_cnt": 1,
    "requeue": True,
    "nodes": "n[1-2]",
    "comment": "job-1.2",
    "start_time": {"set": True, "infinite": False, "number": 1796038434},
    "end_time": {"set": True, "infinite": False, "number": 0},
    "array_job_id": {"set": True, "infinite": False, "number": 0},
    "array_task_id": {"set": False, "infinite": False, "number": 0},
}
V40_DOC = {"meta": {"plugin": {"type": "openapi/slurmctld", "name": "Slurm OpenAPI slurmctld",
                               "data_parser": "data_parser/v0.0.40"},
                    "slurm": {"version": {"major": "23", "micro": "1", "minor": "11"},
                              "release": "23.11.1", "cluster": "dispatch"}},
           "errors": [], "warnings": [], "jobs": [V40_JOB]}


def test_squeue_23_11_shapes() -> None:
    snap = parse_squeue_json(json.dumps(V40_DOC))
    assert snap.release == "23.11.1"
    (job,) = snap.jobs
    assert job.state == "REQUEUED"  # the flag wins, as 22.05 prints it
    assert job.states == ("PENDING", "REQUEUED")
    assert job.exit is not None and job.exit.code == 3
    assert job.restarts == 1 and job.array_task_id is None
    assert job.start_time == datetime.fromtimestamp(1796038434, tz=UTC)
    assert job.end_time is None


def test_squeue_23_11_signalled_exit() -> None:
    job = dict(V40_JOB, job_state=["FAILED"], exit_code={
        "status": ["SIGNALED"], "return_code": {"set": False, "infinite": False, "number": 0},
        "signal": {"id": {"set": True, "infinite": False, "number": 9}, "name": "KILL"}})
    (parsed,) = parse_squeue_json(json.dumps(dict(V40_DOC, jobs=[job]))).jobs
    assert parsed.state == "FAILED" and parsed.exit is not None
    assert parsed.exit.signal == 9 and parsed.exit.code is None


def test_sinfo_23_11_state_list() -> None:
    doc = {"meta": {}, "errors": [], "nodes": [
        {"name": "n1", "state": ["DOWN", "NOT_RESPONDING"], "reason": "Not responding",
         "reason_changed_at": {"set": True, "infinite": False, "number": 1796038661}}]}
    (node,) = parse_sinfo_json(json.dumps(doc))
    assert node.state == "DOWN" and node.flags == ("NOT_RESPONDING",)
    assert node.reason_at == datetime.fromtimestamp(1796038661, tz=UTC)


def test_sinfo_captured_not_responding() -> None:
    nodes = {n.name: n for n in parse_sinfo_json((FIX / "notresponding.sinfo.json").read_text())}
    assert nodes["n1"].words == "DOWN+NOT_RESPONDING"
    assert nodes["n1"].reason == "Not responding" and nodes["n1"].reason_by == "root"
    assert nodes["n2"].words == "IDLE" and nodes["n2"].reason_at is None


def test_sacct_rows_and_groups_from_a_requeued_job() -> None:
    rows = parse_sacct((FIX / "nodefail.sacct-D.txt").read_text())
    groups = group_sacct(rows)
    first, second = groups["28"]
    assert first[0].state == "NODE_FAIL" and [s.step for s in first[1]] == ["batch", "0"]
    assert second[0].state == "PENDING" and second[0].start is None and second[1] == []
    assert first[0].comment == "cap.nodefail-requeue.0" and second[0].comment == ""


def test_sacct_cancelled_by_and_exit_pairs() -> None:
    (row, *_steps) = parse_sacct((FIX / "cancelled.sacct-D.txt").read_text())
    assert row.state == "CANCELLED by 0" and row.state_word == "CANCELLED"
    (row, *_) = parse_sacct((FIX / "exit137.sacct-D.txt").read_text())
    assert row.exit == ExitStatus(code=9, text="9:0")  # sacct subtracted 128
    (row, _batch, step) = parse_sacct((FIX / "oom.sacct-D.txt").read_text())
    assert step.state == "OUT_OF_MEMORY" and step.exit == ExitStatus(signal=125, text="0:125")


def test_sacct_comment_may_hold_the_separator() -> None:
    line = "7|7|COMPLETED|0:0|0:0|None|Unknown|Unknown|Unknown|n1|low|a|b|c"
    (row,) = parse_sacct(HEADER + "\n" + line)
    assert row.comment == "a|b|c"


def test_sacct_job_id_forms() -> None:
    lines = [HEADER] + [f"{jid}|{raw}|COMPLETED|0:0||None|Unknown|Unknown|Unknown|n1|low|"
                        for jid, raw in (("123", "123"), ("123.batch", "123.batch"),
                                         ("123.extern", "123.extern"), ("123.0", "123.0"),
                                         ("123_4", "124"), ("123_[5-1024]", "123"),
                                         ("123+0", "123"))]
    rows = parse_sacct("\n".join(lines))
    assert [r.step for r in rows] == [None, "batch", "extern", "0", None, None, None]
    assert rows[4].base_id == "124"


@pytest.mark.parametrize("text", [
    "", "JobID|State\n1|COMPLETED", HEADER + "\n1|1|COMPLETED",
    HEADER + "\nx|x|COMPLETED|0:0|0:0|None|Unknown|Unknown|Unknown|n1|low|",
    HEADER + "\n1|1|COMPLETED|zero|0:0|None|Unknown|Unknown|Unknown|n1|low|",
    HEADER + "\n1|1|COMPLETED|0:0|0:0|None|yesterday|Unknown|Unknown|n1|low|",
    HEADER + "\n1|1||0:0|0:0|None|Unknown|Unknown|Unknown|n1|low|",
])
def test_sacct_malformed_is_a_typed_error(text: str) -> None:
    with pytest.raises(SlurmOutputError):
        parse_sacct(text)


def test_exit_pairs_and_wait_status() -> None:
    assert parse_exit_pair("3:0") == ExitStatus(code=3, text="3:0")
    assert parse_exit_pair("0:15") == ExitStatus(signal=15, text="0:15")
    assert wait_status(768) == ExitStatus(code=3, text="768")
    assert wait_status(15) == ExitStatus(signal=15, text="15")
    assert wait_status(4294967294).code is None
    with pytest.raises(ValueError):
        parse_exit_pair("3")


def test_sacct_time() -> None:
    assert parse_sacct_time("Unknown") is None
    assert parse_sacct_time("2026-11-30T11:33:34") is not None
    with pytest.raises(ValueError):
        parse_sacct_time("soon")


def test_sbatch_parsable() -> None:
    assert parse_sbatch_parsable((FIX / "sbatch-parsable.txt").read_text()).job_id == "45"
    r = parse_sbatch_parsable("812;cluster2\n")
    assert (r.job_id, r.cluster) == ("812", "cluster2")
    assert parse_sbatch_parsable("sbatch: warning: x\n9\n").job_id == "9"
    for bad in ("", "Submitted batch job 5", ";c"):
        with pytest.raises(SlurmOutputError):
            parse_sbatch_parsable(bad)


def test_nodelists() -> None:
    assert expand_nodelist("n[1-3,5],gpu7") == ("n1", "n2", "n3", "n5", "gpu7")
    assert expand_nodelist("node[08-10]") == ("node08", "node09", "node10")
    assert expand_nodelist("None assigned") == ()
    for bad in ("n[1-", "n[a-b]", "n]", "n[3-1]", ",", "n[1-2]x[3]"):
        with pytest.raises(ValueError):
            expand_nodelist(bad)


# --------------------------------------------------------------------------- fuzzing

JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=12),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from(["job_id", "job_state", "exit_code", "jobs", "nodes",
                                       "name", "state", "errors", "number", "set",
                                       "restart_cnt", "start_time", "comment", "meta",
                                       "state_flags", "reason_changed_at", "status",
                                       "return_code", "signal", "id"]) | st.text(max_size=6),
                      children, max_size=6),
    max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(doc=JSONISH)
def test_fuzz_squeue_and_sinfo_raise_only_typed_errors(doc: object) -> None:
    text = json.dumps(doc)
    for parse in (parse_squeue_json, parse_sinfo_json):
        try:
            parse(text)
        except (SlurmOutputError, SlurmQueryError):
            pass


@settings(max_examples=200, deadline=None)
@given(job=st.fixed_dictionaries({"job_id": st.integers(1, 10**6),
                                  "job_state": st.text(min_size=1, max_size=10)},
                                 optional={k: JSONISH for k in (
                                     "exit_code", "restart_cnt", "start_time", "nodes",
                                     "comment", "array_task_id", "requeue")}))
def test_fuzz_squeue_job_fields(job: dict[str, object]) -> None:
    try:
        parse_squeue_json(json.dumps({"jobs": [job]}))
    except SlurmOutputError:
        pass


@settings(max_examples=300, deadline=None)
@given(text=st.text(max_size=300))
def test_fuzz_text_parsers(text: str) -> None:
    for parse in (parse_squeue_json, parse_sinfo_json, parse_sacct, parse_sbatch_parsable):
        try:
            parse(text)  # type: ignore[operator]
        except (SlurmOutputError, SlurmQueryError):
            pass


@settings(max_examples=300, deadline=None)
@given(fields=st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r"),
                               max_size=12), min_size=1, max_size=14))
def test_fuzz_sacct_lines(fields: list[str]) -> None:
    try:
        parse_sacct(HEADER + "\n" + "|".join(fields))
    except SlurmOutputError:
        pass


@given(text=st.text(max_size=40))
def test_fuzz_nodelist(text: str) -> None:
    try:
        expand_nodelist(text)
    except ValueError:
        pass
