"""Who may use ``dispatch serve``. There is no unauthenticated TCP mode:

- over the Unix socket (http/listeners.py) the kernel tells us the peer's uid and only the
  server's own uid gets in; its requests act as the server's user;
- over TCP every request needs a credential: the per-start token (random at each start,
  printed once as a ``/login?token=`` URL, kept 0600 in the state dir) or a team token from
  ``--token-file`` (lines ``name:token``), either as ``Authorization: Bearer`` or as the
  session cookie a login gives a browser. The actor recorded is the token's name, the
  server's user for the per-start token.

The server also refuses what a web page elsewhere could make a browser send: a Host that is
not a loopback name on a loopback bind (DNS rebinding), a cross-origin POST, a POST that is
not JSON (http/guard.py).
"""

from __future__ import annotations

import hmac
import ipaddress
import os
import secrets
import threading
from dataclasses import dataclass, field
from pathlib import Path

from dispatch.errors import BadInput
from dispatch.support.trusted_files import open_trusted

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})
MIN_TOKEN = 16
MIN_DISTINCT = 6
MAKE_TOKEN = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"


class TokenFileError(BadInput):
    """A token file that cannot be used (names the file and the line)."""


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def host_name(header: str) -> str:
    """The name in a ``Host`` header, without its port: ``[::1]:8642`` and ``[::1]`` are
    ``::1`` (an IPv6 literal is bracketed, with or without a port), ``localhost:8642`` is
    ``localhost``. A bare IPv6 address (``::1``, not valid in a Host but seen) is itself."""
    if header.startswith("["):
        end = header.find("]")
        rest = header[end + 1:]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return ""  # not a bracketed literal: no name at all
        return header[1:end]
    if header.count(":") == 1:
        return header.split(":", 1)[0]
    return header


def guessable(token: str) -> str | None:
    """Why a team token is too easy to guess, else None: shorter than ``MIN_TOKEN``
    characters, fewer than ``MIN_DISTINCT`` different ones, a shorter string repeated, or
    mostly a run (``1234``, ``abcd``: three in four neighbours equal or one apart). A random
    token of 16 hex digits passes all but about one time in 25,000."""
    if len(token) < MIN_TOKEN:
        return f"shorter than {MIN_TOKEN} characters"
    if len(set(token)) < MIN_DISTINCT:
        return f"fewer than {MIN_DISTINCT} different characters"
    n = len(token)
    if any(token == (token[:k] * n)[:n] for k in range(1, n // 2 + 1)):
        return "a shorter string repeated"
    steps = sum(1 for a, b in zip(token, token[1:], strict=False) if abs(ord(a) - ord(b)) <= 1)
    if 4 * steps > 3 * (len(token) - 1):
        return "mostly a run of equal or consecutive characters"
    return None


def _bearer(authorization: str | None) -> str | None:
    if not authorization:
        return None
    scheme, _, given = authorization.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return None
    return given.strip()


@dataclass(frozen=True)
class Tokens:
    """name -> token from a token file; empty without one."""

    by_name: dict[str, str]

    def __bool__(self) -> bool:
        return bool(self.by_name)

    def name_of(self, given: str) -> str | None:
        """The name whose token ``given`` is, else None. Every token is compared in
        constant time."""
        found = None
        for name, token in self.by_name.items():
            if hmac.compare_digest(token.encode(), given.encode()):
                found = name
        return found

    def who(self, authorization: str | None) -> str | None:
        """The name whose token the ``Authorization: Bearer`` header carries, else None."""
        given = _bearer(authorization)
        return None if given is None else self.name_of(given)


@dataclass
class Access:
    """The credentials of one server start: the per-start token (acting as ``local_user``),
    the team tokens, and the browser sessions handed out at login (session id -> actor)."""

    start_token: str
    tokens: Tokens
    local_user: str
    cookie_name: str = "dispatch_session"
    sessions: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def new(cls, tokens: Tokens, local_user: str) -> Access:
        return cls(secrets.token_urlsafe(32), tokens, local_user)

    def actor_of_token(self, given: str) -> str | None:
        """The actor a presented token acts as, else None (compared in constant time)."""
        name = self.tokens.name_of(given)
        if hmac.compare_digest(self.start_token.encode(), given.encode()):
            return self.local_user
        return name

    def actor_of_bearer(self, authorization: str | None) -> str | None:
        given = _bearer(authorization)
        return None if given is None else self.actor_of_token(given)

    def open_session(self, actor: str) -> str:
        sid = secrets.token_urlsafe(32)
        with self.lock:
            self.sessions[sid] = actor
        return sid

    def actor_of_session(self, sid: str | None) -> str | None:
        """The actor of a session cookie, every known id compared in constant time."""
        if not sid:
            return None
        found = None
        with self.lock:
            known = list(self.sessions.items())
        for candidate, actor in known:
            if hmac.compare_digest(candidate.encode(), sid.encode()):
                found = actor
        return found


def write_secret_file(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` mode 0600, atomically (a temporary file renamed over it),
    never following a link; the directory is made 0700 if it is missing."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _read_token_file(p: Path) -> bytes:
    """The bytes of a token file that is ours, a regular file and private, in a directory
    nobody else can write (``open_trusted``): opened O_NONBLOCK so that a FIFO cannot hang
    the start, checked on the open descriptor."""
    try:
        fd = open_trusted(p, "token file", follow_links=False, private=True,
                          error=TokenFileError)
    except OSError as err:
        raise TokenFileError(f"token file {p}: cannot open: {err.strerror}") from None
    with os.fdopen(fd, "rb") as fh:
        os.set_blocking(fh.fileno(), True)
        return fh.read()


def load_tokens(path: str | os.PathLike[str]) -> Tokens:
    """Read ``name:token`` lines (``#`` comments and blank lines skipped) from a private
    regular file of this user, opened without following a symlink."""
    p = Path(path)
    try:
        text = _read_token_file(p).decode("utf-8")
    except UnicodeDecodeError as err:
        raise TokenFileError(f"token file {p}: not UTF-8 text (byte {err.start})") from None
    by_name: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, token = line.partition(":")
        name, token = name.strip(), token.strip()
        if not sep or not name or not token:
            raise TokenFileError(f"token file {p}: line {n}: expected name:token")
        weak = guessable(token)
        if weak is not None:
            raise TokenFileError(f"token file {p}: line {n}: the token of {name!r} is easy to "
                                 f"guess ({weak}); make one with {MAKE_TOKEN}")
        if name in by_name:
            raise TokenFileError(f"token file {p}: line {n}: {name!r} appears twice")
        if token in by_name.values():
            raise TokenFileError(f"token file {p}: line {n}: a token is used twice")
        by_name[name] = token
    if not by_name:
        raise TokenFileError(f"token file {p}: no name:token line")
    return Tokens(by_name)
