"""The local backend against real processes: every cause it reports, and its requests."""

from __future__ import annotations

import getpass
import json
import os
import signal
import time
from datetime import timedelta
from pathlib import Path

import msgspec
import pytest
from local_harness import (
    PY,
    SLEEP,
    Local,
    alive,
    fixture,
    kill_quietly,
    wait_dead,
    wait_file,
)

from dispatch.backends.base import Submission
from dispatch.backends.local import BadInjection, InjectError, LocalBackend, NoSuchObject
from dispatch.backends.local.wire import RunnerInfo
from dispatch.core.model import CauseKind, Provenance, State
from dispatch.core.spec import JobSpec
from dispatch.errors import BadInput, StateConflict


def test_all_nodes_exit_zero_is_succeeded(local: Local) -> None:
    ref, token = local.submit((PY, "-c", "import os; print('hello from', os.environ['RANK'])"),
                              nodes=2)
    report = local.ended(ref)
    assert report.state is State.SUCCEEDED
    assert report.cause.kind is CauseKind.NONE
    assert report.token == token
    assert report.nodes == ("node0", "node1")
    (execution,) = report.executions
    assert execution.ended and execution.cause == report.cause
    assert execution.started_at is not None and execution.ended_at is not None
    assert execution.started_at.tzinfo is not None
    logs = local.backend.logs(ref)
    assert [p.name for p in logs] == ["node0.log", "node1.log"]
    assert [p.read_text() for p in logs] == ["hello from 0\n", "hello from 1\n"]


def test_a_non_zero_exit_ends_the_object_and_kills_the_other_nodes(local: Local) -> None:
    code = "import os, sys, time\nif os.environ['RANK'] == '1': sys.exit(3)\ntime.sleep(60)"
    ref, _ = local.submit((PY, "-c", code), nodes=2)
    report = local.ended(ref)
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.NON_ZERO_EXIT
    assert report.cause.provenance is Provenance.APPLICATION
    assert report.cause.exit_code == 3
    assert "node1 exited 3" in report.cause.detail
    for pid in local.status_pids(ref):
        assert not alive(pid)


def test_time_limit(local: Local) -> None:
    ref, _ = local.submit(SLEEP, time_limit=1)
    report = local.ended(ref)
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.TIME_LIMIT
    assert report.cause.provenance is Provenance.SCHEDULER
    assert "time limit 1s" in report.cause.detail


def test_memory_limit_is_out_of_memory(local: Local) -> None:
    limit = 64 * 1024 * 1024
    ref, _ = local.submit((PY, fixture("allocate.py"), "200"), memory=limit)
    report = local.ended(ref)
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.OUT_OF_MEMORY
    assert f"limit {limit} bytes" in report.cause.detail
    assert "node0" in report.cause.detail


def test_cancel_carries_the_actor(local: Local) -> None:
    ref, _ = local.submit(SLEEP, nodes=2)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    local.backend.cancel(ref, actor="alice")
    report = local.ended(ref)
    assert report.state is State.CANCELLED
    assert report.cause.kind is CauseKind.CANCELLED
    assert report.cause.provenance is Provenance.ACTOR
    assert report.cause.actor == "alice"
    for pid in local.status_pids(ref):
        assert not alive(pid)


def test_cancel_without_actor_names_the_user(local: Local) -> None:
    ref, _ = local.submit(SLEEP)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    local.backend.cancel(ref)
    assert local.ended(ref).cause.actor == getpass.getuser()


def test_stop_is_cancelled_by_the_supervisor(local: Local) -> None:
    ref, _ = local.submit(SLEEP)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    local.backend.stop(ref)
    report = local.ended(ref)
    assert report.state is State.CANCELLED
    assert report.cause.kind is CauseKind.CANCELLED
    assert (report.cause.provenance, report.cause.actor) == (Provenance.ACTOR, "dispatch")


def test_a_node_that_ignores_sigterm_is_killed_after_the_grace(local: Local,
                                                               tmp_path: Path) -> None:
    ready = tmp_path / "ready"
    ref, _ = local.submit((PY, fixture("ignore_term.py"), str(ready)))
    wait_file(ready)
    local.backend.stop(ref)
    report = local.ended(ref)
    assert report.state is State.CANCELLED
    for pid in local.status_pids(ref):
        assert not alive(pid)


def test_inject_preempt_by_job_id(local: Local) -> None:
    ref, _ = local.submit(SLEEP, job="jp", nodes=2)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    assert local.backend.inject("jp", "preempt") == ref
    report = local.ended(ref)
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.PREEMPTED
    assert report.cause.provenance is Provenance.SCHEDULER
    assert report.cause.detail == "injected preemption"


