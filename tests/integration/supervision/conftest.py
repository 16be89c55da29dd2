"""Fixtures for the supervision tests: a store URL on SQLite and on a throwaway PostgreSQL
(tests/conftest_pg.py), and a reaper for the supervisor processes a test starts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401  (fixtures)
from tests.integration.supervision.helpers import Procs


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'record.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def procs() -> Iterator[Procs]:
    p = Procs()
    yield p
    p.reap()
