"""Store URLs: which store a string names, and how to print one without its password."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Literal

from dispatch.stores.base import StoreError

ACCEPTED = "sqlite:///absolute/path, a bare file path, or postgresql://user@host:port/db"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
_DSN = re.compile(r"^\s*[A-Za-z_]+\s*=")
_QUERY_PASSWORD = re.compile(r"((?:^|[?&])password=)[^&#]*", re.IGNORECASE)


@dataclass(frozen=True)
class StoreURL:
    kind: Literal["sqlite", "postgres"]
    target: str  # sqlite: an absolute file path; postgres: the URL as given


def mask_password(url: str) -> str:
    """The URL with any password replaced by ***: in user:password@ and in ?password=.

    The user info ends at the last '@' before the query, so a password holding an unencoded
    '/' or '@' is masked whole (over-masking is the safe side).
    """
    m = _SCHEME.match(url)
    if not m:
        return url
    start = m.end()
    rest = url[start:]
    head_end = len(rest)
    for sep in ("?", "#"):
        i = rest.find(sep)
        if i != -1:
            head_end = min(head_end, i)
    head = rest[:head_end]
    at = head.rfind("@")
    if at != -1:
        userinfo = head[:at]
        colon = userinfo.find(":")
        if colon != -1:
            rest = userinfo[: colon + 1] + "***" + rest[at:]
            head_end = head_end - (at - colon - 1) + 3
    query = _QUERY_PASSWORD.sub(r"\1***", rest[head_end:])
    return url[:start] + rest[:head_end] + query


def parse_store_url(url: str, *, source: str = "store URL") -> StoreURL:
    """What ``url`` names; StoreError (password masked) when it names nothing we can open."""
    text = url.strip()
    if not text:
        raise StoreError(f"{source} is empty (use {ACCEPTED})")
    m = _SCHEME.match(text)
    if m:
        scheme = m.group(1).lower()
        if scheme in ("postgresql", "postgres"):
            return StoreURL("postgres", text)
        if scheme == "sqlite":
            path = text[m.end():]
            if not path.startswith("/"):
                raise StoreError(
                    f"{source} {mask_password(text)}: a SQLite URL is sqlite:///absolute/path"
                )
            path = "/" + path.lstrip("/")
            if path == "/":
                raise StoreError(f"{source} {text}: names no file")
            return StoreURL("sqlite", os.path.normpath(path))
        raise StoreError(
            f"{source} {mask_password(text)}: unknown scheme {scheme!r} (use {ACCEPTED})"
        )
    if text.lower().startswith(("sqlite:", "postgres:", "postgresql:")):
        raise StoreError(f"{source} {mask_password(text)}: malformed URL (use {ACCEPTED})")
    if _DSN.match(text):
        raise StoreError(
            f"{source}: looks like a key=value connection string; use a postgresql:// URL"
        )
    return StoreURL("sqlite", os.path.abspath(os.path.expanduser(text)))
