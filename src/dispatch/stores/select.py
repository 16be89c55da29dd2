"""Which record store to use, decided in one place for every command:
``--store URL``, else $DISPATCH_STORE, else the SQLite file under $XDG_STATE_HOME."""

from __future__ import annotations

import os
from collections.abc import Mapping

from dispatch.stores.base import RecordStore
from dispatch.stores.sqlite import default_path
from dispatch.stores.url import StoreURL, mask_password, parse_store_url

ENV_VAR = "DISPATCH_STORE"


def choose_store(url: str | None = None, env: Mapping[str, str] = os.environ) -> StoreURL:
    """The store that ``url`` (from --store), the environment or the default names.

    An empty DISPATCH_STORE counts as unset; an explicit empty --store is an error.
    """
    if url is not None:
        return parse_store_url(url, source="--store")
    from_env = env.get(ENV_VAR, "")
    if from_env.strip():
        return parse_store_url(from_env, source=ENV_VAR)
    return StoreURL("sqlite", str(default_path(env)))


def describe_store(url: str | None = None, env: Mapping[str, str] = os.environ) -> str:
    """The chosen store, fit to print: sqlite:///path or the URL with its password masked.

    A URL that cannot be parsed is described as given, masked."""
    try:
        chosen = choose_store(url, env)
    except Exception:
        given = url if url is not None else env.get(ENV_VAR, "")
        return mask_password(given)
    if chosen.kind == "sqlite":
        return f"sqlite://{chosen.target}"
    return mask_password(chosen.target)


def open_store(url: str | None = None, env: Mapping[str, str] = os.environ) -> RecordStore:
    """Open the chosen store. StoreError (password masked) for a bad URL or a store that
    cannot be reached; SchemaTooNew for a store written by a newer build.

    Only the default SQLite location gets its directory created: a path someone typed
    (--store, $DISPATCH_STORE) whose directory is missing is refused, not made."""
    chosen = choose_store(url, env)
    if chosen.kind == "sqlite":
        from dispatch.stores.sqlite import SQLiteStore

        is_default = url is None and not env.get(ENV_VAR, "").strip()
        return SQLiteStore(chosen.target, create_parent=is_default)
    from dispatch.stores.postgres import PostgresStore

    return PostgresStore(chosen.target)
