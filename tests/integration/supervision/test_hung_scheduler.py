"""A scheduler whose tools hang holds up only its own jobs (issue 21 item 9).

Slurm is "configured" as on a login node during a controller outage: its tools are on PATH,
but they hang far longer than the lease period. They are small scripts in a directory put
first on PATH (the real Slurm testbed is never touched): ``scontrol`` (asked which cluster
it is), ``squeue``, ``sacct`` and ``sinfo`` sleep HANG_S; ``sbatch`` fails at once with the
words of an unreachable controller, so the Slurm job gets a submission and its next look
runs ``squeue``, which hangs. Each tool writes a line "TOOL PID START" before it hangs, so
the test waits for the exact hang it means, and kills what is left at the end.

Real ``dispatch supervise`` processes over a real SQLite record and the real local backend.
Latency bounds are generous (the machine is shared and noisy): a local ``true`` job normally
commits within about a second with --poll 0.1; before this change it waited for each hung
tool in turn (at least HANG_S).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.supervision.helpers import (
    HANG_S,
    ROOT,
    Procs,
    bound_slurm_job,
    child_env,
    create_jobs,
    hung_slurm_tools,
    hung_tools_alive,
    jobs,
    kill_hung_tools,
    lease_of,
    slurm_calls,
    slurm_job,
    spec,
    wait_for,
)

from dispatch.backends.local import LocalBackend
from dispatch.core.model import State
from dispatch.supervise.leases import local_scope

# Longer than a loaded machine keeps a process off the CPU: with 1 s, CI under load saw the
# local lease expire and be taken again by the same holder (epoch 1 -> 2), no hang needed.
# Four periods of hang (16 s) stay inside HANG_S.
LEASE_S = 4.0
POLL_S = 0.1
# Generous: normally about 1 s; before this change at least HANG_S.
LOCAL_COMMIT_BOUND_S = 15.0
# One pass waits ONCE_SCOPE_WAIT_S (10 s) for a named scope's cluster, never HANG_S.
ONCE_BOUND_S = 25.0


@pytest.fixture
def hung_slurm(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """A directory of hanging Slurm tools (for PATH) and the log of their calls."""
    bin_dir, log = hung_slurm_tools(tmp_path)
    yield bin_dir, log
    kill_hung_tools(log)  # the hung tools this test started, and only those


_calls = slurm_calls


def _env(tmp_path: Path, bin_dir: Path) -> dict[str, str]:
    return child_env(
        PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        DISPATCH_STORE=f"sqlite://{tmp_path / 'record.sqlite3'}",
        DISPATCH_LOCAL_ROOT=str(tmp_path / "local"),
        DISPATCH_SLURM_OUTPUT_DIR=str(tmp_path / "slurm-out"),
        DISPATCH_KUBECONFIG=str(tmp_path / "no-kubeconfig"),
        XDG_STATE_HOME=str(tmp_path / "state"))


def test_a_hung_slurm_holds_up_no_local_job_and_moves_no_lease(
        tmp_path: Path, procs: Procs, hung_slurm: tuple[Path, Path]) -> None:
    bin_dir, calls = hung_slurm
    env = _env(tmp_path, bin_dir)
    url, root = env["DISPATCH_STORE"], tmp_path / "local"
    local = local_scope(root)
    slurm = slurm_job(url)
    sup = procs.cli("supervise", "--lease", str(LEASE_S), "--poll", str(POLL_S), env=env)
    holder = f"{socket.gethostname()}:{sup.pid}"

    def active(scope: str) -> bool:
        lease = lease_of(url, scope)
        return lease is not None and lease.state == "active" and lease.holder == holder

    wait_for(lambda: active(local) and active("slurm"), timeout=60,
             what="the supervisor active on the local and the bare slurm scope")
    # The Slurm job's look is hanging in squeue (its submission was intended, sbatch said
    # the controller is unreachable), and the question of the cluster hangs in scontrol.
    wait_for(lambda: {"scontrol", "squeue"} <= {n for n, _ in _calls(calls)}, timeout=60,
             what="scontrol and squeue hanging")
    hung_since = min(float(line.split()[2]) for line in calls.read_text().splitlines()
                     if line.startswith("squeue "))
    before = {s: lease_of(url, s) for s in (local, "slurm")}

    [job] = create_jobs(url, root, [spec("quick", ["true"])])
    created = time.monotonic()
    wait_for(lambda: jobs(url)[job].outcome is not None, timeout=HANG_S,
             every=0.05, what="the local job's outcome")
    took = time.monotonic() - created
    assert jobs(url)[job].outcome.state is State.SUCCEEDED  # type: ignore[union-attr]
    assert took < LOCAL_COMMIT_BOUND_S, f"the local job waited {took:.1f}s for Slurm"

    # Several lease periods into the hang: no lease moved, the local scope's nor Slurm's
    # (its supervisor keeps it while it waits for the look).
    wait_for(lambda: time.time() - hung_since > 4 * LEASE_S, what="4 lease periods of hang")
    assert any(n == "squeue" for n, _ in _calls(calls)) and jobs(url)[slurm].outcome is None
    for scope, was in before.items():
        now = lease_of(url, scope)
        assert was is not None and now is not None
        assert (now.holder, now.epoch, now.state) == (holder, was.epoch, "active"), scope
        assert now.expires_at > was.expires_at, f"{scope}: not renewed during the hang"

    # A planned stop hands both back at once, hang or not.
    sup.signal(signal.SIGTERM)
    assert sup.p.wait(30) == 0
    assert {lease_of(url, s).state for s in before} == {"released"}  # type: ignore[union-attr]


def test_supervise_once_does_not_wait_for_a_hung_controller(
        tmp_path: Path, hung_slurm: tuple[Path, Path]) -> None:
    bin_dir, calls = hung_slurm
    env = _env(tmp_path, bin_dir)
    url, root = env["DISPATCH_STORE"], tmp_path / "local"
    [job] = create_jobs(url, root, [spec("quick", ["true"])])
    started = time.monotonic()
    # The lease plays no part here (scontrol is asked off every loop); it must outlast the
    # local tick's longest step on a loaded machine (supervise/leases.py), which 1 s did not.
    # Slurm asked for (without --scope only the backends of live jobs are: issue 36)
    once = subprocess.run([sys.executable, "-m", "dispatch.cli", "supervise", "--once",
                           "--lease", "15", "--scope", "local", "--scope", "slurm"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=HANG_S + 30)
    took = time.monotonic() - started
    assert once.returncode == 0, once.stderr
    assert "scontrol" in {n for n, _ in _calls(calls)}, "the hung scontrol was never asked"
    assert took < ONCE_BOUND_S, f"supervise --once waited {took:.1f}s for scontrol"
    summary = json.loads(once.stdout)
    # The summary says why a scope was not ticked, and stderr what went on meanwhile.
    assert summary["scopes"].get(local_scope(root), {}).get("ticked"), (summary, once.stderr)
    assert summary["scopes"][local_scope(root)]["jobs"] == 1
    assert "slurm" in summary["scopes"]  # served by its bare name meanwhile
    assert "slurm is served by its bare name" in once.stderr
    assert "did not say which cluster it is within" in once.stderr
    assert jobs(url)[job].submissions, "the local job was not submitted"


def test_supervise_without_scope_asks_only_the_backends_of_live_jobs(
        tmp_path: Path, hung_slurm: tuple[Path, Path]) -> None:
    """Issue 36: a machine where only local jobs run: ``supervise`` without --scope serves
    the local backend and never asks Slurm (nor Kubernetes) which cluster it is."""
    bin_dir, calls = hung_slurm
    env = _env(tmp_path, bin_dir)
    url, root = env["DISPATCH_STORE"], tmp_path / "local"
    [job] = create_jobs(url, root, [spec("quick", ["true"])])
    once = subprocess.run([sys.executable, "-m", "dispatch.cli", "supervise", "--once",
                           "--json"], env=env, cwd=ROOT, capture_output=True, text=True,
                          timeout=HANG_S + 30)
    assert once.returncode == 0, once.stderr
    summary = json.loads(once.stdout)
    assert set(summary["scopes"]) == {local_scope(root), "local"}, summary
    assert summary["scopes"][local_scope(root)]["jobs"] == 1
    assert _calls(calls) == [], "a Slurm tool was asked"
    assert "kubeflow" not in once.stderr and "slurm" not in once.stderr
    assert jobs(url)[job].submissions, "the local job was not submitted"


def test_a_slow_local_backend_is_resolved_while_slurm_hangs(tmp_path: Path) -> None:
    """Issue 32 item 9: on a loaded machine, building the local backend took longer than the
    schedulers' wait, so ``supervise --once`` served only the bare name ``local`` and never
    ticked the local scope (KeyError on it in the summary). The local scope asks no
    scheduler: it is waited for, while the hung Slurm is still cut at the wait."""
    from dispatch.supervise.scopes import resolve_scopes

    root, hung = tmp_path / "local", threading.Event()

    def backend_for(name: str) -> LocalBackend:
        if name == "slurm":
            hung.wait(HANG_S)  # a controller that never answers
            raise AssertionError("the hung slurm was waited for")
        time.sleep(1.0)  # a loaded machine: the backend takes longer to build than the wait
        return LocalBackend(root)

    try:
        scopes, unresolved = resolve_scopes(["local", "slurm"], backend_for,  # type: ignore[arg-type]
                                            wait_s=0.2)
    finally:
        hung.set()
    assert scopes == [local_scope(root), "local", "slurm"]
    assert [(u.backend, "did not say which cluster it is within 0.2s" in u.why)
            for u in unresolved] == [("slurm", True)]


# -- reads (issue 32 item 6) -------------------------------------------------------------------
READ_DEADLINE_S = 3  # $DISPATCH_READ_DEADLINE for the reads below
# Generous (a loaded machine starts a CLI slowly): a read answers just past the deadline;
# before this change it waited for squeue's own 30 s timeout, then sacct's (35 s seen).
READ_BOUND_S = 20.0


def _read(env: dict[str, str], *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "dispatch.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=HANG_S + 30)
    return done, time.monotonic() - started


def test_reads_answer_within_the_deadline_while_slurm_hangs(
        tmp_path: Path, hung_slurm: tuple[Path, Path]) -> None:
    """R5 for reads: ``ls`` and ``status`` show a Slurm job as its record last committed it,
    marked unreachable, within the read's deadline (``status`` exits 4, S3; ``ls`` 0); the
    local job's row is as the local backend shows it; no hung tool outlives the read."""
    bin_dir, calls = hung_slurm
    env = {**_env(tmp_path, bin_dir), "DISPATCH_READ_DEADLINE": str(READ_DEADLINE_S)}
    url, root = env["DISPATCH_STORE"], tmp_path / "local"
    on_slurm = bound_slurm_job(url)
    [local_job] = create_jobs(url, root, [spec("quick", ["sleep", "60"])])
    ticked = subprocess.run([sys.executable, "-m", "dispatch.cli", "supervise", "--once",
                             "--scope", "local"], env=env, cwd=ROOT, capture_output=True,
                            text=True, timeout=HANG_S + 30)  # submits the local job
    assert ticked.returncode == 0, ticked.stderr
    ref = jobs(url)[local_job].submissions[0].ref
    try:
        local, _ = _read(env, "status", local_job, "--json")  # asks no Slurm tool
        assert local.returncode == 0 and slurm_calls(calls) == [], local.stderr

        ls, took = _read(env, "ls", "--json")
        assert ls.returncode == 0, ls.stderr
        assert took < READ_BOUND_S, f"ls waited {took:.1f}s for the hung squeue"
        rows = {r["job"]: r for r in json.loads(ls.stdout)}
        assert (rows[on_slurm]["scheduler"], rows[on_slurm]["state"]) == ("unreachable",
                                                                            "running")
        assert "slurm" in rows[on_slurm]["scheduler_problem"]
        # `running` and `notes` are the status's own (read from the job's events and its
        # supervisor's presence row; a list row has neither)
        only_status = ("forecast", "running", "notes")
        assert {k: v for k, v in rows[local_job].items() if k not in only_status} == {
            k: v for k, v in json.loads(local.stdout).items() if k not in only_status}
        assert "squeue" in {n for n, _ in slurm_calls(calls)}, "the hung squeue was not asked"
        assert hung_tools_alive(calls) == [], "a hung Slurm tool outlived the read"

        status, took = _read(env, "status", on_slurm, "--json")
        assert status.returncode == 4, status.stderr  # S3: its scheduler could not be asked
        assert took < READ_BOUND_S, f"status waited {took:.1f}s for the hung squeue"
        doc = json.loads(status.stdout)
        assert (doc["scheduler"], doc["state"]) == ("unreachable", "running")
        assert hung_tools_alive(calls) == [], "a hung Slurm tool outlived the read"
        text, _ = _read(env, "status", on_slurm)
        assert text.returncode == 4 and "unreachable" in text.stdout + text.stderr
        # Without the record: the scheduler alone is asked, under the same deadline.
        bare, took = _read(env, "status", on_slurm, "--no-record", "--backend", "slurm")
        assert bare.returncode == 4 and "squeue timed out" in bare.stderr, bare.stderr
        assert took < READ_BOUND_S, f"status --no-record waited {took:.1f}s"
        assert hung_tools_alive(calls) == [], "a hung Slurm tool outlived the read"
    finally:
        assert ref is not None
        LocalBackend(root).stop(ref)


