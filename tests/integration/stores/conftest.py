"""Fixtures for the store contract suite: every test taking ``store_url`` / ``store`` runs on
SQLite and on a throwaway PostgreSQL (tests/conftest_pg.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401  (fixtures)
from tests.integration.stores.helpers import Backdoor

from dispatch.stores.base import RecordStore
from dispatch.stores.select import open_store


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        (tmp_path / "state").mkdir()
        return f"sqlite://{tmp_path / 'state' / 'record.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


@pytest.fixture
def store(store_url: str) -> Iterator[RecordStore]:
    with open_store(store_url) as s:
        yield s


@pytest.fixture
def backdoor(store_url: str) -> Backdoor:
    return Backdoor(store_url)
