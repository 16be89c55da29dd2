"""The throwaway PostgreSQL: found or installed, run as the postgres user, removed after;
missing binaries FAIL the PostgreSQL tests unless DISPATCH_SKIP_POSTGRES=1."""

from __future__ import annotations

import psycopg
import pytest
import tests.conftest_pg as pg
from tests.conftest_pg import PostgresUnavailable, ThrowawayPostgres


def test_cluster_starts_serves_and_is_removed() -> None:
    cluster = ThrowawayPostgres().start()
    try:
        assert cluster.tmp.exists()
        with psycopg.connect(cluster.new_database(), autocommit=True) as conn:
            assert conn.execute("SELECT current_setting('listen_addresses')").fetchone() == (
                "127.0.0.1",)
            assert conn.execute("SELECT 1").fetchone() == (1,)
    finally:
        cluster.stop()
    assert not cluster.tmp.exists()
    with pytest.raises(psycopg.OperationalError):
        psycopg.connect(cluster.url(), connect_timeout=3)


def test_missing_binaries_without_root_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pg, "find_bindir", lambda: None)
    monkeypatch.setattr(pg.os, "geteuid", lambda: 1000)
    with pytest.raises(PostgresUnavailable, match="apt-get install postgresql"):
        pg.ensure_bindir()


def test_unavailable_postgres_fails_the_tests_not_skips(monkeypatch: pytest.MonkeyPatch) -> None:
    def unavailable() -> None:
        raise PostgresUnavailable("no binaries, no apt")

    monkeypatch.setattr(pg, "ensure_bindir", unavailable)
    with pytest.raises(pytest.fail.Exception, match="no binaries, no apt"):
        pg.start_for_tests({})
    with pytest.raises(pytest.skip.Exception, match="DISPATCH_SKIP_POSTGRES"):
        pg.start_for_tests({"DISPATCH_SKIP_POSTGRES": "1"})
