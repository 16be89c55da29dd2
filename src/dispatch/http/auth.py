"""Who may use ``dispatch serve``: bearer tokens from a token file (lines ``name:token``),
and the checks a server that can start commands needs even on loopback.

The token's name is the actor recorded for the person requests made with it. Without a token
file (allowed on loopback only) every request is the user who started the server, and the
server refuses what a web page elsewhere could make a browser send: a Host that is not a
loopback name (DNS rebinding), a cross-origin POST, a POST that is not JSON.
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from dispatch.errors import BadInput

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


class TokenFileError(BadInput):
    """A token file that cannot be used (names the file and the line)."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass(frozen=True)
class Tokens:
    """name -> token; empty means no token file (loopback only)."""

    by_name: dict[str, str]

    def __bool__(self) -> bool:
        return bool(self.by_name)

    def who(self, authorization: str | None) -> str | None:
        """The name whose token the ``Authorization: Bearer`` header carries, else None.
        Every token is compared in constant time."""
        if not authorization:
            return None
        scheme, _, given = authorization.partition(" ")
        if scheme.lower() != "bearer" or not given.strip():
            return None
        found = None
        for name, token in self.by_name.items():
            if hmac.compare_digest(token.encode(), given.strip().encode()):
                found = name
        return found


def load_tokens(path: str | os.PathLike[str]) -> Tokens:
    """Read ``name:token`` lines (``#`` comments and blank lines skipped). The file is opened
    without following a symlink and must not be readable by group or others."""
    p = Path(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as err:
        raise TokenFileError(f"token file {p}: cannot open: {err.strerror}") from None
    with os.fdopen(fd, "r", encoding="utf-8") as fh:
        mode = os.fstat(fh.fileno()).st_mode
        if not stat.S_ISREG(mode):
            raise TokenFileError(f"token file {p}: not a regular file")
        if mode & 0o077:
            raise TokenFileError(f"token file {p}: readable by group or others "
                                 f"(mode {stat.S_IMODE(mode):o}); chmod 600 it")
        text = fh.read()
    by_name: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.partition(":")
        name, token = name.strip(), token.strip()
        if not sep or not name or not token:
            raise TokenFileError(f"token file {p}: line {n}: expected name:token")
        if len(token) < 16:
            raise TokenFileError(f"token file {p}: line {n}: the token of {name!r} is "
                                 "shorter than 16 characters")
        if name in by_name:
            raise TokenFileError(f"token file {p}: line {n}: {name!r} appears twice")
        if token in by_name.values():
            raise TokenFileError(f"token file {p}: line {n}: a token is used twice")
        by_name[name] = token
    if not by_name:
        raise TokenFileError(f"token file {p}: no name:token line")
    return Tokens(by_name)
