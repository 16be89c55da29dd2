"""Issue 49: the local backend's changed looks (looks.py) answer exactly what a full look
answers, over random sequences of what happens to its objects: objects published, a runner's
new status (named in the journal, as a runner names it), a runner that ends with its final
status, a runner SIGKILLed (nothing written), an ended object pruned, the journal rotated by
another reader, another reader's look (which may write a vanished verdict first), and the
tokens and refs asked for changing. Runners are real processes (``sleep``), so deaths are
real; their files are written here, as a runner writes them.

After each step one backend, kept across the whole sequence (changed looks), and a new one
(its first look is a full look) are asked the same: their answers must be equal, and the
kept one's changes must name every object whose report differs from its previous answer.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dispatch.backends.local import LocalBackend
from dispatch.backends.local.journal import JOURNAL, ROTATED, note_change
from dispatch.backends.local.procs import boot_id, read_proc_stat
from dispatch.backends.local.root import LocalRoot
from dispatch.backends.local.wire import ObjectMeta, ObjectStatus, RunnerInfo
from dispatch.core.model import Cause, CauseKind, Discovery, Execution, ObjectReport, State

T0 = datetime(2026, 1, 1, tzinfo=UTC)


class Root:
    """A local root whose objects' files this test writes, each with a real runner process
    (``sleep``) that it ends or kills."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.root_id = LocalRoot(path).claim().id
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.tokens: dict[str, str] = {}
        self.n = 0

    def ref(self, i: int) -> str:
        return f"l-{self.root_id[:8]}-{i:08x}"

    def create(self) -> str:
        self.n += 1
        ref, token = self.ref(self.n), f"job{self.n}.1"
        proc = subprocess.Popen(["sleep", "600"])  # noqa: S603,S607 - a stand-in runner
        stat = read_proc_stat(proc.pid)
        assert stat is not None
        objdir = self.path / "objects" / ref
        (objdir / "control").mkdir(parents=True)
        meta = ObjectMeta(ref=ref, token=token, job_id=f"job{self.n}", submission=1,
                          name="n", nodes=1, argv=("x",), workdir="/", created_at=T0,
                          root_id=self.root_id)
        (objdir / "meta.json").write_bytes(msgspec.json.encode(meta))
        (objdir / "runner.json").write_bytes(msgspec.json.encode(RunnerInfo(
            pid=proc.pid, start_ticks=stat.start_ticks, boot_id=boot_id())))
        self.procs[ref], self.tokens[ref] = proc, token
        self.status(ref, State.RUNNING)
        assert note_change(self.path, ref)  # as a submit does after it publishes
        return ref

    def status(self, ref: str, state: State, lost: bool = False) -> None:
        """A new status, then its line in the journal (as the runner writes them)."""
        ended = state.terminal
        cause = Cause(kind=CauseKind.NODE_LOST if lost else CauseKind.NONE,
                      at=T0 if ended or lost else None)
        status = ObjectStatus(
            ref=ref, token=self.tokens[ref], state=state, cause=cause,
            executions=(Execution(index=0, started_at=T0, ended_at=T0 if ended else None,
                                  cause=cause if ended else None),),
            lost_since=T0 if lost else None, updated_at=T0, heartbeat_at=T0)
        tmp = self.path / "objects" / ref / ".status.tmp"
        tmp.write_bytes(msgspec.json.encode(status))
        os.replace(tmp, self.path / "objects" / ref / "status.json")
        assert note_change(self.path, ref)

    def stop_runner(self, ref: str, signum: int) -> None:
        proc = self.procs.pop(ref, None)
        if proc is not None:
            proc.send_signal(signum)
            proc.wait()

    def close(self) -> None:
        for ref in list(self.procs):
            self.stop_runner(ref, signal.SIGKILL)


@pytest.fixture
def root(tmp_path: Path) -> Iterator[Root]:
    r = Root(tmp_path / "root")
    yield r
    r.close()


