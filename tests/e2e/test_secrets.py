"""Issue 21 item 4: a job's environment is readable by its owner only, and a secret named in
``env_from_host`` never reaches the record.

Real processes (the `dispatch` CLI, the local runner), a real SQLite record and a real second
uid (``setpriv --reuid nobody``) in a directory tree it can traverse, so that only the modes
dispatch gives its files and directories stand between that user and the secret (a control
file beside them proves the tree is open to it)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.e2e.conftest import Dispatch, script, wait_until

from dispatch.backends import hostenv
from dispatch.backends.base import Submission
from dispatch.backends.slurm.script import render
from dispatch.backends.slurm.scriptfile import write_script
from dispatch.core.spec import JobSpec

SECRET = "hf_s3cr3t_value_0123456789"
# The job checks the value by its hash: the command itself (which the record keeps) must not
# hold the secret.
HAS_SECRET = (f"hashlib.sha256(os.environ.get('HF_TOKEN', '').encode()).hexdigest() == "
              f"{hashlib.sha256(SECRET.encode()).hexdigest()!r}")
CHECKS_SECRET = script(f"import hashlib, os, sys\nsys.exit(0 if {HAS_SECRET} else 3)\n")
RESUBMIT_PREEMPT = {"rules": [{"on": ["preempted"], "action": "resubmit", "budget": 1}]}

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None,
                                reason="the second-uid checks run as root with setpriv")


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", "--reuid", "nobody", "--regid", "nogroup",
                           "--clear-groups", *argv], capture_output=True, text=True,
                          timeout=30, check=False)


def nobody_cannot_read(path: Path) -> None:
    done = as_nobody("cat", str(path))
    assert done.returncode != 0 and SECRET not in done.stdout, done.stdout
    assert "Permission denied" in done.stderr, done.stderr


def nobody_can_read(path: Path) -> None:
    """The control: the tree up to ``path``'s directory is open to the second uid."""
    done = as_nobody("cat", str(path))
    assert done.returncode == 0, done.stderr


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


