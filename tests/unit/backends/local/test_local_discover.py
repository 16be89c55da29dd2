"""discover() over objects written straight to disk: one scan, no process per object, strict
reading, and the verdicts it gives when the files say something odd."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from dispatch.backends.local import LocalBackend, default_root
from dispatch.backends.local import root as root_module
from dispatch.backends.local.procs import boot_id, read_proc_stat
from dispatch.backends.local.root import LocalRoot, new_ref, ref_root
from dispatch.backends.local.wire import ObjectMeta, ObjectStatus, RunnerInfo
from dispatch.core.model import Cause, CauseKind, Execution, SchedulerUnreachable, State

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _me() -> RunnerInfo:
    """This very process stands in for a live runner (it is never signalled here)."""
    st = read_proc_stat(os.getpid())
    assert st is not None
    return RunnerInfo(pid=os.getpid(), start_ticks=st.start_ticks, boot_id=boot_id())


def _dead() -> RunnerInfo:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    st = read_proc_stat(proc.pid)
    proc.wait()
    assert st is not None
    return RunnerInfo(pid=proc.pid, start_ticks=st.start_ticks, boot_id=boot_id())


def write_object(root: Path, ref: str, token: str, *, runner: RunnerInfo,
                 status: ObjectStatus | bytes | None) -> None:
    LocalRoot(root).claim()  # the root and its marker, as the first submit makes them
    objdir = root / "objects" / ref
    (objdir / "control").mkdir(parents=True)
    job, _, number = token.rpartition(".")
    meta = ObjectMeta(ref=ref, token=token, job_id=job, submission=int(number), name="n",
                      nodes=1, argv=("x",), workdir="/", created_at=T0)
    (objdir / "meta.json").write_bytes(msgspec.json.encode(meta))
    (objdir / "runner.json").write_bytes(msgspec.json.encode(runner))
    if isinstance(status, ObjectStatus):
        (objdir / "status.json").write_bytes(msgspec.json.encode(status))
    elif status is not None:
        (objdir / "status.json").write_bytes(status)


def running(ref: str, token: str) -> ObjectStatus:
    return ObjectStatus(ref=ref, token=token, state=State.RUNNING,
                        cause=Cause(kind=CauseKind.NONE),
                        executions=(Execution(index=0, started_at=T0),),
                        updated_at=T0, heartbeat_at=T0)


def succeeded(ref: str, token: str) -> ObjectStatus:
    cause = Cause(kind=CauseKind.NONE, detail="all 1 nodes exited 0", exit_code=0, at=T0)
    return ObjectStatus(ref=ref, token=token, state=State.SUCCEEDED, cause=cause,
                        executions=(Execution(index=0, started_at=T0, ended_at=T0,
                                              cause=cause),),
                        updated_at=T0, heartbeat_at=T0)


def test_discover_of_200_objects_is_one_scan_and_no_subprocess(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    me = _me()
    tokens = []
    for i in range(200):
        ref, token = f"l-{i:08x}", f"job{i}.1"
        status = running(ref, token) if i % 2 else succeeded(ref, token)
        write_object(tmp_path, ref, token, runner=me, status=status)
        tokens.append(token)
    # Objects of other jobs are in the same directory and are not reported.
    write_object(tmp_path, "l-ffffffff", "other.1", runner=me,
                 status=succeeded("l-ffffffff", "other.1"))

    scans: list[str] = []
    reads: list[Path] = []
    real_scandir, real_read = os.scandir, root_module._read

    def counting_scandir(path: object = ".") -> object:
        scans.append(str(path))
        return real_scandir(path)  # type: ignore[arg-type]

    def counting_read(path: Path) -> bytes:
        reads.append(path)
        return real_read(path)

    def no_subprocess(*args: object, **kwargs: object) -> object:
        raise AssertionError("discover must not start a process")

    monkeypatch.setattr(os, "scandir", counting_scandir)
    monkeypatch.setattr(root_module, "_read", counting_read)
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    monkeypatch.setattr(subprocess, "run", no_subprocess)

    backend = LocalBackend(tmp_path)
    found = backend.discover(tokens, []).objects
    assert scans == [str(tmp_path / "objects")]
    assert sorted(o.token or "" for o in found) == sorted(tokens)
    by_token = {o.token: o for o in found}
    for i, token in enumerate(tokens):
        expected = State.RUNNING if i % 2 else State.SUCCEEDED
        assert by_token[token].state is expected
    # First look: the root's marker, each object's meta and status, plus the runner of each
    # live one.
    assert len(reads) == 1 + 201 + 200 + 100

    # Steady state (issue 49): nothing was written and every runner lives, so the look
    # reads only the root's marker (is the root still there?): no scan, no status file.
    scans.clear()
    reads.clear()
    steady = backend.discover(tokens, [])
    assert steady.objects == found
    assert scans == [] and [p.name for p in reads] == ["root.json"]
    assert steady.changes is not None and steady.changes.keys == frozenset()

    # One runner's new status, named in the journal as a runner names it: that object's
    # status only is read, and the look says it changed.
    from dispatch.backends.local.journal import note_change

    reads.clear()
    cause = Cause(kind=CauseKind.NODE_LOST, detail="node0 lost", at=T0)
    lost = msgspec.structs.replace(running("l-00000001", "job1.1"), cause=cause, lost_since=T0)
    (tmp_path / "objects" / "l-00000001" / "status.json").write_bytes(msgspec.json.encode(lost))
    assert note_change(tmp_path, "l-00000001")
    changed = backend.discover(tokens, [])
    assert scans == [] and sorted(p.name for p in reads) == ["root.json", "status.json"]
    assert changed.changes is not None and "l-00000001" in changed.changes.keys
    assert changed.changes.since == steady.changes.look
    assert {o.ref: o for o in changed.objects}["l-00000001"].lost_since == T0


def test_refs_and_tokens_are_both_found_in_one_look(tmp_path: Path) -> None:
    me = _me()
    write_object(tmp_path, "l-00000001", "a.1", runner=me, status=running("l-00000001", "a.1"))
    write_object(tmp_path, "l-00000002", "b.1", runner=me, status=running("l-00000002", "b.1"))
    write_object(tmp_path, "l-00000003", "c.1", runner=me, status=running("l-00000003", "c.1"))
    found = LocalBackend(tmp_path).discover(["a.1"], ["l-00000002", "l-00000009"]).objects
    assert [(o.ref, o.state, o.cause.kind) for o in found] == [
        ("l-00000001", State.RUNNING, CauseKind.NONE),
        ("l-00000002", State.RUNNING, CauseKind.NONE),
        ("l-00000009", State.FAILED, CauseKind.UNKNOWN),
    ]
    assert "no such local object" in found[2].cause.detail


def test_a_starting_runner_is_pending(tmp_path: Path) -> None:
    write_object(tmp_path, "l-00000001", "a.1", runner=_me(), status=None)
    (report,) = LocalBackend(tmp_path).discover(["a.1"], []).objects
    assert (report.state, report.cause.kind) == (State.PENDING, CauseKind.NONE)


def test_an_unreadable_status_is_unknown_and_not_ended(tmp_path: Path) -> None:
    status = msgspec.json.encode(running("l-00000001", "a.1")).replace(b'"running"',
                                                                       b'"exploded"')
    write_object(tmp_path, "l-00000001", "a.1", runner=_me(), status=status)
    (report,) = LocalBackend(tmp_path).discover(["a.1"], []).objects
    assert report.state is State.UNKNOWN and report.alive
    assert report.cause.kind is CauseKind.UNKNOWN
    assert "status.json unreadable" in report.cause.detail and "exploded" in report.cause.detail


def test_an_unreadable_meta_asked_for_by_ref(tmp_path: Path) -> None:
    LocalRoot(tmp_path).claim()
    objdir = tmp_path / "objects" / "l-00000001"
    objdir.mkdir(parents=True)
    (objdir / "meta.json").write_text("{not json")
    (report,) = LocalBackend(tmp_path).discover(["a.1"], ["l-00000001"]).objects
    assert report.state is State.UNKNOWN and report.alive
    assert "meta.json unreadable" in report.cause.detail


def test_a_runner_that_died_before_its_first_status(tmp_path: Path) -> None:
    write_object(tmp_path, "l-00000001", "a.1", runner=_dead(), status=None)
    (tmp_path / "objects" / "l-00000001" / "runner.log").write_text(
        "Traceback ...\nModuleNotFoundError: No module named 'dispatch'\n")
    (report,) = LocalBackend(tmp_path).discover(["a.1"], []).objects
    assert report.state is State.FAILED and report.cause.kind is CauseKind.UNKNOWN
    assert "vanished" in report.cause.detail and "never wrote a status" in report.cause.detail
    assert "No module named 'dispatch'" in report.cause.detail
    assert report.executions == ()
    # The verdict is on disk, once: a later reader repeats it word for word.
    assert (tmp_path / "objects" / "l-00000001" / "vanished.json").exists()
    assert LocalBackend(tmp_path).discover([], ["l-00000001"]).objects == (report,)


def test_a_dead_runner_that_had_finished_is_read_as_finished(tmp_path: Path) -> None:
    write_object(tmp_path, "l-00000001", "a.1", runner=_dead(),
                 status=succeeded("l-00000001", "a.1"))
    (report,) = LocalBackend(tmp_path).discover(["a.1"], []).objects
    assert report.state is State.SUCCEEDED
    assert not (tmp_path / "objects" / "l-00000001" / "vanished.json").exists()


def test_a_runner_pid_from_an_earlier_boot_is_not_alive(tmp_path: Path) -> None:
    old = msgspec.structs.replace(_me(), boot_id="an-earlier-boot")
    write_object(tmp_path, "l-00000001", "a.1", runner=old, status=running("l-00000001", "a.1"))
    (report,) = LocalBackend(tmp_path).discover(["a.1"], []).objects
    assert report.state is State.FAILED and "vanished" in report.cause.detail
    assert report.executions[0].cause == report.cause


def test_a_root_never_used_is_unreachable_not_empty(tmp_path: Path) -> None:
    # Absent is not ended: before the first submit made it, a root answers nothing.
    with pytest.raises(SchedulerUnreachable, match="is missing"):
        LocalBackend(tmp_path / "fresh").discover(["a.1"], ["l-00000001"])
    LocalRoot(tmp_path / "fresh").claim()
    assert LocalBackend(tmp_path / "fresh").discover(["a.1"], []).objects == ()


def test_declarations() -> None:
    decl = LocalBackend(Path("/nonexistent"), node_loss_window=timedelta(seconds=2)).declarations()
    assert decl.backend == "local"
    assert decl.native_actions == frozenset()
    assert decl.node_loss_window == timedelta(seconds=2)
    assert LocalBackend(Path("/x")).declarations().node_loss_window == timedelta(seconds=5)


def test_default_root(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_root() == tmp_path / "dispatch" / "local"
    assert LocalBackend().root == tmp_path / "dispatch" / "local"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_root() == tmp_path / "home" / ".local" / "state" / "dispatch" / "local"


def test_a_ref_names_the_root_it_was_made_in() -> None:
    ref = new_ref("0123456789abcdef")
    assert ref.startswith("l-01234567-") and ref_root(ref) == "01234567"
    assert ref_root("l-00000001") is None  # made before roots had markers
    assert ref_root("l-0123456-00000000") is None


def test_a_ref_of_another_root_is_not_answered_for(tmp_path: Path) -> None:
    """An unmounted root's place taken by a new root: its refs are absent here, not ended."""
    marker = LocalRoot(tmp_path).claim()
    other = new_ref("f" * 16 if not marker.id.startswith("ffffffff") else "e" * 16)
    mine = new_ref(marker.id)
    found = LocalBackend(tmp_path).discover([], [other, mine])
    assert not found.complete  # decide makes no transition for what it left out
    assert [(o.ref, o.ended) for o in found.objects] == [(mine, True)]
    assert f"(root {marker.id})" in found.objects[0].cause.detail


