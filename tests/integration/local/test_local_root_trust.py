"""A local root another user could change is refused (issue 45, item 9): owned by another
user, writable by others without the sticky bit, or with a folder of theirs in it (a
pre-made claims/). The command line exits 4 naming the root and the fix, nothing recorded;
under a real supervisor such a root is never read, so a running job whose objects/ that
user moved away is not recorded ended, and supervision resumes once the root is ours again.

Another user is real: these tests chown to ``nobody`` (uid 65534), so they need root; as
another user they check only what modes can show."""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

import pytest
from local_harness import WAIT_S
from tests.cli.conftest import invoke, world_env
from tests.specs import parse_spec

from dispatch.backends.local import LocalBackend
from dispatch.backends.registry import declarations_for
from dispatch.core.model import SchedulerUnreachable, State
from dispatch.core.record import fold
from dispatch.service.requests import create_job
from dispatch.stores.select import open_store
from dispatch.stores.sqlite import SQLiteStore
from dispatch.supervise.loop import Supervisor, utcnow

NOBODY = 65534
AS_ROOT = os.getuid() == 0
SPEC = 'name: ok\ncommand: ["true"]\n'


def _recorded(env: dict[str, str]) -> int:
    path = Path(env["DISPATCH_STORE"])
    if not path.exists():
        return 0
    with SQLiteStore(path) as store:
        return len(store.list_jobs())


def _refused(env: dict[str, str], spec: Path, root: Path, words: str) -> None:
    code, _, err = invoke(env, "submit", str(spec))
    assert code == 4, err
    assert f"the local root {root} is not safe to use" in err and words in err
    assert "chmod go-w" in err and "DISPATCH_LOCAL_ROOT" in err
    assert _recorded(env) == 0


def test_the_cli_refuses_a_root_another_user_could_change(tmp_path: Path) -> None:
    env = world_env(tmp_path)
    spec = tmp_path / "ok.yaml"
    spec.write_text(SPEC)
    root = Path(env["DISPATCH_LOCAL_ROOT"])
    root.mkdir()
    os.chmod(root, 0o777)
    _refused(env, spec, root, "can be written by everybody and is not sticky")
    assert os.listdir(root) == []  # no marker, no objects/ made there
    if AS_ROOT:
        os.chmod(root, 0o755)
        os.chown(root, NOBODY, NOBODY)
        _refused(env, spec, root, "is owned by another user (uid 65534)")
        os.chown(root, 0, 0)
        (root / "claims").mkdir()  # their pre-made claims/ in a root of ours
        os.chown(root / "claims", NOBODY, NOBODY)
        _refused(env, spec, root, f"{root / 'claims'} is owned by another user")
        assert os.listdir(root / "claims") == []
        os.rmdir(root / "claims")
    os.chmod(root, 0o1777)  # sticky, like /tmp: what is ours there stays ours
    code, _, err = invoke(env, "submit", str(spec))
    assert code == 0, err
    assert _recorded(env) == 1


def test_a_backend_never_submits_through_another_users_claims(tmp_path: Path) -> None:
    if not AS_ROOT:
        return  # only root can make a folder of another user here
    root = tmp_path / "local"
    backend = LocalBackend(root)
    backend.disk.claim()
    (root / "claims").mkdir(mode=0o777)
    os.chmod(root / "claims", 0o777)
    os.chown(root / "claims", NOBODY, NOBODY)
    store = open_store(f"sqlite://{tmp_path / 'record.sqlite3'}")
    spec = parse_spec({"name": "claims", "command": ["true"]})
    job_id = create_job(store, spec, declarations_for("local"), utcnow())
    sup = Supervisor(store, lambda _name: backend)
    for _ in range(2):
        report = sup.tick()
        assert "claims is owned by another user" in " ".join(report.errors + report.unreachable)
    assert os.listdir(root / "claims") == [] and os.listdir(root / "objects") == []
    job = fold(store.read(job_id), utcnow())
    assert job.current is None or job.current.ref is None
    store.close()


def test_a_root_taken_over_is_never_read_and_its_job_not_ended(tmp_path: Path) -> None:
    # The audit's case: the root became another user's, who moved objects/ away while the
    # job ran. Read, that root says the job's object is gone (ended, cause unknown); it is
    # refused instead, and the job runs on and ends as it did once the root is ours again.
    if not AS_ROOT:
        return
    store = open_store(f"sqlite://{tmp_path / 'record.sqlite3'}")
    root = tmp_path / "local"
    backend = LocalBackend(root, node_loss_window=timedelta(seconds=1), kill_grace=0.5)
    go = tmp_path / "go"
    spec = parse_spec({"name": "taken", "command": [
        "sh", "-c", f'while [ ! -e "{go}" ]; do sleep 0.05; done']})
    job_id = create_job(store, spec, declarations_for("local"), utcnow())
    sup = Supervisor(store, lambda _name: backend)

    def running() -> bool:
        cur = fold(store.read(job_id), utcnow()).current
        return cur is not None and cur.ref is not None and 0 in cur.executions_started

    deadline = time.monotonic() + WAIT_S
    while not running():
        assert time.monotonic() < deadline, "the supervisor never started the job"
        sup.tick()
        time.sleep(0.1)
    ref = fold(store.read(job_id), utcnow()).current.ref  # type: ignore[union-attr]
    recorded = len(store.read(job_id))

    os.chown(root, NOBODY, NOBODY)
    os.chmod(root, 0o777)
    os.rename(root / "objects", root / "moved")  # what that user did: an empty objects/
    (root / "objects").mkdir()
    os.chown(root / "objects", NOBODY, NOBODY)
    for _ in range(3):
        report = sup.tick()
        said = " ".join(report.errors + report.unreachable)
        assert report.appended == 0 and f"the local root {root} is not safe to use" in said
    with pytest.raises(SchedulerUnreachable, match="owned by another user"):
        LocalBackend(root).discover([], [ref])  # a restarted supervisor: the same answer
    job = fold(store.read(job_id), utcnow())
    assert len(store.read(job_id)) == recorded
    assert job.outcome is None and job.hold is None and not job.current.ended  # type: ignore[union-attr]

    os.rmdir(root / "objects")
    os.rename(root / "moved", root / "objects")
    os.chown(root, 0, 0)
    os.chmod(root, 0o755)
    go.write_text("")
    deadline = time.monotonic() + WAIT_S
    while fold(store.read(job_id), utcnow()).outcome is None:
        assert time.monotonic() < deadline, "the job's end was never recorded"
        sup.tick()
        time.sleep(0.1)
    outcome = fold(store.read(job_id), utcnow()).outcome
    assert outcome is not None and outcome.state is State.SUCCEEDED
    store.close()
