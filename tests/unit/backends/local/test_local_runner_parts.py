"""The runner's pure parts and file primitives: /proc parsing, process trees, environment,
atomic files, strict formats."""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.backends.local.nodes import node_environment
from dispatch.backends.local.procs import (
    ProcStat,
    descendants,
    parse_proc_stat,
    process_alive,
    read_proc_stat,
)
from dispatch.backends.local.wire import ObjectMeta, ObjectStatus
from dispatch.support.files import create_exclusive, write_atomic

# A real line from proc(5)'s layout: fields 3.. after the command name.
TAIL = (b"S 10 20 30 0 -1 4194304 103 0 0 0 0 0 0 0 20 0 1 0 31927 3133440 413 "
        b"18446744073709551615 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0")


@pytest.mark.parametrize("comm", [b"python", b"a b", b"x) S 1 2 (y", b"(", b""])
def test_parse_proc_stat_survives_any_command_name(comm: bytes) -> None:
    parsed = parse_proc_stat(42, b"42 (" + comm + b") " + TAIL)
    assert parsed == ProcStat(pid=42, state="S", ppid=10, pgid=20, sid=30, start_ticks=31927,
                              rss_pages=413)


@pytest.mark.parametrize("raw", [b"", b"42 python S 1", b"42 (x) S 1 2"])
def test_parse_proc_stat_refuses_what_is_not_a_stat_line(raw: bytes) -> None:
    assert parse_proc_stat(42, raw) is None


def test_read_proc_stat_of_this_process() -> None:
    me = read_proc_stat(os.getpid())
    assert me is not None
    assert me.ppid == os.getppid() and me.sid == os.getsid(0) and me.pgid == os.getpgid(0)
    assert me.rss_pages > 0


def _proc(pid: int, ppid: int) -> ProcStat:
    return ProcStat(pid=pid, state="S", ppid=ppid, pgid=pid, sid=pid, start_ticks=0,
                    rss_pages=0)


def test_descendants_by_parent_links() -> None:
    procs = {p.pid: p for p in [_proc(1, 0), _proc(10, 1), _proc(11, 10), _proc(12, 11),
                                _proc(20, 1), _proc(21, 20)]}
    assert descendants(procs, [10]) == {11, 12}
    assert descendants(procs, [10, 20]) == {11, 12, 21}
    assert descendants(procs, [12]) == set()
    assert descendants(procs, [99]) == set()


@given(st.dictionaries(st.integers(2, 60), st.integers(1, 60), max_size=40))
def test_descendants_are_exactly_the_processes_with_the_root_as_an_ancestor(
        parents: dict[int, int]) -> None:
    procs = {pid: _proc(pid, ppid) for pid, ppid in parents.items()}
    found = descendants(procs, [1])
    for pid in procs:
        seen, cur, chain = set(), pid, False
        while cur in procs and cur not in seen:
            seen.add(cur)
            cur = procs[cur].ppid
            if cur == 1:
                chain = True
                break
        assert (pid in found) == chain


def test_process_alive_checks_the_start_time() -> None:
    me = read_proc_stat(os.getpid())
    assert me is not None
    assert process_alive(os.getpid(), me.start_ticks)
    assert not process_alive(os.getpid(), me.start_ticks + 1)  # a reused pid
    done = subprocess.Popen([sys.executable, "-c", "pass"])
    ticks = read_proc_stat(done.pid)
    done.wait()
    assert ticks is not None and not process_alive(done.pid, ticks.start_ticks)


def _meta(**kw: object) -> ObjectMeta:
    base: dict[str, object] = dict(ref="l-1", token="j.1", job_id="j", submission=1, name="n",
                                   nodes=2, argv=("x",), env={"A": "spec"}, workdir="/",
                                   created_at=datetime(2026, 1, 1, tzinfo=UTC))
    base.update(kw)
    return ObjectMeta(**base)  # type: ignore[arg-type]


def test_node_environment_is_the_submitters_then_the_specs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/user/path")
    monkeypatch.setenv("A", "inherited")
    env = node_environment(_meta(), 1234)
    assert env["PYTHONPATH"] == "/user/path"  # the job's own; the runner never used it
    assert env["A"] == "spec"  # the spec's env wins over the inherited one
    assert (env["WORLD_SIZE"], env["MASTER_ADDR"], env["MASTER_PORT"]) == ("2", "127.0.0.1",
                                                                          "1234")
    assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]) == ("0", "1")
    assert (env["DISPATCH_JOB_ID"], env["DISPATCH_SUBMISSION"]) == ("j", "1")


def test_node_environment_spec_cannot_set_the_world() -> None:
    env = node_environment(_meta(env={"WORLD_SIZE": "7", "MASTER_ADDR": "10.0.0.1"}), 5)
    assert (env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("2", "127.0.0.1")


def test_write_atomic_replaces_whole_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    write_atomic(target, b"one")
    write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


def test_create_exclusive_first_writer_wins(tmp_path: Path) -> None:
    target = tmp_path / "vanished.json"
    assert create_exclusive(target, b"first")
    assert not create_exclusive(target, b"second")
    assert target.read_bytes() == b"first"
    assert [p.name for p in tmp_path.iterdir()] == ["vanished.json"]


def test_formats_are_strict() -> None:
    meta = msgspec.json.encode(_meta())
    assert msgspec.json.decode(meta, type=ObjectMeta) == _meta()
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(meta[:-1] + b',"surprise":1}', type=ObjectMeta)
    now = datetime(2026, 1, 1, tzinfo=UTC)
    status = msgspec.json.encode(ObjectStatus(
        ref="l-1", token="j.1", state="running", cause={"kind": "none"},  # type: ignore[arg-type]
        updated_at=now, heartbeat_at=now))
    decoded = msgspec.json.decode(status, type=ObjectStatus)
    assert decoded.state.value == "running" and not decoded.final
    # S13: a name this build does not know is refused, not misread.
    with pytest.raises(msgspec.ValidationError):
        msgspec.json.decode(status.replace(b'"running"', b'"exploded"'), type=ObjectStatus)


def test_a_runner_whose_object_is_never_published_leaves(tmp_path: Path) -> None:
    from dispatch.backends.local.root import wait_published

    assert not wait_published(tmp_path / "never", 0.05)
    (tmp_path / "now").mkdir()
    (tmp_path / "now" / "meta.json").write_text("{}")
    (tmp_path / "now" / "runner.json").write_text("{}")
    assert wait_published(tmp_path / "now", 0.05)