def test_a_read_deadline_that_is_no_number_of_seconds_is_refused(tmp_path: Path) -> None:
    env = {**child_env(DISPATCH_STORE=f"sqlite://{tmp_path / 'r.sqlite3'}"),
           "DISPATCH_READ_DEADLINE": "soon"}
    done, _ = _read(env, "ls")
    assert done.returncode == 2 and "DISPATCH_READ_DEADLINE" in done.stderr, done.stderr


def test_a_read_does_not_count_building_a_backend_against_the_deadline(
        tmp_path: Path) -> None:
    """Building a backend asks no scheduler: a loaded machine that takes longer than the
    read's deadline to build the local one still shows its jobs as the backend says."""
    from dispatch.backends.registry import Backends, make_backend
    from dispatch.service import Service
    from dispatch.stores.select import open_store

    root = tmp_path / "local"
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    [job] = create_jobs(url, root, [spec("quick", ["true"])])

    def slow_local(name: str) -> LocalBackend:
        time.sleep(2.0)  # past the deadline and its grace below
        backend = make_backend(name)
        assert isinstance(backend, LocalBackend)
        return backend

    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DISPATCH_LOCAL_ROOT", str(root))
        with Service(open_store(url), Backends(slow_local), read_deadline_s=0.2) as service:
            [view] = service.views([job])
    assert view.scheduler == "ok", view.problem


def test_a_live_job_of_a_backend_not_served_yet_gets_served(
        tmp_path: Path, hung_slurm: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: ``supervise`` without --scope serves the backends of live jobs; a job
    recorded later for another backend is served from the next look on (by its bare name
    while its controller hangs), and only then is that backend asked anything."""
    from dispatch.backends.registry import Backends
    from dispatch.stores.select import open_store
    from dispatch.supervise.leases import Supervision

    bin_dir, calls = hung_slurm
    for k, v in _env(tmp_path, bin_dir).items():
        monkeypatch.setenv(k, v)
    url = os.environ["DISPATCH_STORE"]
    backends = Backends()
    try:
        with open_store(url) as store:
            sup = Supervision(store, backends, [local_scope(tmp_path / "local")])
            refused: set[str] = set()
            assert sup.add_live_scopes(refused) == []
            assert _calls(calls) == []  # no Slurm job: Slurm is never asked
            slurm_job(url)
            assert sup.add_live_scopes(refused) == ["slurm"]
            assert "slurm" in sup.supervisors and not refused
            assert sup.add_live_scopes(refused) == []  # served already
            sup.stop()
    finally:
        backends.close()
