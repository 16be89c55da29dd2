"""Opening stores through open_store: unreachable or missing databases are clear errors
that name the store and never print its password."""

from __future__ import annotations

import pytest
from tests.conftest_pg import ThrowawayPostgres, free_port

from dispatch.stores.base import StoreError
from dispatch.stores.select import open_store
from dispatch.stores.sqlite import SQLiteStore

SECRET = "s3cr3t-Pw"


def test_unreachable_postgres_is_a_clear_error_without_password() -> None:
    port = free_port()  # nothing listens there
    url = f"postgresql://alice:{SECRET}@127.0.0.1:{port}/dispatch?connect_timeout=5"
    with pytest.raises(StoreError) as info:
        open_store(url, env={})
    text = str(info.value)
    assert SECRET not in text and SECRET not in repr(info.value)
    assert f"postgresql://alice:***@127.0.0.1:{port}/dispatch" in text
    assert "cannot reach PostgreSQL" in text
    assert info.value.__cause__ is None and info.value.__suppress_context__


def test_unreachable_postgres_from_env_is_a_clear_error() -> None:
    port = free_port()
    env = {"DISPATCH_STORE": f"postgres://bob:{SECRET}@127.0.0.1:{port}/d"}
    with pytest.raises(StoreError) as info:
        open_store(None, env=env)
    assert SECRET not in str(info.value) and f"127.0.0.1:{port}" in str(info.value)


def test_bad_postgres_url_is_a_clear_error() -> None:
    with pytest.raises(StoreError) as info:
        open_store(f"postgresql://alice:{SECRET}@127.0.0.1:notaport/d", env={})
    assert SECRET not in str(info.value) and "alice:***@" in str(info.value)


@pytest.mark.postgres
def test_missing_database_is_a_clear_error_without_password(
    postgres_cluster: ThrowawayPostgres,
) -> None:
    url = (f"postgresql://postgres:{SECRET}@127.0.0.1:{postgres_cluster.port}/"
           "no_such_database")
    with pytest.raises(StoreError) as info:
        open_store(url, env={})
    assert SECRET not in str(info.value)
    assert "no_such_database" in str(info.value)


@pytest.mark.postgres
def test_postgres_url_opens_a_postgres_store(postgres_url: str) -> None:
    with open_store(None, env={"DISPATCH_STORE": postgres_url}) as store:
        assert type(store).__name__ == "PostgresStore"
        assert store.list_jobs() == []
        assert store.describe() == postgres_url


def test_sqlite_url_and_bare_path_open_the_same_file(tmp_path: pytest.TempPathFactory) -> None:
    path = f"{tmp_path}/r.sqlite3"
    with open_store(f"sqlite://{path}", env={}) as a:
        assert isinstance(a, SQLiteStore)
        assert a.describe() == f"sqlite://{path}"
    with open_store(path, env={}) as b:
        assert isinstance(b, SQLiteStore) and str(b.path) == path


def test_unwritable_sqlite_location_is_a_clear_error(tmp_path: pytest.TempPathFactory) -> None:
    blocker = f"{tmp_path}/file"
    open(blocker, "w").close()
    with pytest.raises(StoreError, match="directory .*/file/sub does not exist"):
        open_store(f"{blocker}/sub/r.sqlite3", env={})
    # The default location's directory is made when missing, and a file in the way is named.
    with pytest.raises(StoreError, match="cannot create record store .*/file/dispatch"):
        open_store(None, env={"XDG_STATE_HOME": blocker})
