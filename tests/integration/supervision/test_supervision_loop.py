"""The Supervision loop in one process (real SQLite store, real local backend), its scopes,
and the `supervise --scope` / `supervisors` commands as real processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration.supervision.helpers import ROOT, child_env, create_jobs, spec, wait_for

from dispatch.backends.local import LocalBackend
from dispatch.backends.registry import Backends
from dispatch.backends.slurm.scope import slurm_cluster_name
from dispatch.cli.supervisors import once_summary
from dispatch.stores.select import open_store
from dispatch.supervise.leases import (
    ScopeError,
    Supervision,
    local_scope,
    resolve_scopes,
)


class Clock:
    """A monotonic clock the test moves (a process paused past its lease, without pausing)."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_a_supervisor_that_missed_its_renewal_acts_no_more_and_waits_to_retake(
        tmp_path: Path) -> None:
    root = tmp_path / "local"
    scope = local_scope(root)
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    [job] = create_jobs(url, root, [spec("m", ["sleep", "30"])])
    backend = LocalBackend(root)
    clock = Clock()
    with open_store(url) as store:
        sup = Supervision(store, lambda _n: backend, [scope], holder="A", lease_s=30.0,
                          poll=0.1, monotonic=clock)
        sup.step()  # takes the scope and submits
        assert scope in sup.held and store.version(job) >= 3
        version = store.version(job)
        backend.cancel(next(s.ref for s in _subs(store, job) if s.ref))  # something to do
        clock.t += 31.0  # the process "slept" past its lease
        reports = sup.step()
        assert scope not in sup.held and reports == {}
        assert store.version(job) == version, "it acted after its lease ran out"
        # supervise --once says why the scope was not ticked (issue 32 item 9).
        summary = once_summary([scope], reports, {}, sup.untick)["scopes"][scope]
        assert not summary["ticked"] and "not renewed before it expired" in summary["why"]
        # The store still shows its lease (the store's clock did not move): nobody, A
        # included, takes it before it expires there.
        lease = store.leases().get(scope)
        assert lease is not None and lease.state == "active" and lease.epoch == 1
        sup.step()
        assert scope not in sup.held and store.version(job) == version
        sup.stop()
        sup.release_all()


def _subs(store, job_id):  # type: ignore[no-untyped-def]
    from dispatch.core.record import fold
    from dispatch.supervise.loop import utcnow

    return fold(store.read(job_id), utcnow()).submissions


def test_scopes_this_machine_serves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    root = tmp_path / "local"
    monkeypatch.setenv("DISPATCH_LOCAL_ROOT", str(root))
    backends = Backends()
    mine = local_scope(root)
    assert mine.startswith("local:") and mine != local_scope(tmp_path / "other")
    assert resolve_scopes(["local"], backends) == ([mine, "local"], [])
    assert resolve_scopes([mine], backends) == ([mine], [])
    with pytest.raises(ScopeError, match="this machine's local backend is scope"):
        resolve_scopes([local_scope(tmp_path / "other")], backends)
    with pytest.raises(ScopeError, match="names no backend"):
        resolve_scopes(["lsf:big"], backends)
    scopes, unresolved = resolve_scopes([], backends)
    assert scopes[:2] == [mine, "local"]
    assert all(s.split(":")[0] in ("slurm", "kubeflow") for s in scopes[2:])
    # Every backend is served at least by its bare name; one that cannot say its cluster
    # now is served by that name alone and asked again later.
    assert {"slurm", "kubeflow"} <= set(scopes)
    for u in unresolved:
        assert u.backend in ("slurm", "kubeflow") and u.why
        assert not any(s.startswith(f"{u.backend}:") for s in scopes)


def test_slurm_cluster_name_from_scontrol_show_config() -> None:
    text = ("Configuration data as of 2026-12-01T08:00:00\nAccountingStorageType   = "
            "accounting_storage/slurmdbd\nClusterName             = clusterA\n"
            "SlurmctldHost[0]        = n0\n")
    assert slurm_cluster_name(text) == "clusterA"
    assert slurm_cluster_name("ClusterName =\n") is None


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dispatch.cli", *args], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=120)