def test_lose_node_keeps_running_with_node_lost_until_stopped(local: Local) -> None:
    ref, token = local.submit(SLEEP, nodes=2)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    node0, node1 = local.status_pids(ref)
    assert local.backend.inject(token, "lose-node", 1) == ref
    report = local.wait(ref, lambda r: r.cause.kind is CauseKind.NODE_LOST)
    assert report.state is State.RUNNING
    assert report.lost_since is not None and report.lost_since.tzinfo is not None
    assert report.cause.at == report.lost_since
    assert "node1 lost" in report.cause.detail
    wait_dead(node1)
    assert alive(node0)
    # Like a Kubernetes Job at FailureTarget: it keeps saying running (S11 fences it).
    for _ in range(3):
        again = local.look(ref)
        assert (again.state, again.cause.kind) == (State.RUNNING, CauseKind.NODE_LOST)
        assert again.lost_since == report.lost_since
        time.sleep(0.1)
    with pytest.raises(InjectError, match="already lost"):
        local.backend.inject(ref, "lose-node", 1)
    local.backend.stop(ref)
    ended = local.ended(ref)
    assert ended.state is State.CANCELLED
    assert ended.cause.actor == "dispatch"
    assert ended.lost_since == report.lost_since
    assert not alive(node0)


def test_lose_node_after_the_other_nodes_exit_still_needs_a_stop(local: Local) -> None:
    # Node 1 is lost; node 0 then finishes by itself: the object still only ends when stopped.
    code = ("import os, time\nif os.environ['RANK'] == '0':\n"
            "    while not os.path.exists('go'): time.sleep(0.02)\nelse: time.sleep(60)")
    ref, _ = local.submit((PY, "-c", code), nodes=2, workdir=str(local.root.parent))
    local.wait(ref, lambda r: r.state is State.RUNNING)
    local.backend.inject(ref, "lose-node", 1)
    local.wait(ref, lambda r: r.cause.kind is CauseKind.NODE_LOST)
    (local.root.parent / "go").write_text("")
    wait_dead(local.status_pids(ref)[0])
    assert local.look(ref).state is State.RUNNING
    local.backend.stop(ref)
    assert local.ended(ref).state is State.CANCELLED


def test_inject_refuses_what_cannot_happen(local: Local) -> None:
    ref, _ = local.submit(SLEEP, nodes=2, gated=True)
    with pytest.raises(NoSuchObject):
        local.backend.inject("nobody", "preempt")
    local.wait(ref, lambda r: r.gated)
    with pytest.raises(InjectError, match="not running"):
        local.backend.inject(ref, "lose-node")
    local.backend.open_gate(ref)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    # What can never be made is bad input (exit 2); what the state forbids, a conflict (6).
    for args, words in [(("lose-node", 2), "no node 2"), (("lose-node", -1), "no node -1"),
                        (("preempt", 0), "preempt takes no node")]:
        with pytest.raises(BadInjection, match=words) as bad:
            local.backend.inject(ref, *args)  # type: ignore[arg-type]
        assert isinstance(bad.value, BadInput) and bad.value.exit_code == 2
    with pytest.raises(BadInjection, match="unknown injection"):
        local.backend.inject(ref, "explode")  # type: ignore[arg-type]
    assert local.look(ref).state is State.RUNNING  # nothing was injected
    local.backend.stop(ref)
    local.ended(ref)
    with pytest.raises(InjectError, match="already ended") as late:
        local.backend.inject(ref, "preempt")
    assert isinstance(late.value, StateConflict) and late.value.exit_code == 6
    with pytest.raises(InjectError, match="already ended"):
        local.backend.inject(ref, "lose-node", 0)
    with pytest.raises(BadInjection, match="no node 5"):
        local.backend.inject(ref, "lose-node", 5)  # bad input whatever the state


def test_nothing_starts_until_the_gate_opens(local: Local) -> None:
    ref, _ = local.submit((PY, "-c", "print('ran')"), nodes=2, gated=True)
    report = local.wait(ref, lambda r: r.gated)
    assert report.state is State.PENDING and report.cause.kind is CauseKind.NONE
    # The runner is up and waiting (it wrote its status); give it a few looks.
    wait_file(local.root / "objects" / ref / "status.json")
    for _ in range(3):
        time.sleep(0.1)
        again = local.look(ref)
        assert again.state is State.PENDING and again.gated and again.executions == ()
    assert local.backend.logs(ref) == []
    assert local.status_pids(ref) == []
    local.backend.open_gate(ref)
    report = local.ended(ref)
    assert report.state is State.SUCCEEDED and not report.gated
    assert [p.read_text() for p in local.backend.logs(ref)] == ["ran\n", "ran\n"]


def test_cancel_while_gated_ends_without_an_execution(local: Local) -> None:
    ref, _ = local.submit(SLEEP, gated=True)
    local.wait(ref, lambda r: r.gated)
    local.backend.cancel(ref, actor="bob")
    report = local.ended(ref)
    assert report.state is State.CANCELLED and report.cause.actor == "bob"
    assert report.executions == ()
    assert local.backend.logs(ref) == []


