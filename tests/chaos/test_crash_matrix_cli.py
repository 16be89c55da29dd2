"""Issue 45 item 13: ``dispatch submit`` dying in its own first tick, in the crash matrix.

``dispatch submit`` makes the job's first submission itself, in a tick of its own that holds
no lease (docs/supervisors.md, Fencing). A supervisor already serves the scope (it took the
lease before the job existed, so the takeover rule of issue 39 does not apply); a real
``dispatch submit`` child dies (DISPATCH_FAILPOINTS, as kill -9 would leave it) at each point
of its submit; then the supervisor carries the job on. Checked, on SQLite and on a throwaway
PostgreSQL: the attempt names the dead process (its holder); where the submit was not
carried out (after SubmissionIntended, after staging) the supervisor retried it before the
attempt lease after the intent had passed (both times the record's own), since the holder
is gone; one object for the token, no process left behind, the job succeeded.

Kept apart from test_crash_matrix.py (whose actions are the supervisor's) so that the two
matrices grow without touching each other.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401  (fixtures)
from tests.integration.supervision.crash import Run, _no_duplicates, _no_orphans
from tests.integration.supervision.helpers import ROOT, child_env

from dispatch.backends.local import LocalBackend
from dispatch.core import events as ev
from dispatch.core.decide import ATTEMPT_LEASE
from dispatch.core.model import State
from dispatch.core.record import fold
from dispatch.stores.select import open_store
from dispatch.supervise.leases import Supervision, local_scope
from dispatch.supervise.loop import utcnow
from dispatch.support import failpoints

pytestmark = pytest.mark.chaos

# The points `dispatch submit`'s first tick passes, and whether the supervisor must submit
# again (the dead one's submit not carried out) or only bind what it published.
POINTS = {
    "appended:SubmissionIntended": True,
    "local-submit:staged": True,
    "acted:submit": False,
    "appended:SubmissionBound": False,
}
LEASE_S = 300.0  # the supervisor keeps its lease through the whole run: no takeover after
POLL_S = 0.1


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'record.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


def _cli_submit(url: str, base: Path, root: Path, point: str) -> tuple[int, str]:
    spec = base / "job.yaml"
    spec.write_text(json.dumps({"name": f"cli-{point}", "backend": "local",
                                "command": ["true"], "nodes": 1}))
    env = child_env(DISPATCH_STORE=url, DISPATCH_LOCAL_ROOT=str(root),
                    XDG_STATE_HOME=str(base / "state"), DISPATCH_FAILPOINTS=point)
    child = subprocess.run([sys.executable, "-m", "dispatch.cli", "submit", str(spec)],
                           env=env, cwd=ROOT, capture_output=True, text=True, timeout=120,
                           check=False)
    assert child.returncode == failpoints.EXIT_CODE, \
        f"{point}: exit {child.returncode}, not at the failpoint:\n{child.stderr}"
    assert f"failpoint {point}:" in child.stderr, child.stderr
    return child.returncode, child.stderr


def _one(url: str, base: Path, point: str, retried: bool) -> str:
    root = base / "local"
    scope = local_scope(root)
    backend = LocalBackend(root)
    with open_store(url) as store:
        sup = Supervision(store, lambda _n: backend, [scope], lease_s=LEASE_S, poll=POLL_S)
        try:
            sup.step()  # the supervisor holds the scope before the job exists
            assert scope in sup.held, sup.untick
            epoch = sup.held[scope].lease.fence.epoch
            before = {r.job_id for r in store.list_jobs()}
            _cli_submit(url, base, root, point)
            [job_id] = [r.job_id for r in store.list_jobs() if r.job_id not in before]
            assert fold(store.read(job_id), utcnow()).scope == scope
            deadline = time.monotonic() + 120
            while fold(store.read(job_id), utcnow()).outcome is None:
                assert time.monotonic() < deadline, store.read(job_id)
                sup.step()
                time.sleep(POLL_S)
            assert sup.held[scope].lease.fence.epoch == epoch, "no takeover in between"
            record = store.read(job_id)
        finally:
            sup.release_all()
    job = fold(record, utcnow())
    assert job.outcome is not None and job.outcome.state is State.SUCCEEDED, job.outcome
    assert len(job.submissions) == 1
    [intended] = [e for e in record if isinstance(e, ev.SubmissionIntended)]
    attempts = [e for e in record if isinstance(e, ev.SubmissionAttempted)]
    if retried:
        assert attempts, f"{point}: the supervisor never submitted again"
        retry = attempts[0]
        # Both times are the record's: retried because its holder is gone, not because the
        # attempt lease ran out.
        assert retry.at < intended.at + ATTEMPT_LEASE, \
            f"{point}: retried {retry.at - intended.at} after the intent (the lease)"
        assert retry.holder is not None and retry.holder.pid == sup_pid()
        assert intended.holder is not None and intended.holder.pid != sup_pid(), \
            "the intent names the `dispatch submit` process"
    else:
        assert not attempts, f"{point}: the published object is bound, never submitted again"
    result = Run("cli-submit", point)
    _no_duplicates(root, result)
    _no_orphans(root, result)
    gap = (attempts[0].at - intended.at).total_seconds() if attempts else 0.0
    return f"pass, retried {gap:.2f}s after the intent" if attempts else "pass, bound"


def sup_pid() -> int:
    return os.getpid()  # the supervisor runs in this process


def test_dispatch_submit_killed_in_its_first_tick(url: str, tmp_path: Path) -> None:
    results: list[tuple[str, str]] = []
    failures: list[str] = []
    for point, retried in POINTS.items():
        base = tmp_path / point.replace(":", "-")
        base.mkdir()
        try:
            results.append((point, _one(url, base, point, retried)))
        except AssertionError as err:  # one window's failure never hides the others'
            failures.append(f"cli-submit x {point}: {err}")
            results.append((point, "FAIL"))
    print(f"\ncrash matrix, `dispatch submit` ({url.partition(':')[0]}):")
    for point, verdict in results:
        print(f"  {point:28} x cli-submit -> {verdict}")
    assert not failures, "\n".join(failures)
