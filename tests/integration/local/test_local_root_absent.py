"""Absent is not ended: a local root that is missing, replaced by a file, or present without
its marker (as an unmounted mount point is) is unreachable. Under a real supervisor with a
real SQLite record nothing is recorded while it is absent, the job's processes keep running,
and supervision resumes when the root is back, including an end that happened meanwhile."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from local_harness import SLEEP, WAIT_S, Local, alive, wait_dead
from tests.specs import parse_spec

from dispatch.backends.local import LocalBackend
from dispatch.backends.local.wire import ObjectStatus, RunnerInfo
from dispatch.backends.registry import declarations_for
from dispatch.core.model import CauseKind, SchedulerUnreachable, State
from dispatch.core.record import fold
from dispatch.service.requests import create_job
from dispatch.stores.base import RecordStore
from dispatch.stores.select import open_store
from dispatch.supervise.loop import Supervisor, utcnow


def _tick_until(sup: Supervisor, done: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_S
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError("the supervisor never got there")
        sup.tick()
        time.sleep(0.1)


def _events(store: RecordStore, job_id: str) -> int:
    return len(store.read(job_id))


def test_an_absent_root_records_nothing_and_supervision_resumes(tmp_path: Path) -> None:
    store = open_store(f"sqlite://{tmp_path / 'record.sqlite3'}")
    root = tmp_path / "local"
    backend = LocalBackend(root, node_loss_window=timedelta(seconds=1), kill_grace=0.5)
    go = tmp_path / "go"
    spec = parse_spec({"name": "absent", "nodes": 2, "command": [
        "sh", "-c", f'while [ ! -e "{go}" ]; do sleep 0.05; done']})
    job_id = create_job(store, spec, declarations_for("local"), utcnow())
    sup = Supervisor(store, lambda _name: backend)

    def running() -> bool:
        """Running, and its start in the record (G1): nothing new is left to record."""
        cur = fold(store.read(job_id), utcnow()).current
        if cur is None or cur.ref is None or 0 not in cur.executions_started:
            return False
        seen = backend.discover([], [cur.ref]).get(cur.ref)
        return seen is not None and seen.state is State.RUNNING

    def nothing_ended() -> bool:
        """No execution end, hold or outcome in the record."""
        job = fold(store.read(job_id), utcnow())
        return (job.outcome is None and job.hold is None and job.awaiting is None
                and job.current is not None and not job.current.ended)

    _tick_until(sup, running)
    ref = fold(store.read(job_id), utcnow()).current.ref  # type: ignore[union-attr]
    assert ref is not None
    raw = (root / "objects" / ref / "status.json").read_bytes()
    nodes = [n.pid for n in msgspec.json.decode(raw, type=ObjectStatus).nodes]
    assert len(nodes) == 2 and all(pid is not None for pid in nodes)
    recorded = _events(store, job_id)

    away = tmp_path / "away"
    marker_away = tmp_path / "root.json.away"

    def replace_with_file() -> None:
        os.rename(root, away)
        root.write_text("not a local root")

    def put_back_from_file() -> None:
        root.unlink()
        os.rename(away, root)

    faults: list[tuple[str, Callable[[], None], Callable[[], None]]] = [
        ("is missing", lambda: os.rename(root, away), lambda: os.rename(away, root)),
        ("is not a directory", replace_with_file, put_back_from_file),
        ("has no root.json", lambda: os.rename(root / "root.json", marker_away),
         lambda: os.rename(marker_away, root / "root.json")),
    ]
    for words, break_root, mend_root in faults:
        break_root()
        for _ in range(3):
            report = sup.tick()
            assert report.appended == 0 and report.errors == []
            assert len(report.unreachable) == 1 and words in report.unreachable[0]
            time.sleep(0.6)  # longer than the runner's own poll: it looks while the root is away
        with pytest.raises(SchedulerUnreachable, match=words):
            LocalBackend(root).discover([], [ref])  # a restarted supervisor: the same answer
        assert _events(store, job_id) == recorded and nothing_ended()
        assert all(alive(pid) for pid in nodes if pid is not None)
        mend_root()
        report = sup.tick()
        assert report.unreachable == [] and report.appended == 0
        (seen,) = backend.discover([], [ref]).objects
        assert (seen.state, seen.cause.kind) == (State.RUNNING, CauseKind.NONE)
        assert _events(store, job_id) == recorded

    # The job ends while the root is away: its end is recorded once the root is back.
    os.rename(root, away)
    go.write_text("")
    for pid in nodes:
        assert pid is not None
        wait_dead(pid)
    for _ in range(3):
        report = sup.tick()
        assert report.appended == 0 and len(report.unreachable) == 1
        time.sleep(0.3)
    assert _events(store, job_id) == recorded and nothing_ended()
    os.rename(away, root)
    _tick_until(sup, lambda: fold(store.read(job_id), utcnow()).outcome is not None)
    job = fold(store.read(job_id), utcnow())
    assert job.outcome is not None and job.outcome.state is State.SUCCEEDED
    assert "all 2 nodes exited 0" in job.outcome.cause.detail
    assert "the root is away" in (root / "objects" / ref / "runner.log").read_text()
    store.close()


def test_an_object_gone_from_a_root_that_is_there_is_ended(tmp_path: Path) -> None:
    """The positive answer: the root is there with its marker, the object is not."""
    root = tmp_path / "local"
    backend = LocalBackend(root)
    backend.disk.claim()
    (report,) = backend.discover([], ["l-0000abcd"]).objects
    assert report.ended and report.cause.kind is CauseKind.UNKNOWN
    marker = msgspec.json.decode((root / "root.json").read_bytes())
    assert f"(root {marker['id']})" in report.cause.detail


def test_requests_to_an_absent_root_are_refused_as_unreachable(tmp_path: Path) -> None:
    root = tmp_path / "local"
    backend = LocalBackend(root)
    backend.disk.claim()
    shutil.rmtree(root)
    for call in (lambda: backend.stop("l-0000abcd"), lambda: backend.cancel("l-0000abcd"),
                 lambda: backend.open_gate("l-0000abcd"), lambda: backend.logs("l-0000abcd"),
                 lambda: backend.inject("l-0000abcd", "preempt"),
                 lambda: backend.prune(timedelta(0))):
        with pytest.raises(SchedulerUnreachable, match="is missing"):
            call()


def _wait_text(path: Path, words: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not (path.exists() and words in path.read_text()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never said {words!r}")
        time.sleep(0.05)


def test_a_runner_whose_root_is_replaced_by_another_kills_its_nodes(local: Local,
                                                                     tmp_path: Path) -> None:
    """Away, the nodes keep running; a new root in its place (a wiped root made again, a
    submit into an unmounted mount point) means nobody will look for the object again."""
    ref, _ = local.submit(SLEEP, nodes=2)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    nodes = local.status_pids(ref)
    runner = msgspec.json.decode((local.root / "objects" / ref / "runner.json").read_bytes(),
                                 type=RunnerInfo).pid
    old = tmp_path / "old-root"
    os.rename(local.root, old)
    _wait_text(old / "objects" / ref / "runner.log", "the root is away")
    assert all(alive(pid) for pid in [*nodes, runner])
    fresh = LocalBackend(local.root)
    fresh.disk.claim()
    for pid in [*nodes, runner]:
        wait_dead(pid)
    assert "the root is another one now" in (old / "objects" / ref / "runner.log").read_text()
    # The new root does not answer for the object of the old one: absent, not ended.
    found = fresh.discover([], [ref])
    assert found.objects == () and not found.complete