def same(objects: tuple[ObjectReport, ...]) -> list[ObjectReport]:
    """The reports, but a missing object's time of the verdict (each look's own now)."""
    return [msgspec.structs.replace(o, cause=msgspec.structs.replace(o.cause, at=None))
            if o.token is None else o for o in objects]


STEPS = st.lists(st.tuples(
    st.sampled_from(["create", "lost", "succeed", "fail", "kill", "prune", "rotate",
                     "reader", "want"]),
    st.integers(0, 1000)), min_size=1, max_size=25)


def run(root: Root, steps: list[tuple[str, int]]) -> None:
    kept = LocalBackend(root.path)
    every = True  # which objects are asked for: all, or those whose number is even
    previous: Discovery | None = None
    for i, (what, which) in enumerate(steps):
        refs = sorted(root.tokens)
        ref = refs[which % len(refs)] if refs else None
        live = [r for r in refs if r in root.procs]
        pick = live[which % len(live)] if live else None
        if what == "create":
            root.create()
        elif what == "lost" and pick is not None:
            root.status(pick, State.RUNNING, lost=True)
        elif what in ("succeed", "fail") and pick is not None:
            root.status(pick, State.SUCCEEDED if what == "succeed" else State.FAILED)
            root.stop_runner(pick, signal.SIGTERM)  # the runner leaves after its last status
        elif what == "kill" and pick is not None:
            root.stop_runner(pick, signal.SIGKILL)  # nothing written
        elif what == "prune" and ref is not None and ref not in root.procs:
            shutil.rmtree(root.path / "objects" / ref)
            del root.tokens[ref]
            assert note_change(root.path, ref)  # as prune does
        elif what == "rotate" and (root.path / JOURNAL).exists():
            os.replace(root.path / JOURNAL, root.path / ROTATED)  # as another reader does
        elif what == "reader":
            LocalBackend(root.path).discover(list(root.tokens.values()), [])
        elif what == "want":
            every = not every
        numbered = sorted(root.tokens.items())
        tokens = [t for r, t in numbered if every or int(r[-8:], 16) % 2 == 0]
        asked = [root.ref(1), root.ref(0xFFFF), "l-00000000-00000001"]  # one gone, one
        got = kept.discover(tokens, asked)  # missing, one of another root
        want = LocalBackend(root.path).discover(tokens, asked)
        assert same(got.objects) == same(want.objects), f"step {i} ({what})"
        assert got.complete == want.complete is False
        assert got.changes is not None or previous is None
        if previous is not None and got.changes is not None:
            if previous.changes is not None:
                assert got.changes.since == previous.changes.look
            before = {o.ref: o for o in previous.objects}
            for o in got.objects:
                if o.ref in before and before[o.ref] != o:
                    assert o.ref in got.changes.keys, f"step {i}: {o.ref} changed unsaid"
        previous = got
    assert kept.looks.full_looks == 1  # every later look was a changed one


@settings(max_examples=25, deadline=None, suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(steps=STEPS)
def test_a_changed_look_answers_what_a_full_look_answers(
        tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, int]]) -> None:
    root = Root(tmp_path_factory.mktemp("looks") / "root")
    try:
        run(root, steps)
    finally:
        root.close()


def test_a_sigkilled_runner_is_seen_at_the_next_look_without_reading_the_others(
        root: Root) -> None:
    """No file names the death: the runner's pidfd does. The other objects are not read."""
    refs = [root.create() for _ in range(5)]
    backend = LocalBackend(root.path)
    tokens = list(root.tokens.values())
    backend.discover(tokens, [])
    reads = backend.looks.reads
    assert backend.discover(tokens, []).changes.keys == frozenset()  # type: ignore[union-attr]
    assert backend.looks.reads == reads
    root.stop_runner(refs[2], signal.SIGKILL)
    look = backend.discover(tokens, [])
    assert look.changes is not None and refs[2] in look.changes.keys
    gone = look.get(refs[2])
    assert gone is not None and gone.ended and gone.cause.kind is CauseKind.UNKNOWN
    assert "vanished" in gone.cause.detail
    assert backend.looks.reads == reads + 1 and backend.looks.full_looks == 1