def test_each_node_sees_torchrun_like_variables(local: Local, tmp_path: Path) -> None:
    out = tmp_path / "env"
    out.mkdir()
    ref, _ = local.submit((PY, fixture("report_env.py")), job="envjob", number=4, nodes=3,
                          env={"OUT_DIR": str(out), "FROM_SPEC": "yes", "RANK": "99"})
    assert local.ended(ref).state is State.SUCCEEDED
    envs = [json.loads((out / f"env-{i}.json").read_text()) for i in range(3)]
    ports = {e["MASTER_PORT"] for e in envs}
    assert len(ports) == 1 and ports.pop().isdigit()
    for i, env in enumerate(envs):
        assert env["RANK"] == env["NODE_RANK"] == str(i)  # the spec cannot override a rank
        assert env["WORLD_SIZE"] == "3"
        assert env["LOCAL_RANK"] == "0" and env["LOCAL_WORLD_SIZE"] == "1"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["DISPATCH_JOB_ID"] == "envjob"
        assert env["DISPATCH_SUBMISSION"] == "4"
        assert env["DISPATCH_NODE"] == f"node{i}"
        assert env["FROM_SPEC"] == "yes"
        # The runner's own import path is not leaked to the nodes.
        assert env.get("PYTHONPATH") == os.environ.get("PYTHONPATH")
        assert "DISPATCH_LOCAL_ORIGINAL_PYTHONPATH" not in env


def test_submit_is_idempotent_by_token(local: Local) -> None:
    ref, token = local.submit(SLEEP, job="same")
    again, _ = local.submit(SLEEP, job="same")
    assert again == ref
    fresh = LocalBackend(local.root)
    sub = Submission(job_id="same", number=1, token=token, spec=JobSpec(name="t", command=SLEEP))
    assert fresh.submit(sub) == ref
    assert [p.name for p in (local.root / "objects").iterdir()] == [ref]


def test_a_restarted_supervisor_finds_the_object_by_token(local: Local) -> None:
    ref, token = local.submit(SLEEP, nodes=2)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    restarted = LocalBackend(local.root)
    found = restarted.discover([token], []).objects
    assert [(o.ref, o.token, o.state) for o in found] == [(ref, token, State.RUNNING)]
    restarted.cancel(ref, actor="carol")
    report = local.wait(ref, lambda r: r.ended, backend=restarted)
    assert report.cause.actor == "carol"
    assert local.look(ref) == report  # the first instance sees the same on disk


def test_a_runner_killed_with_sigkill_is_unknown_runner_vanished(local: Local) -> None:
    ref, _ = local.submit(SLEEP, nodes=2)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    nodes = local.status_pids(ref)
    info = msgspec.json.decode((local.root / "objects" / ref / "runner.json").read_bytes(),
                               type=RunnerInfo)
    os.kill(info.pid, signal.SIGKILL)
    wait_dead(info.pid)
    report = local.look(ref)
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.UNKNOWN
    assert "vanished" in report.cause.detail
    assert report.executions and report.executions[-1].cause == report.cause
    # The verdict kills what the runner left behind, so "ended" is true.
    for pid in nodes:
        wait_dead(pid)
    # Another supervisor reads the same verdict, not a new one.
    assert LocalBackend(local.root).discover([], [ref]).objects == (report,)


def test_a_launch_failure(local: Local) -> None:
    ref, _ = local.submit(("/nonexistent/trainer",), nodes=2)
    report = local.ended(ref)
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.LAUNCH_FAILED
    assert "/nonexistent/trainer" in report.cause.detail


