"""A published segment decision lands (issue 12 item 4): the supervisor's outbox.

Real SQLite record, real decision directory, the real Supervisor tick. The scheduler is a
scripted Slurm-shaped discovery (one running job with a drained node): the subject here is
what happens between the record and the directory, which the Slurm e2e test cannot fault.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.specs import parse_spec

from dispatch.backends.registry import declarations_for
from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind, Discovery, ObjectReport, State, UnitHealth
from dispatch.core.record import Job, fold
from dispatch.segment_health import read_state
from dispatch.segment_health.directory import DecisionDirectory
from dispatch.service.requests import create_job
from dispatch.stores.base import RecordStore
from dispatch.stores.select import open_store
from dispatch.supervise.escalations import Notifier
from dispatch.supervise.loop import Supervisor

NOW = datetime(2026, 11, 30, 12, tzinfo=UTC)
UNIT = "segment_health_check.4242.4242"


class DrainedSlurm:
    """Discovery of one running Slurm job 4242 whose node n2 is drained; nothing else."""

    def __init__(self, token: str) -> None:
        self.token = token

    def declarations(self) -> Any:
        return declarations_for("slurm")

    def admit(self, spec: Any) -> None:
        pass

    def ready(self) -> None:
        """Usable: nothing to check."""

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        obj = ObjectReport(ref="4242", token=self.token, state=State.RUNNING,
                           cause=Cause(kind=CauseKind.NONE), nodes=("n1", "n2"),
                           unhealthy_units=(UnitHealth(unit="4242", nodes=("n2",),
                                                       detail="n2 DRAIN: bad NIC"),))
        return Discovery(at=NOW, objects=(obj,))

    def stop(self, ref: str) -> None:
        raise AssertionError("the outbox test never stops anything")

    cancel = open_gate = stop


class Recorded(Notifier):
    def __init__(self) -> None:
        super().__init__()
        self.raised: list[str] = []

    def escalate(self, job: Job, message: str, cause: Cause | None, at: datetime) -> None:
        self.raised.append(message)
        super().escalate(job, message, cause, at)


def running_job(store: RecordStore, seg: Path) -> str:
    spec = parse_spec({"name": "seg", "backend": "slurm", "command": ["train"], "nodes": 2,
                       "segment_health": {"dir": str(seg)}})
    job_id = create_job(store, spec, declarations_for("slurm"), NOW)
    store.append(job_id, [ev.SubmissionIntended(seq=2, at=NOW, submission=1, token=f"{job_id}.1"),
                          ev.SubmissionBound(seq=3, at=NOW, submission=1, ref="4242")], 1)
    return job_id


@pytest.fixture
def world(tmp_path: Path):  # type: ignore[no-untyped-def]
    store = open_store(f"sqlite://{tmp_path / 'r.sqlite3'}")
    seg = tmp_path / "seg"
    job_id = running_job(store, seg)
    notifier = Recorded()
    sup = Supervisor(store, lambda _n: DrainedSlurm(f"{job_id}.1"),  # type: ignore[arg-type,return-value]
                     clock=lambda: NOW, notifier=notifier, name="sup-test")
    yield store, seg, job_id, sup, notifier
    store.close()


def published(store: RecordStore, job_id: str) -> list[tuple[str, str]]:
    return [(d.unit_job_id, d.task_id) for d in fold(store.read(job_id), NOW).segments]


def test_a_failed_write_is_retried_every_tick_until_the_file_lands(
    world: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, seg, job_id, sup, notifier = world
    real_write = DecisionDirectory.write_atomic
    failures = {"left": 2}

    def full_disk(self: DecisionDirectory, name: str, content: bytes) -> None:
        if failures["left"] > 0:
            failures["left"] -= 1
            raise OSError(28, "No space left on device", str(self.path / name))
        real_write(self, name, content)

    monkeypatch.setattr(DecisionDirectory, "write_atomic", full_disk)
    first = sup.tick()  # decides, records the intent, the write fails: no exception
    assert published(store, job_id) == [("4242", "4242")]
    assert not (seg / UNIT).exists()
    assert any("No space left" in e for e in first.errors)
    sup.tick()  # the outbox retries (fails once more), the record is not touched again
    assert not (seg / UNIT).exists()
    sup.tick()  # the disk has room again: the files now match the record
    assert (seg / UNIT).stat().st_size > 0
    body = (seg / UNIT).read_text()
    assert '"nodes":["n2"]' in body and '"who":"sup-test"' in body
    assert read_state(seg, "4242") == ["4242"]
    events = [type(e).__name__ for e in store.read(job_id)]
    assert events.count("SegmentPublished") == 1  # one decision, however many writes
    assert notifier.raised == []


def test_the_first_write_carries_the_decided_cause(world: Any) -> None:
    store, seg, job_id, sup, _ = world
    sup.tick()
    body = (seg / UNIT).read_text()
    assert '"cause":"node-unavailable"' in body and '"who":"sup-test"' in body
    assert "n2 DRAIN: bad NIC" in body


def test_a_supervisor_killed_between_record_and_write_is_repaired(world: Any) -> None:
    store, seg, job_id, sup, _ = world
    # As if a supervisor appended the intent and died before writing anything.
    version = store.version(job_id)
    store.append(job_id, [ev.SegmentPublished(seq=version + 1, at=NOW, unit_job_id="4242",
                                              task_id="4242", reason="n2 DRAIN",
                                              actor="dead-sup", nodes=("n2",))], version)
    report = sup.tick()  # decide publishes nothing new (already recorded); reconcile writes
    assert report.errors == []
    assert (seg / UNIT).stat().st_size > 0 and read_state(seg, "4242") == ["4242"]
    inode = os.stat(seg / UNIT).st_ino
    sup.tick()  # in step: nothing rewritten
    assert os.stat(seg / UNIT).st_ino == inode


def test_a_state_overflow_is_one_escalation_and_the_unit_file_is_written(world: Any) -> None:
    store, seg, job_id, sup, notifier = world
    seg.mkdir()
    # Another publisher's decisions for 631 tasks of unit job 4242: the state cannot list
    # them all with ours (10-digit ids, 13 bytes each).
    for i in range(631):
        (seg / f"segment_health_check.4242.{10**9 + i}").write_bytes(b"{}\n")
    for _ in range(3):
        report = sup.tick()
        assert report.errors == []
    assert (seg / UNIT).stat().st_size > 0
    state_line = (seg / "segment_health_check.4242.state").read_bytes()
    assert len(state_line) <= 8192 and state_line.endswith(b"\n")
    [message] = notifier.raised  # once, not once per tick
    assert "unit job 4242" in message and "8192" in message
    job = fold(store.read(job_id), NOW)
    assert [e.message for e in job.escalations] == [message]


def test_a_planted_lock_link_is_one_escalation_never_a_crash(world: Any, tmp_path: Path) -> None:
    store, seg, job_id, sup, notifier = world
    seg.mkdir()
    victim = tmp_path / "victim"
    (seg / ".segment_health_check.4242.lock").symlink_to(victim)
    for _ in range(2):
        assert sup.tick().errors == []
    assert not os.path.lexists(victim)
    [message] = notifier.raised
    assert ".segment_health_check.4242.lock" in message and "symbolic link" in message
    assert published(store, job_id) == [("4242", "4242")]  # the decision stands in the record