@pytest.fixture
def open_tree() -> Iterator[Path]:
    """A directory every user may traverse (pytest's own tmp is 0700: it would hide
    everything from the second uid whatever dispatch did)."""
    base = Path(tempfile.mkdtemp(prefix="dispatch-secrets-", dir="/tmp"))
    base.chmod(0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
def dispatch(open_tree: Path) -> Iterator[Dispatch]:
    d = Dispatch(open_tree)
    d.env.pop("HF_TOKEN", None)
    try:
        yield d
    finally:
        d.close()


def record_bytes(d: Dispatch) -> bytes:
    """Every file of the SQLite record (the database, its WAL and shared memory)."""
    store = Path(d.env["DISPATCH_STORE"])
    return b"".join(_bytes(p) for p in store.parent.glob(store.name + "*"))


def _bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:  # the WAL or shared memory, removed as the last one closed
        return b""


def only_meta(d: Dispatch) -> Path:
    (meta,) = (d.tmp / "local" / "objects").glob("*/meta.json")
    return meta


def test_the_local_meta_json_is_readable_by_its_owner_only(dispatch: Dispatch) -> None:
    spec = dispatch.spec("env-job", CHECKS_SECRET, env={"HF_TOKEN": SECRET})
    done = dispatch("run", str(spec), "--poll", "0.2", timeout=180)
    assert done.returncode == 0, done.stderr  # the runner (same user) still reads it
    meta = only_meta(dispatch)
    assert SECRET in meta.read_text()
    assert mode(meta) == 0o600 and mode(meta.parent) == 0o700
    control = meta.parent.parent / ".control"
    control.write_text("open")
    control.chmod(0o644)
    nobody_can_read(control)
    nobody_cannot_read(meta)
    listing = as_nobody("ls", str(meta.parent))
    assert listing.returncode != 0 and "Permission denied" in listing.stderr


def test_env_from_host_passes_the_value_and_the_record_keeps_the_name_only(
        dispatch: Dispatch) -> None:
    spec = dispatch.spec("from-host", CHECKS_SECRET, env_from_host=["HF_TOKEN"],
                         env={"PLAIN": "not-secret-either"})
    dispatch.env["HF_TOKEN"] = SECRET
    done = dispatch("run", str(spec), "--poll", "0.2", timeout=180)
    assert done.returncode == 0, done.stderr  # the job saw the value (it exits 3 otherwise)
    del dispatch.env["HF_TOKEN"]

    assert SECRET.encode() not in record_bytes(dispatch)
    history = dispatch("history", "from-host", "--json", check=True).stdout
    status = dispatch("status", "from-host", "--json", check=True).stdout
    assert SECRET not in history and SECRET not in status
    created = json.loads(history)[0]["event"]
    assert created["spec"]["env_from_host"] == ["HF_TOKEN"]
    # env values are shown as names only, even those the record holds
    assert created["spec"]["env"] == {"PLAIN": "<hidden>"}
    assert "not-secret-either" not in history

    job = json.loads(status)["job"]
    kept = dispatch.tmp / "state" / "dispatch" / "secrets" / job
    assert not kept.exists()  # removed when the outcome was committed
    nobody_cannot_read(only_meta(dispatch))


def test_a_resubmission_by_another_process_gets_the_value_again(dispatch: Dispatch) -> None:
    """The supervisor that resubmits is another process, without the variable: it reads the
    value kept (0600, in 0700 directories) at submission."""
    body = ("import hashlib, os, sys, time\n"
            f"ok = {HAS_SECRET}\n"
            "if os.environ['DISPATCH_SUBMISSION'] == '1':\n"
            "    open('first-started', 'w').close()\n"
            "    time.sleep(60)\n"
            "sys.exit(0 if ok else 3)\n")
    spec = dispatch.spec("again", script(body), env_from_host=["HF_TOKEN"],
                         policy=RESUBMIT_PREEMPT)
    dispatch.env["HF_TOKEN"] = SECRET
    job = json.loads(dispatch("submit", str(spec), "--json", check=True).stdout)["job"]
    del dispatch.env["HF_TOKEN"]
    kept = dispatch.tmp / "state" / "dispatch" / "secrets" / job / "env.json"
    assert mode(kept) == 0o600 and mode(kept.parent) == 0o700
    assert mode(kept.parent.parent) == 0o700
    nobody_cannot_read(kept)

    wait_until((dispatch.tmp / "first-started").exists, "the first submission never started")
    dispatch("local", "inject", job, "preempt", check=True)
    supervisor = dispatch.spawn("supervise", "--poll", "0.2")
    st = dispatch.wait_for(job, lambda s: s["state"] in ("succeeded", "failed"), timeout=120)
    supervisor.terminate()
    assert st["state"] == "succeeded" and st["submissions"] == 2, st
    assert SECRET.encode() not in record_bytes(dispatch)
    assert not kept.parent.exists()


def test_a_missing_variable_is_refused_at_submit_and_nothing_is_recorded(
        dispatch: Dispatch) -> None:
    spec = dispatch.spec("missing", ["true"], env_from_host=["HF_TOKEN"])
    for args in (["submit", str(spec), "--json"], ["run", str(spec), "--json"]):
        done = dispatch(*args)
        assert done.returncode == 2, done.stderr
        error = json.loads(done.stdout)["error"]
        assert error["code"] == "bad-input"
        assert "env_from_host[0]: HF_TOKEN is not set" in error["message"]
        assert "Traceback" not in done.stderr
    dry = dispatch("submit", "--dry-run", str(spec))
    assert dry.returncode == 2 and "HF_TOKEN is not set" in dry.stderr
    assert dispatch.json("ls", "--all") == []


def test_dry_run_shows_a_placeholder_never_the_value(dispatch: Dispatch) -> None:
    for backend, extra in (("local", {}), ("slurm", {"slurm": {"output_dir": "/tmp/x"}}),
                           ("kubeflow", {"kubeflow": {"runtime": "torch"}})):
        spec = dispatch.spec(f"dry-{backend}", ["true"], env_from_host=["HF_TOKEN"],
                             backend=backend, **extra)
        dispatch.env["HF_TOKEN"] = SECRET
        done = dispatch("submit", "--dry-run", str(spec))
        assert done.returncode == 0, done.stderr
        assert SECRET not in done.stdout
        assert hostenv.PLACEHOLDER in done.stdout and "HF_TOKEN" in done.stdout


def test_a_resubmission_without_the_kept_values_is_rejected_and_says_why(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A supervisor on another host (or state home) cannot read the values: the submission is
    rejected (launch-failed) with dispatch's reason in the note, never run without them."""
    from dispatch.backends.local import LocalBackend
    from dispatch.backends.registry import Backends
    from dispatch.core.record import fold
    from dispatch.service import Service
    from dispatch.stores.sqlite import SQLiteStore

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    local = LocalBackend(tmp_path / "local")
    backends = Backends(lambda name: local)
    with Service(SQLiteStore(tmp_path / "record.sqlite3"), backends) as service:
        spec = JobSpec(name="lost", command=("true",), env_from_host=("HF_TOKEN",))
        job_id = service.create(spec, environ={"HF_TOKEN": SECRET})
        hostenv.forget(job_id)  # as seen from a supervisor that has no copy
        service.supervisor().tick([job_id])
        job = fold(service.store.read(job_id), service.clock())
    rejected = job.submissions[0].end_cause
    assert rejected is not None and rejected.kind.value == "launch-failed", job
    assert "cannot be read" in rejected.note and "HF_TOKEN" not in rejected.detail
    assert not list((tmp_path / "local").glob("objects/*"))  # nothing ran


def test_the_slurm_batch_script_is_readable_by_its_owner_only(open_tree: Path) -> None:
    sub = Submission(job_id="j1", number=1, token="j1.1", spec=JobSpec(
        name="t", command=("true",), backend="slurm", env={"HF_TOKEN": SECRET}))
    text, argv = render(sub, out_dir=open_tree / "slurm")
    fresh = Path(argv[-1])
    write_script(fresh, text)  # a directory dispatch makes: 0700
    assert mode(fresh) == 0o600 and mode(fresh.parent) == 0o700
    nobody_cannot_read(fresh)

    shared = open_tree / "shared"  # a directory the spec names, open to all: left so
    shared.mkdir(mode=0o755)
    control = shared / "control"
    control.write_text("open")
    control.chmod(0o644)
    nobody_can_read(control)
    script_path = shared / "j1.1.sbatch"
    write_script(script_path, text)
    assert mode(script_path) == 0o600 and mode(shared) == 0o755
    nobody_cannot_read(script_path)
    # sbatch reads it as the submitting user: the owner still can
    assert SECRET in script_path.read_text()


def test_the_secrets_directories_are_private_and_never_links(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("XDG_STATE_HOME", str(state))
    root = state / "dispatch" / "secrets"
    root.mkdir(parents=True, mode=0o755)
    root.chmod(0o755)  # made by hand, open: tightened
    path = hostenv.save("j1", {"HF_TOKEN": SECRET})
    assert mode(root) == 0o700 and mode(path.parent) == 0o700 and mode(path) == 0o600
    assert hostenv.load("j1", ["HF_TOKEN"]) == {"HF_TOKEN": SECRET}
    hostenv.forget("j1")
    assert not path.parent.exists()
    with pytest.raises(hostenv.HostEnvUnavailable, match="cannot be read"):
        hostenv.load("j1", ["HF_TOKEN"])

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (root / "j2").symlink_to(elsewhere)  # a planted link is refused, never followed
    with pytest.raises(hostenv.HostEnvUnavailable, match="not a directory"):
        hostenv.save("j2", {"HF_TOKEN": SECRET})
    assert not list(elsewhere.iterdir())

    theirs = root / "j3"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, 65534, 65534)  # another user's directory is refused
    with pytest.raises(hostenv.HostEnvUnavailable, match="belongs to uid 65534"):
        hostenv.save("j3", {"HF_TOKEN": SECRET})
    for bad in ("", "..", "a/b"):
        with pytest.raises(hostenv.HostEnvUnavailable):
            hostenv.job_dir(bad)
