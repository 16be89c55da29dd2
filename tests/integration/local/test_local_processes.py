"""Every process a local job starts is found and stopped, whatever it does to its session or
group: real runners, real `setsid` grandchildren, real kill -9."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import msgspec
from local_harness import PY, Local, alive, fixture, kill_quietly, wait_dead, wait_file

from dispatch.backends.local.procs import marked, read_proc_stat
from dispatch.backends.local.wire import MARK_VAR, ObjectMeta, RunnerInfo
from dispatch.core.model import CauseKind, State


def _escaping_node(pid_file: Path, then: str) -> tuple[str, ...]:
    """A node (sh) that starts `setsid sleep 300` in the background, in a session of its own;
    the sleep's pid lands in ``pid_file`` (written whole). Then the node runs ``then``."""
    inner = f'echo $$ > "{pid_file}.tmp" && mv "{pid_file}.tmp" "{pid_file}" && exec sleep 300'
    return ("sh", "-c", f"setsid sh -c '{inner}' & {then}")


def _runner(local: Local, ref: str) -> RunnerInfo:
    raw = (local.root / "objects" / ref / "runner.json").read_bytes()
    return msgspec.json.decode(raw, type=RunnerInfo)


def _meta(local: Local, ref: str) -> ObjectMeta:
    return msgspec.json.decode((local.root / "objects" / ref / "meta.json").read_bytes(),
                               type=ObjectMeta)


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes()
    return dict(item.split("=", 1) for item in raw.decode().split("\0") if "=" in item)


def test_a_setsid_grandchild_of_a_runner_killed_with_sigkill_is_killed_by_the_verdict(
        local: Local, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    ref, _ = local.submit(_escaping_node(pid_file, "sleep 300"))
    grandchild = int(wait_file(pid_file))
    try:
        local.wait(ref, lambda r: r.state is State.RUNNING)
        (node,) = local.status_pids(ref)
        escaped = read_proc_stat(grandchild)
        assert escaped is not None
        # It really left: its own session, not the node's (what the verdict used to search).
        assert escaped.sid == grandchild != node
        assert _environ(grandchild)[MARK_VAR] == _meta(local, ref).mark
        runner = _runner(local, ref)
        os.kill(runner.pid, signal.SIGKILL)
        wait_dead(runner.pid)
        # Nothing but the backend's verdict is left to stop it: it still runs now.
        assert alive(grandchild)
        report = local.look(ref)
        assert report.state is State.FAILED and report.cause.kind is CauseKind.UNKNOWN
        assert "vanished" in report.cause.detail
        assert str(grandchild) in report.cause.detail  # "killed left-over processes [...]"
        wait_dead(grandchild)
        wait_dead(node)
    finally:
        kill_quietly(grandchild)


def test_a_node_that_leaves_a_setsid_grandchild_ends_only_once_it_is_killed(
        local: Local, tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    # The node exits 0 at once, leaving `setsid sleep 300` behind.
    ref, _ = local.submit(_escaping_node(pid_file, f'while [ ! -s "{pid_file}" ]; do :; done'))
    grandchild = int(wait_file(pid_file))
    try:
        report = local.ended(ref)
        assert report.state is State.SUCCEEDED
        assert not alive(grandchild)
    finally:
        kill_quietly(grandchild)


def test_the_runner_kills_a_process_of_the_object_outside_its_tree(local: Local,
                                                                   tmp_path: Path) -> None:
    """A process carrying the object's mark that is not under the runner at all (as one
    started through a daemon that passes the environment on): the runner finds it by the
    mark and the object does not end while it runs."""
    ref, _ = local.submit(("sleep", "300"))
    local.wait(ref, lambda r: r.state is State.RUNNING)
    mark = _meta(local, ref).mark
    ready = tmp_path / "ready"
    outsider = subprocess.Popen([PY, fixture("ignore_term.py"), str(ready)],
                                env={**os.environ, MARK_VAR: mark}, start_new_session=True)
    try:
        wait_file(ready)  # it ignores SIGTERM: only the runner's SIGKILL ends it
        assert [p.pid for p in marked(mark) if p.pid == outsider.pid] == [outsider.pid]
        local.backend.stop(ref)
        report = local.ended(ref)
        assert report.state is State.CANCELLED
        assert outsider.wait(timeout=20) == -signal.SIGKILL
        assert "outside the runner's tree" in (local.root / "objects" / ref /
                                              "runner.log").read_text()
    finally:
        kill_quietly(outsider.pid)
        outsider.wait()


def test_only_the_objects_own_processes_carry_its_mark(local: Local) -> None:
    first, _ = local.submit(("sleep", "300"), nodes=2)
    second, _ = local.submit(("sleep", "300"))
    for ref in (first, second):
        local.wait(ref, lambda r: r.state is State.RUNNING)
    marks = {ref: _meta(local, ref).mark for ref in (first, second)}
    assert marks[first] != marks[second] and all(m.startswith("l-") for m in marks.values())
    assert sorted(p.pid for p in marked(marks[first])) == sorted(local.status_pids(first))
    assert [p.pid for p in marked(marks[second])] == local.status_pids(second)
    assert marked("") == []
