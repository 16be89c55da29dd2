"""Store selection: --store, else DISPATCH_STORE, else the SQLite default; URLs parsed
strictly; a password never printed."""

from __future__ import annotations

import pytest

from dispatch.stores.base import StoreError
from dispatch.stores.select import choose_store, describe_store
from dispatch.stores.sqlite import default_path
from dispatch.stores.url import StoreURL, mask_password, parse_store_url

SECRET = "s3cr3t-Pw"


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("sqlite:///var/lib/dispatch/r.db", StoreURL("sqlite", "/var/lib/dispatch/r.db")),
        ("sqlite:////var/lib/dispatch/r.db", StoreURL("sqlite", "/var/lib/dispatch/r.db")),
        ("SQLITE:///x/../y.db", StoreURL("sqlite", "/y.db")),
        ("/abs/record.sqlite3", StoreURL("sqlite", "/abs/record.sqlite3")),
        ("postgresql://u@db.example:5432/dispatch",
         StoreURL("postgres", "postgresql://u@db.example:5432/dispatch")),
        ("postgres://u:pw@db/dispatch", StoreURL("postgres", "postgres://u:pw@db/dispatch")),
        ("  postgresql://db/d  ", StoreURL("postgres", "postgresql://db/d")),
    ],
)
def test_url_forms(url: str, expected: StoreURL) -> None:
    assert parse_store_url(url) == expected


def test_bare_relative_path_is_made_absolute(tmp_path: pytest.TempPathFactory,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # type: ignore[arg-type]
    assert parse_store_url("state/r.db") == StoreURL("sqlite", f"{tmp_path}/state/r.db")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert parse_store_url("~/r.db") == StoreURL("sqlite", f"{tmp_path}/r.db")


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("mysql://u@h/db", "unknown scheme 'mysql'"),
        ("http://example.com/x", "unknown scheme 'http'"),
        ("sqlite://relative/path.db", "sqlite:///absolute/path"),
        ("sqlite:///", "names no file"),
        ("sqlite:relative.db", "malformed URL"),
        ("postgresql:db", "malformed URL"),
        ("host=db dbname=x user=u", "key=value"),
    ],
)
def test_bad_urls_are_clear_errors(url: str, words: str) -> None:
    with pytest.raises(StoreError, match=words):
        parse_store_url(url, source="--store")


@pytest.mark.parametrize(
    "url",
    [
        f"postgresql://alice:{SECRET}@db:5432/dispatch",
        f"postgres://alice:{SECRET}@db/dispatch?sslmode=require",
        f"postgresql://alice@db/dispatch?password={SECRET}&sslmode=require",
        f"postgresql://alice@db/dispatch?sslmode=require&PASSWORD={SECRET}",
        f"postgresql://alice:{SECRET}/x@db/dispatch",  # an unencoded / in the password
        f"postgresql://alice:{SECRET}@h1:5432,h2:5433/dispatch",
        f"mysql://alice:{SECRET}@db/dispatch",
    ],
)
def test_password_is_masked(url: str) -> None:
    masked = mask_password(url)
    assert SECRET not in masked and "***" in masked
    assert "alice" in masked and "dispatch" in masked
    assert SECRET not in describe_store(url, env={})


def test_mask_leaves_a_url_without_password_alone() -> None:
    for url in ("postgresql://alice@db:5432/dispatch", "postgresql://db/d?sslmode=require",
                "sqlite:///a/b.db", "/a/b.db"):
        assert mask_password(url) == url


def test_bad_url_error_never_shows_the_password() -> None:
    with pytest.raises(StoreError) as info:
        choose_store(f"mysql://alice:{SECRET}@db/x", env={})
    assert SECRET not in str(info.value) and "alice:***@db" in str(info.value)


def test_precedence_flag_then_env_then_default() -> None:
    env = {"DISPATCH_STORE": "postgresql://envhost/db", "XDG_STATE_HOME": "/xdg"}
    assert choose_store("/flag.db", env) == StoreURL("sqlite", "/flag.db")
    assert choose_store(None, env) == StoreURL("postgres", "postgresql://envhost/db")
    del env["DISPATCH_STORE"]
    assert choose_store(None, env) == StoreURL("sqlite", "/xdg/dispatch/record.sqlite3")
    env["DISPATCH_STORE"] = "  "  # empty counts as unset
    assert choose_store(None, env) == StoreURL("sqlite", "/xdg/dispatch/record.sqlite3")


def test_env_error_names_the_variable() -> None:
    with pytest.raises(StoreError, match="DISPATCH_STORE"):
        choose_store(None, {"DISPATCH_STORE": "redis://x"})
    with pytest.raises(StoreError, match="--store"):
        choose_store("", {})


def test_default_path_follows_xdg_then_home() -> None:
    assert str(default_path({"XDG_STATE_HOME": "/s", "HOME": "/h"})) == \
        "/s/dispatch/record.sqlite3"
    assert str(default_path({"HOME": "/h"})) == "/h/.local/state/dispatch/record.sqlite3"
    # A relative XDG_STATE_HOME is invalid per the XDG spec and ignored.
    assert str(default_path({"XDG_STATE_HOME": "rel", "HOME": "/h"})) == \
        "/h/.local/state/dispatch/record.sqlite3"


def test_describe_store() -> None:
    assert describe_store(None, {"XDG_STATE_HOME": "/s"}) == \
        "sqlite:///s/dispatch/record.sqlite3"
    assert describe_store(f"postgresql://u:{SECRET}@h/d", {}) == "postgresql://u:***@h/d"
    assert describe_store(None, {"DISPATCH_STORE": f"postgres://u:{SECRET}@h/d"}) == \
        "postgres://u:***@h/d"
