"""The supervisors' presence rows (stores/presence.py) on SQLite and a throwaway PostgreSQL,
and their publication by a real Supervision: a standby's row, the active one's row with the
reads its scheduler refuses it, and those refusals named in the notes of its jobs' status
(CLI and the store's view) until they end (issue 48 item 10, issue 47 item 4)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.integration.stores.helpers import Backdoor, build_v1_store
from tests.integration.supervision.helpers import ROOT, child_env, create_jobs, spec

from dispatch.backends.local import LocalBackend
from dispatch.core.refusals import Refusal, decode, encode
from dispatch.stores.select import open_store
from dispatch.supervise.leases import Supervision, local_scope
from dispatch.supervise.presence import job_notes, scope_refusals, supervisors_rows

STARTED = datetime(2026, 12, 7, 8, 0, tzinfo=UTC)
NODES = Refusal("Node in cluster", "list", "403 Forbidden: nodes is forbidden",
                "a lost node is seen only through its pods' conditions",
                datetime(2026, 12, 7, 9, 0, tzinfo=UTC))


def test_rows_keep_since_while_the_role_holds_and_go_when_withdrawn_or_stale(
        store_url: str) -> None:
    with open_store(store_url) as store:
        book = store.leases().presence()
        book.announce("s", "A", "standby", started_at=STARTED, stale_after_s=60)
        [first] = book.current()
        assert (first.scope, first.holder, first.role, first.started_at) == (
            "s", "A", "standby", STARTED)
        assert first.since == first.seen_at and first.expires_at > first.now
        book.announce("s", "A", "standby", started_at=STARTED, stale_after_s=60)
        [again] = book.current()
        assert again.since == first.since and again.seen_at >= first.seen_at
        book.announce("s", "A", "active", started_at=STARTED, stale_after_s=60,
                      refusals=encode([NODES]))
        [active] = book.current()
        assert active.role == "active" and active.since >= again.seen_at
        assert decode(active.refusals) == [NODES]
        book.announce("s", "B", "standby", started_at=STARTED, stale_after_s=60)
        book.announce("t", "B", "standby", started_at=STARTED, stale_after_s=60)
        assert [(p.scope, p.holder, p.role) for p in book.current()] == [
            ("s", "A", "active"), ("s", "B", "standby"), ("t", "B", "standby")]
        book.withdraw("B", "t")
        assert [(p.scope, p.holder) for p in book.current()] == [("s", "A"), ("s", "B")]
        book.withdraw("A")
        assert [(p.scope, p.holder) for p in book.current()] == [("s", "B")]
        # A row not written again within its bound is stale: not shown, and the next write
        # (anyone's) deletes it.
        # (Only its going is asserted: a check that it is there first would race its bound.)
        book.announce("s", "C", "standby", started_at=STARTED, stale_after_s=0.2)
        time.sleep(0.3)
        assert [p.holder for p in book.current()] == ["B"]
        book.announce("s", "B", "standby", started_at=STARTED, stale_after_s=60)
        table = "supervisor_presence" if store_url.startswith("sqlite") else \
            "dispatch_supervisor_presence"
        assert _holders(store_url, table) == ["B"]
        with pytest.raises(ValueError, match="one of active, standby"):
            book.announce("s", "A", "boss", started_at=STARTED,  # type: ignore[arg-type]
                          stale_after_s=60)
        with pytest.raises(ValueError, match="stale_after_s"):
            book.announce("s", "A", "standby", started_at=STARTED,
                          stale_after_s=float("inf"))


def test_a_store_from_before_version_6_gets_the_presence_table_by_its_migration(
        store_url: str) -> None:
    build_v1_store(store_url, {})
    with open_store(store_url) as store:
        assert Backdoor(store_url).schema_version() == 7
        book = store.leases().presence()
        assert book.current() == []
        book.announce("s", "A", "standby", started_at=STARTED, stale_after_s=60)
        assert [p.holder for p in book.current()] == ["A"]


def _holders(store_url: str, table: str) -> list[str]:
    """Every row's holder, stale or not, read past the book."""
    if store_url.startswith("sqlite://"):
        conn = sqlite3.connect(store_url.removeprefix("sqlite://"))
        try:
            return [h for (h,) in conn.execute(f"SELECT holder FROM {table}")]
        finally:
            conn.close()
    import psycopg

    with psycopg.connect(store_url) as pg:
        return [h for (h,) in pg.execute(f"SELECT holder FROM {table}").fetchall()]


class Refusing(LocalBackend):
    """The real local backend, whose "scheduler" refuses what the test says (generic: any
    backend with ``refused_reads`` is published the same way)."""

    refused: list[Refusal] = []

    def refused_reads(self) -> list[Refusal]:
        return list(self.refused)


def _status_json(env: dict[str, str], job: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-m", "dispatch.cli", "status", "--json", job],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    doc: dict[str, object] = json.loads(done.stdout)
    return doc


def test_the_active_supervisor_publishes_its_refused_reads_and_status_names_them(
        store_url: str, tmp_path: Path) -> None:
    root = tmp_path / "local"
    scope = local_scope(root)
    [job] = create_jobs(store_url, root, [spec("r", ["sleep", "60"])])
    backend = Refusing(root)
    backend.refused = [NODES]
    env = child_env(DISPATCH_STORE=store_url, DISPATCH_LOCAL_ROOT=str(root),
                    XDG_STATE_HOME=str(tmp_path / "state"))
    with open_store(store_url) as store:
        a = Supervision(store, lambda _n: backend, [scope], holder="A", lease_s=30.0,
                        poll=0.1)
        b = Supervision(store, lambda _n: backend, [scope], holder="B", lease_s=30.0,
                        poll=0.1)
        try:
            a.step()
            b.step()
            [row] = [r for r in supervisors_rows(store) if r["scope"] == scope]
            assert row["holder"] == "A" and row["refusals"] == [NODES.to_json()]
            assert [s["holder"] for s in row["standbys"]] == ["B"]
            assert scope_refusals(store, scope) == [NODES]
            status = _status_json(env, job)
            assert status["notes"] == [
                "the local scheduler refuses `list Node in cluster` to the supervisor's "
                "identity since 2026-12-07 09:00:00 UTC (403 Forbidden: nodes is forbidden):"
                " a lost node is seen only through its pods' conditions; see `dispatch "
                "doctor --backend local`"]
            text = subprocess.run([sys.executable, "-m", "dispatch.cli", "status", job],
                                  env=env, cwd=ROOT, capture_output=True, text=True,
                                  timeout=120)
            assert "note: the local scheduler refuses `list Node in cluster`" in " ".join(
                text.stdout.split()), text.stdout
            # Allowed again: the next tick publishes it (a change is written at once).
            backend.refused = []
            a.step()
            assert scope_refusals(store, scope) == []
            assert _status_json(env, job)["notes"] == []
            assert job_notes(store, None) == []
        finally:
            b.release_all()
            a.release_all()
        assert [r for r in store.leases().presence().current()] == []
    # A refusal seen by a supervisor whose lease has lapsed is nobody's to publish.
    with open_store(store_url) as store:
        store.leases().presence().announce(scope, "Z", "active", started_at=STARTED,
                                           stale_after_s=60, refusals=encode([NODES]))
        assert scope_refusals(store, scope) == []