def test_without_a_pidfd_a_runner_is_checked_at_every_look(
        root: Root, monkeypatch: pytest.MonkeyPatch) -> None:
    """Out of file descriptors (or a kernel without pidfds): each unwatched runner's
    liveness is read at every look, so its death is still seen at the next one."""
    from dispatch.backends.local.deaths import RunnerWatch

    monkeypatch.setattr(RunnerWatch, "_open", lambda self, pid: None)
    refs = [root.create() for _ in range(3)]
    backend = LocalBackend(root.path)
    tokens = list(root.tokens.values())
    backend.discover(tokens, [])
    assert backend.looks.watch.watched == 0 and len(backend.looks.watch.unwatched) == 3
    root.stop_runner(refs[0], signal.SIGKILL)
    look = backend.discover(tokens, [])
    assert look.changes is not None and refs[0] in look.changes.keys
    assert look.get(refs[0]).ended  # type: ignore[union-attr]
    assert backend.looks.full_looks == 1


def test_without_a_pidfd_a_zombie_runner_is_found_by_the_sweep(
        root: Root, monkeypatch: pytest.MonkeyPatch) -> None:
    """An unwatched runner that died but is still listed in /proc (a zombie its parent has
    not reaped, here this test) is found by the sweep that checks runners whole in turn."""
    from dispatch.backends.local import deaths
    from dispatch.backends.local.deaths import RunnerWatch

    monkeypatch.setattr(RunnerWatch, "_open", lambda self, pid: None)
    monkeypatch.setattr(deaths, "SWEEP", 2)
    refs = [root.create() for _ in range(5)]
    backend = LocalBackend(root.path)
    tokens = list(root.tokens.values())
    backend.discover(tokens, [])
    proc = root.procs.pop(refs[1])
    proc.send_signal(signal.SIGKILL)  # not reaped: a zombie, its pid still listed
    deadline = time.monotonic() + 30
    while (st := read_proc_stat(proc.pid)) is None or st.state != "Z":
        assert time.monotonic() < deadline
        time.sleep(0.01)
    seen = []
    for _ in range(3):  # 5 runners, 2 checked whole a look: all within 3 looks
        look = backend.discover(tokens, [])
        seen.append(look.get(refs[1]).ended)  # type: ignore[union-attr]
    assert seen[-1] and backend.looks.full_looks == 1
    proc.wait()


def test_a_change_the_journal_never_heard_of_is_read_at_the_next_full_look(
        root: Root) -> None:
    """The safety net: a status written without its line (a line lost on a full disk) is
    read by the next full look (every ``full_look_every``), and said to have changed."""
    ref = root.create()
    backend = LocalBackend(root.path)
    tokens = list(root.tokens.values())
    backend.discover(tokens, [])
    lost = ObjectStatus(ref=ref, token=root.tokens[ref], state=State.RUNNING,
                        cause=Cause(kind=CauseKind.NODE_LOST, at=T0), lost_since=T0,
                        executions=(Execution(index=0, started_at=T0),),
                        updated_at=T0, heartbeat_at=T0)
    (root.path / "objects" / ref / "status.json").write_bytes(msgspec.json.encode(lost))
    assert backend.discover(tokens, []).get(ref).lost_since is None  # type: ignore[union-attr]
    backend.looks.last_full = datetime(2000, 1, 1, tzinfo=UTC)  # the full look is due
    look = backend.discover(tokens, [])
    assert look.get(ref).lost_since == T0  # type: ignore[union-attr]
    assert look.changes is not None and ref in look.changes.keys
    assert backend.looks.full_looks == 2