def test_a_root_that_lost_its_marker_is_unreachable(tmp_path: Path) -> None:
    write_object(tmp_path, "l-00000001", "a.1", runner=_me(), status=None)
    meta = msgspec.json.decode((tmp_path / "objects" / "l-00000001" / "meta.json").read_bytes(),
                               type=ObjectMeta)
    marker = LocalRoot(tmp_path).marker()
    (tmp_path / "objects" / "l-00000001" / "meta.json").write_bytes(msgspec.json.encode(
        msgspec.structs.replace(meta, root_id=marker.id)))
    (tmp_path / "root.json").unlink()
    with pytest.raises(SchedulerUnreachable, match="has no root.json"):
        LocalBackend(tmp_path).discover(["a.1"], [])
    assert not (tmp_path / "root.json").exists()


def test_a_root_from_before_markers_is_adopted(tmp_path: Path) -> None:
    write_object(tmp_path, "l-00000001", "a.1", runner=_me(),
                 status=running("l-00000001", "a.1"))
    (tmp_path / "root.json").unlink()  # as every root made before markers
    found = LocalBackend(tmp_path).discover(["a.1"], ["l-00000002"]).objects
    assert [(o.ref, o.state) for o in found] == [("l-00000001", State.RUNNING),
                                                 ("l-00000002", State.FAILED)]
    assert LocalRoot(tmp_path).marker().id  # written once, then it is a root like any other


@pytest.mark.parametrize("make", ["missing", "empty"])
def test_a_root_never_made_answers_tokens_with_nothing(tmp_path: Path, make: str) -> None:
    """A first submit that died before making the root is retried, not stuck; but a ref is
    never answered for by a root that was never made."""
    root = tmp_path / "root"
    if make == "empty":
        root.mkdir()
    found = LocalBackend(root).discover(["a.1"], [])
    assert found.objects == () and found.complete
    with pytest.raises(SchedulerUnreachable):
        LocalBackend(root).discover(["a.1"], ["l-00000001"])
    assert not (root / "root.json").exists()


def test_a_root_that_is_a_file_is_unreachable(tmp_path: Path) -> None:
    (tmp_path / "root").write_text("")
    with pytest.raises(SchedulerUnreachable, match="not a directory"):
        LocalBackend(tmp_path / "root").discover(["a.1"], [])
