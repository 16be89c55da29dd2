"""The publisher against a real directory: H1 per-unit files and the H4 state file."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta, timezone

import pytest

from dispatch.segment_health import publisher
from dispatch.segment_health.publisher import (
    DirectoryNotAbsolute,
    InvalidDecision,
    InvalidUnitId,
    PublishedDecision,
    StateFormatError,
    clear,
    list_decisions,
    make_decision,
    publish,
    read_state,
)

NOW = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)


def decision(job="123", task="7", **overrides):
    fields = dict(
        job_id=job,
        task_id=task,
        nodes=["n3"],
        cause="node-drained",
        who="dispatch-supervisor",
        why="node n3 DRAIN: Kill task failed",
        when=NOW,
    )
    fields.update(overrides)
    return make_decision(**fields)


def test_make_decision_is_the_diagnostic_document():
    doc = decision()
    assert doc == {
        "job": "123",
        "task": "7",
        "nodes": ["n3"],
        "cause": "node-drained",
        "who": "dispatch-supervisor",
        "why": "node n3 DRAIN: Kill task failed",
        "when": "2026-05-01T12:00:00+00:00",
    }
    offset = make_decision(
        job_id="1",
        task_id="1",
        nodes=[],
        cause="operator",
        who="alice",
        why="bad NIC",
        when=datetime(2026, 5, 1, 14, 0, tzinfo=timezone(timedelta(hours=2))),
        extra={"ticket": "OPS-1"},
    )
    assert offset["when"] == "2026-05-01T14:00:00+02:00" and offset["ticket"] == "OPS-1"


@pytest.mark.parametrize(
    "overrides",
    [
        {"when": datetime(2026, 5, 1, 12, 0)},  # naive: ambiguous for every reader
        {"cause": ""},
        {"who": ""},
        {"why": None},
        {"nodes": "n3"},  # a string is not a list of node names
        {"nodes": [""]},
    ],
)
def test_make_decision_refuses_incomplete_diagnostics(overrides):
    with pytest.raises(InvalidDecision):
        decision(**overrides)


def test_publish_writes_a_complete_non_empty_regular_file(tmp_path):
    path = publish(tmp_path, "123", "7", decision=decision())
    assert path == tmp_path / "segment_health_check.123.7"
    info = os.lstat(path)
    assert stat.S_ISREG(info.st_mode) and info.st_size > 0
    assert stat.S_IMODE(info.st_mode) == 0o644  # launchers may run as another user
    raw = path.read_bytes()
    assert raw.endswith(b"\n") and json.loads(raw) == decision()
    assert read_state(tmp_path, "123") == ["7"]
    assert (tmp_path / "segment_health_check.123.state").read_bytes() == b'["7"]\n'


def test_publish_leaves_no_temp_files(tmp_path):
    publish(tmp_path, "123", "7", decision=decision())
    publish(tmp_path, "123", "7", decision=decision(why="again"))
    clear(tmp_path, "123", "7")
    leftovers = [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]
    assert leftovers == []
    # only the (hidden) lock file remains: see publisher.py for why it is kept
    assert os.listdir(tmp_path) == [".segment_health_check.123.lock"]


def test_republishing_replaces_the_diagnostics(tmp_path):
    publish(tmp_path, "123", "7", decision=decision(why="first"))
    publish(tmp_path, "123", "7", decision=decision(why="second"))
    [found] = list_decisions(tmp_path)
    assert found.decision is not None and found.decision["why"] == "second"
    assert read_state(tmp_path, "123") == ["7"]


def test_state_follows_publish_and_clear(tmp_path):
    for task in ("12", "7", "3"):
        publish(tmp_path, "123", task, decision=decision(task=task))
    publish(tmp_path, "999", "1", decision=decision(job="999", task="1"))
    assert read_state(tmp_path, "123") == ["3", "7", "12"]
    assert read_state(tmp_path, "999") == ["1"]
    assert clear(tmp_path, "123", "7") is True
    assert read_state(tmp_path, "123") == ["3", "12"]
    assert not (tmp_path / "segment_health_check.123.7").exists()
    assert clear(tmp_path, "123", "7") is False  # nothing left to clear
    clear(tmp_path, "123", "3")
    clear(tmp_path, "123", "12")
    # clearing the last unit removes the state file (not "[]"): see publisher.py
    assert read_state(tmp_path, "123") is None
    assert not (tmp_path / "segment_health_check.123.state").exists()
    assert read_state(tmp_path, "999") == ["1"]  # other jobs untouched


def test_a_regular_job_uses_its_job_id_for_both(tmp_path):
    job, task = publisher.unit_ids("4242")
    path = publish(tmp_path, job, task, decision=decision(job=job, task=task))
    assert path.name == "segment_health_check.4242.4242"
    assert read_state(tmp_path, "4242") == ["4242"]


def test_an_array_task_uses_array_job_and_task_ids(tmp_path):
    job, task = publisher.unit_ids("4250", array_job_id="4242", array_task_id="3")
    path = publish(tmp_path, job, task, decision=decision(job=job, task=task))
    assert path.name == "segment_health_check.4242.3"


def test_the_directory_must_be_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for call in (
        lambda: publish("dec", "1", "1", decision={"x": 1}),
        lambda: clear("dec", "1", "1"),
        lambda: list_decisions("dec"),
        lambda: read_state("dec", "1"),
    ):
        with pytest.raises(DirectoryNotAbsolute):
            call()
    assert os.listdir(tmp_path) == []  # nothing written relative to the cwd


def test_publish_creates_a_missing_directory(tmp_path):
    publish(tmp_path / "a" / "b", "1", "1", decision={"x": 1})
    assert read_state(tmp_path / "a" / "b", "1") == ["1"]


@pytest.mark.parametrize(
    ("job", "task"),
    [("1/..", "1"), ("1", "../x"), ("1", "state"), ("", "1"), ("1", ""), ("1", "007"),
     ("01", "1"), ("1", "00")],
)
def test_ids_must_be_slurm_ids(tmp_path, job, task):
    with pytest.raises(InvalidUnitId):
        publish(tmp_path, job, task, decision={"x": 1})
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize(
    "bad",
    [
        {"when": object()},  # not JSON
        {"x": float("nan")},  # not JSON either
        {"job": "999"},  # names another unit
        {"task": "8"},
        ["not", "an", "object"],
    ],
)
def test_a_decision_must_be_a_json_object_for_this_unit(tmp_path, bad):
    with pytest.raises(InvalidDecision):
        publish(tmp_path, "123", "7", decision=bad)
    assert not (tmp_path / "segment_health_check.123.7").exists()


def test_state_overflow_still_writes_the_unit_and_keeps_a_true_state(tmp_path, caplog):
    # Issue 12 item 4: past the 8 KiB limit the per-unit file is still written (the seed's
    # consumer reads only it); the state lists the tasks that fit, every one of them truly
    # excluded, and the overflow is reported (an escalation in the supervisor).
    # 10-digit ids take 13 bytes each: 630 of them make a line of exactly 8192 bytes.
    job = "5"
    ids = [str(10**9 + i) for i in range(631)]
    for task in ids[:629]:  # as if published earlier (the state is derived from these)
        (tmp_path / f"segment_health_check.{job}.{task}").write_bytes(b"{}\n")
    publish(tmp_path, job, ids[629], decision={"n": 629})
    state_file = tmp_path / f"segment_health_check.{job}.state"
    assert len(state_file.read_bytes()) == 8192
    path = publish(tmp_path, job, ids[630], decision={"n": 630})
    assert path.read_bytes() == b'{"n":630}\n'
    assert read_state(tmp_path, job) == ids[:630]
    assert len(state_file.read_bytes()) == 8192
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert "8205 bytes" in warning.getMessage() and str(path) in warning.getMessage()


def test_list_decisions(tmp_path):
    publish(tmp_path, "20", "2", decision=decision(job="20", task="2"))
    publish(tmp_path, "20", "10", decision=decision(job="20", task="10"))
    publish(tmp_path, "3", "3", decision=decision(job="3", task="3"))
    (tmp_path / "segment_health_check.20.4").write_bytes(b"not json")  # someone else's
    (tmp_path / "segment_health_check.20.5").write_bytes(b"")  # zero-byte: not a decision
    (tmp_path / "segment_health_check.20.6").mkdir()  # not a regular file: not a decision
    (tmp_path / "unrelated.txt").write_text("x")
    found = list_decisions(tmp_path)
    assert [(d.job_id, d.task_id) for d in found] == [
        ("3", "3"),
        ("20", "2"),
        ("20", "4"),
        ("20", "10"),
    ]
    assert all(isinstance(d, PublishedDecision) for d in found)
    by_task = {d.task_id: d for d in list_decisions(tmp_path, "20")}
    assert set(by_task) == {"2", "4", "10"}
    assert by_task["4"].decision is None and by_task["4"].size == 8
    assert by_task["2"].decision == decision(job="20", task="2")
    assert by_task["2"].path == tmp_path / "segment_health_check.20.2"
    assert list_decisions(tmp_path / "missing") == []


def test_clear_repairs_a_state_left_by_a_killed_publisher(tmp_path):
    publish(tmp_path, "1", "1", decision={"x": 1})
    publish(tmp_path, "1", "2", decision={"x": 2})
    # A publisher killed between its two writes: unit 3 published, state not updated.
    (tmp_path / "segment_health_check.1.3").write_bytes(b'{"x":3}\n')
    clear(tmp_path, "1", "1")
    assert read_state(tmp_path, "1") == ["2", "3"]


def test_read_state_refuses_a_torn_line(tmp_path):
    (tmp_path / "segment_health_check.1.state").write_bytes(b'["1","')
    with pytest.raises(StateFormatError):
        read_state(tmp_path, "1")


def test_clear_in_a_missing_directory_is_false(tmp_path):
    assert clear(tmp_path / "missing", "1", "1") is False
    assert not (tmp_path / "missing").exists()


def test_a_non_canonical_id_names_the_canonical_one(tmp_path):
    with pytest.raises(InvalidUnitId) as refused:
        publish(tmp_path, "123", "007", decision={"x": 1})
    assert "write 7" in str(refused.value)


def test_a_file_named_with_a_leading_zero_is_not_a_decision(tmp_path):
    # No consumer derives such a name (Slurm ids are canonical), so it excludes nothing.
    (tmp_path / "segment_health_check.123.007").write_bytes(b"{}\n")
    publish(tmp_path, "123", "7", decision={"x": 1})
    assert [(d.job_id, d.task_id) for d in list_decisions(tmp_path)] == [("123", "7")]
    assert read_state(tmp_path, "123") == ["7"]
