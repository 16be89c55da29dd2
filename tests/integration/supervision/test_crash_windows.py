"""Issue 39 items 1 and 3 on real processes (SQLite and a throwaway PostgreSQL): a
``dispatch supervise`` child dies at a failpoint (crash.py), a clean supervisor takes the
scope over, and what the dead one recorded and did not carry out is carried out within the
lease + the local backend's submit bound (0) + two ticks, not 30 s later.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from tests.integration.supervision.crash import run
from tests.integration.supervision.helpers import ROOT, child_env

from dispatch.support import failpoints


@pytest.mark.parametrize(("action", "point", "state"), [
    # Item 1: the cancel is recorded (CancelSent), never sent: the person's cancel was lost
    # for RESEND_AFTER (30 s), and the job could succeed meanwhile.
    ("cancel", "appended:CancelSent", "cancelled"),
    # The same for the supervisor's own stop of a fenced object (the gated replacement
    # waits for it).
    ("node-loss", "appended:StopRequested", "succeeded"),
    # Item 3: killed inside the local submit (staged, never published): the replacement
    # submit waited ATTEMPT_LEASE (30 s) from the dead supervisor's attempt.
    ("submit", "local-submit:staged", "succeeded"),
    ("preempt", "appended:RecoveryStarted", "succeeded"),
])
def test_what_a_dead_supervisor_recorded_is_carried_out_at_the_takeover(
        store_url: str, tmp_path: Path, action: str, point: str, state: str) -> None:
    got = run(store_url, tmp_path, action, point)
    assert got.outcome[0] == state, got
    assert got.recovery_s <= got.bound_s, \
        f"{action}/{point}: carried out {got.recovery_s:.2f}s after the crash, over " \
        f"lease + bound + two ticks = {got.bound_s:.2f}s"


def test_an_unknown_failpoint_is_an_error_naming_the_known_ones(tmp_path: Path) -> None:
    with pytest.raises(failpoints.UnknownFailpoint) as err:
        run("sqlite://" + str(tmp_path / "r.sqlite3"), tmp_path, "submit", "acted:nothing")
    assert "acted:nothing" in str(err.value) and "local-submit:staged" in str(err.value)
    # In a process: it refuses to start, naming them (never a supervisor with a typo armed).
    res = subprocess.run([sys.executable, "-c", "import dispatch.supervise.loop"], cwd=ROOT,
                         env=child_env(DISPATCH_FAILPOINTS="lease:renewing, nope"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode != 0
    assert "no failpoint 'nope'" in res.stderr and "acted:cancel" in res.stderr