def test_submit_stamps_the_scope_and_supervisors_shows_who_serves_it(tmp_path: Path) -> None:
    root = tmp_path / "local"
    env = child_env(DISPATCH_STORE=f"sqlite://{tmp_path / 'r.sqlite3'}",
                    DISPATCH_LOCAL_ROOT=str(root), XDG_STATE_HOME=str(tmp_path / "state"))
    (tmp_path / "job.yaml").write_text(
        json.dumps({"name": "s", "backend": "local", "command": ["sleep", "1"]}))
    assert _cli(env, "submit", str(tmp_path / "job.yaml")).returncode == 0
    scope = local_scope(root)
    rows = json.loads(_cli(env, "supervisors", "--json").stdout)
    assert [(r["scope"], r["state"], r["live_jobs"]) for r in rows] == [(scope, "unserved", 1)]
    once = _cli(env, "supervise", "--once", "--scope", "local", "--lease", "5")
    assert once.returncode == 0, once.stderr
    summary = json.loads(once.stdout)
    assert summary["scopes"][scope]["ticked"] and summary["scopes"][scope]["jobs"] == 1
    rows = json.loads(_cli(env, "supervisors", "--json").stdout)
    row = next(r for r in rows if r["scope"] == scope)
    assert row["state"] == "released" and row["epoch"] == 1 and row["last_tick"] is not None
    bad = _cli(env, "supervise", "--once", "--scope", "local:elsewhere:0")
    assert bad.returncode == 2 and "--scope" in bad.stderr, bad.stderr
    # A running supervisor shows as active; the table names it.
    proc = subprocess.Popen([sys.executable, "-m", "dispatch.cli", "supervise", "--scope",
                             "local", "--lease", "5", "--poll", "0.2"], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            rows = json.loads(_cli(env, "supervisors", "--json").stdout)
            row = next(r for r in rows if r["scope"] == scope)
            if row["state"] == "active" and row["holder"].endswith(f":{proc.pid}"):
                break
            time.sleep(0.2)
        else:
            raise AssertionError(f"never active: {rows}")
        table = _cli(env, "supervisors").stdout
        assert scope in table and "active" in table
    finally:
        proc.terminate()
        proc.wait(30)
    rows = json.loads(_cli(env, "supervisors", "--json").stdout)
    assert next(r for r in rows if r["scope"] == scope)["state"] == "released"


def test_a_backend_that_cannot_say_its_cluster_is_served_by_name_and_asked_again(
        tmp_path: Path) -> None:
    """A scheduler down when the supervisor starts: its bare name is served at once, and its
    own scope from the first lease period after it answers."""
    class Slow:  # a backend that cannot tell its scope until it has a root
        root: Path | None = None

    backend = Slow()
    clock = Clock()
    url = f"sqlite://{tmp_path / 'r.sqlite3'}"
    with open_store(url) as store:
        scopes, unresolved = resolve_scopes(["local"], lambda _n: backend)  # type: ignore[arg-type,return-value]
        assert scopes == ["local"] and [u.backend for u in unresolved] == ["local"]
        sup = Supervision(store, lambda _n: backend, scopes, holder="A", lease_s=30.0,  # type: ignore[arg-type,return-value]
                          poll=0.1, monotonic=clock, unresolved=unresolved)
        sup.step()
        assert set(sup.held) == {"local"}
        backend.root = tmp_path / "local"
        sup.step()  # not due yet: asked once a lease period
        assert set(sup.supervisors) == {"local"}
        clock.t += 31.0
        mine = local_scope(tmp_path / "local")
        # Asked on a thread of its own: a later pass takes the answer (never waits for it).
        wait_for(lambda: (sup.step(), mine in sup.held)[1], timeout=60, what="its scope")
        assert set(sup.supervisors) == {"local", mine}
        assert sup.unresolved == {}
        sup.stop()
        sup.release_all()
