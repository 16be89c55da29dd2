"""Issue 45 item 14: a supervisor paused (SIGSTOP) inside a fenced append, right after the
fence check, and continued after its lease expired. What holds differs by store, and
docs/supervisors.md says so:

- PostgreSQL: the paused session holds the lease row FOR SHARE; the server ends it after
  IDLE_IN_TXN_TIMEOUT_MS idle in the transaction (rolling the append back), and a standby
  takes the scope. Continued, the paused writer's append has written nothing, and its next
  one is fenced.
- SQLite: the paused process holds the file's write lock, so nobody can write, the standby's
  lease write included, for the whole pause (no server can end it). Continued, its append
  commits: its fence was checked under the lock it never let go of, so no other writer
  existed in between. The standby then takes the scope at the next epoch, reads the
  paused writer's events (once), builds on them, and the resumed writer's next append is
  fenced: one decision, never two contradicting ones.

The writer is a real process stopped by SIGSTOP (tests/integration/supervision/
paused_writer.py). Every wait is for the state the test then reads.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.integration.supervision.helpers import ROOT, child_env
from tests.integration.supervision.test_lease_book import created, note

from dispatch.core.events import EscalationRaised
from dispatch.stores.fence import Lease
from dispatch.stores.select import open_store
from dispatch.stores.url import parse_store_url

SCOPE = "local:paused"
WRITER = Path(__file__).with_name("paused_writer.py")


def _stopped(pid: int) -> bool:
    # /proc/PID/stat: "PID (COMM) STATE ..."; T is stopped by a signal.
    return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] == "T"


def _line(child: subprocess.Popen[str]) -> str:
    assert child.stdout is not None
    line = child.stdout.readline().strip()
    assert line, f"the writer ended: {child.stderr.read() if child.stderr else ''}"
    return line


def _take(store_url: str, holder: str) -> Lease:
    """The lease, asked for every 0.1 s as a standby does, once it is free."""
    with open_store(store_url) as standby:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            taken = standby.leases().acquire(SCOPE, holder, 30.0)
            if taken is not None:
                return taken
            time.sleep(0.1)
    raise AssertionError("no standby could take the scope")


def _messages(store_url: str) -> list[str]:
    with open_store(store_url) as store:
        return [e.message if isinstance(e, EscalationRaised) else type(e).__name__
                for e in store.read("j")]


def test_a_supervisor_paused_inside_an_append_and_continued(store_url: str) -> None:
    with open_store(store_url) as store:
        store.create(created("j", SCOPE))
    child = subprocess.Popen([sys.executable, str(WRITER), store_url, "j", SCOPE],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, env=child_env(), cwd=ROOT)
    try:
        leased, epoch, expires = _line(child).split()
        assert leased == "leased"
        assert _line(child) == "inside"
        while not _stopped(child.pid):  # it stops itself right after saying so
            time.sleep(0.01)
        if store_url.startswith("sqlite"):
            # The paused writer holds the file's write lock: no lease can be written.
            probe = sqlite3.connect(parse_store_url(store_url).target, timeout=0,
                                    isolation_level=None)
            try:
                with pytest.raises(sqlite3.OperationalError, match="database is locked"):
                    probe.execute("BEGIN IMMEDIATE")
            finally:
                probe.close()
            while time.time() <= float(expires):  # paused past its lease
                time.sleep(0.05)
            os.kill(child.pid, signal.SIGCONT)
            assert _line(child) == "committed 3"
            taken = _take(store_url, "standby")
            assert taken.epoch == int(epoch) + 1
            with open_store(store_url) as standby:  # builds on what it reads
                assert standby.append("j", note(4), 3, fence=taken.fence) == 4
            expected = ["JobCreated", "paused 0", "paused 1", "note 4"]
        else:
            # The server ends the paused session; the standby then takes the scope.
            taken = _take(store_url, "standby")
            assert taken.epoch == int(epoch) + 1
            with open_store(store_url) as standby:
                assert standby.append("j", note(2), 1, fence=taken.fence) == 2
            os.kill(child.pid, signal.SIGCONT)
            refused = _line(child)
            assert refused.startswith("refused StoreError"), refused  # its session was ended
            expected = ["JobCreated", "note 2"]
        assert child.stdin is not None
        child.stdin.write("again\n")
        child.stdin.flush()
        assert _line(child).startswith("refused Fenced")
        assert child.wait(timeout=60) == 0
    finally:
        if child.poll() is None:
            os.kill(child.pid, signal.SIGCONT)
            child.kill()
            child.wait()
    assert _messages(store_url) == expected