def test_a_node_killed_by_a_signal_is_unknown(local: Local) -> None:
    ref, _ = local.submit((PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"))
    report = local.ended(ref)
    assert report.state is State.FAILED
    assert report.cause.kind is CauseKind.UNKNOWN
    assert "killed by signal 9 (SIGKILL)" in report.cause.detail
    assert report.cause.exit_code is None


def test_what_a_node_leaves_behind_is_killed_before_the_object_ends(local: Local,
                                                                    tmp_path: Path) -> None:
    pid_file = tmp_path / "grandchild.pid"
    ref, _ = local.submit((PY, fixture("leave_child.py"), str(pid_file)))
    grandchild = int(wait_file(pid_file))
    try:
        report = local.ended(ref)
        assert report.state is State.SUCCEEDED
        assert not alive(grandchild)
    finally:
        kill_quietly(grandchild)


def test_cancel_and_stop_of_an_ended_object_are_no_ops(local: Local) -> None:
    ref, _ = local.submit((PY, "-c", "pass"))
    report = local.ended(ref)
    local.backend.cancel(ref, actor="late")
    local.backend.stop(ref)
    local.backend.open_gate(ref)
    assert list((local.root / "objects" / ref / "control").iterdir()) == []
    assert local.look(ref) == report


def test_a_ref_that_does_not_exist(local: Local) -> None:
    local.backend.disk.claim()  # the root is there and is ours: its answer is positive
    (report,) = local.backend.discover([], ["l-00000000"]).objects
    assert report.ref == "l-00000000" and report.token is None
    assert report.ended and report.cause.kind is CauseKind.UNKNOWN
    assert "no such local object" in report.cause.detail
    local.backend.stop("l-00000000")  # nothing to stop: no error
    with pytest.raises(NoSuchObject):
        local.backend.logs("l-00000000")
    # A ref is a name under objects/, never a path out of it.
    (local.root / "objects").mkdir(parents=True, exist_ok=True)
    for escape in ("..", "../objects", "/tmp"):
        (report,) = local.backend.discover([], [escape]).objects
        assert report.ended and "no such local object" in report.cause.detail
        local.backend.cancel(escape)
        with pytest.raises(NoSuchObject):
            local.backend.inject(escape, "preempt")
        with pytest.raises(NoSuchObject):
            local.backend.logs(escape)


def test_prune_removes_only_ended_objects(local: Local) -> None:
    done, _ = local.submit((PY, "-c", "pass"))
    live, _ = local.submit(SLEEP)
    local.ended(done)
    local.wait(live, lambda r: r.state is State.RUNNING)
    assert local.backend.prune(older_than=timedelta(0)) == [done]
    assert sorted(p.name for p in (local.root / "objects").iterdir()) == [live]
    (gone,) = local.backend.discover([], [done]).objects
    assert gone.cause.kind is CauseKind.UNKNOWN and gone.ended
    assert local.look(live).state is State.RUNNING


def test_a_submitter_without_pythonpath(local: Local, tmp_path: Path,
                                        monkeypatch: pytest.MonkeyPatch) -> None:
    # The runner still imports dispatch; the nodes get the submitter's environment: none.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    out = tmp_path / "env"
    out.mkdir()
    ref, _ = local.submit((PY, fixture("report_env.py")), env={"OUT_DIR": str(out)})
    assert local.ended(ref).state is State.SUCCEEDED
    env = json.loads((out / "env-0.json").read_text())
    assert "PYTHONPATH" not in env


def test_removing_a_live_objects_directory_kills_its_processes(local: Local,
                                                                tmp_path: Path) -> None:
    ref, _ = local.submit(SLEEP, nodes=2)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    nodes = local.status_pids(ref)
    info = msgspec.json.decode((local.root / "objects" / ref / "runner.json").read_bytes(),
                               type=RunnerInfo)
    moved = tmp_path / "moved"
    os.rename(local.root / "objects" / ref, moved)
    for pid in [*nodes, info.pid]:
        wait_dead(pid)
    assert "was removed while the object ran" in (moved / "runner.log").read_text()
    (report,) = local.backend.discover([], [ref]).objects
    assert report.ended and "no such local object" in report.cause.detail


def test_a_runner_told_to_terminate_kills_its_nodes_and_says_unknown(local: Local) -> None:
    ref, _ = local.submit(SLEEP, nodes=2)
    local.wait(ref, lambda r: r.state is State.RUNNING)
    nodes = local.status_pids(ref)
    info = msgspec.json.decode((local.root / "objects" / ref / "runner.json").read_bytes(),
                               type=RunnerInfo)
    os.kill(info.pid, signal.SIGTERM)
    report = local.ended(ref)
    assert report.state is State.FAILED and report.cause.kind is CauseKind.UNKNOWN
    assert "received SIGTERM" in report.cause.detail
    for pid in nodes:
        assert not alive(pid)


def test_the_runner_imports_nothing_from_the_jobs_workdir_or_pythonpath(
        local: Local, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Issue 32, item 1: the job's working directory, 0777, holds a dispatch/ package, a
    # msgspec.py and a cloudpickle.py another user planted, and the submitter's PYTHONPATH
    # names it. The runner (dispatch's own code) imports none of them; the job's own command
    # runs there with its environment as it was.
    from planted import plant, ran

    shared = tmp_path / "scratch"
    marker = tmp_path / "planted-ran"
    plant(shared, marker)
    monkeypatch.setenv("PYTHONPATH", str(shared))
    code = ("import os, pathlib; "
            "pathlib.Path('ran').write_text(os.getcwd() + ' ' + os.environ['PYTHONPATH'])")
    ref, _ = local.submit((PY, "-c", code), workdir=str(shared))
    assert local.ended(ref).state is State.SUCCEEDED
    assert (shared / "ran").read_text() == f"{shared} {shared}"
    assert ran(marker) == []
