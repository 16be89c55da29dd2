"""Job name patterns: the one syntax ``ls``, ``watch``, ``goodput``, ``cancel``, the HTTP
API's ``name=`` and ``dispatch.jobs(name=...)`` take (issue 48 item 3).

A pattern is a shell-style glob, matched against the whole name, case-sensitively: ``*`` any
run of characters, ``?`` one character, ``[abc]`` / ``[a-z]`` / ``[!abc]`` one of (or none
of) a set. A pattern without any of ``*?[`` is an exact name. Python's ``fnmatchcase`` is
the meaning; the stores run the same pattern in SQL (SQLite's GLOB, PostgreSQL's regular
expressions: ``sqlite_glob``, ``pg_regex``), so a list filters by name in the jobs table.
Pure.
"""

from __future__ import annotations

import fnmatch
import re

GLOB_CHARS = frozenset("*?[")


def is_glob(pattern: str) -> bool:
    """Whether ``pattern`` has a wildcard (else it is an exact name)."""
    return any(c in GLOB_CHARS for c in pattern)


def glob_matches(pattern: str, name: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern)


def _parts(pattern: str) -> list[tuple[str, str]]:
    """The pattern as ("any" | "one" | "set" | "text", text) parts, as fnmatch reads it: a
    ``[`` with no closing ``]`` is the character itself."""
    out: list[tuple[str, str]] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        i += 1
        if c == "*":
            if not out or out[-1][0] != "any":
                out.append(("any", ""))
        elif c == "?":
            out.append(("one", ""))
        elif c == "[":
            j = i
            if j < n and pattern[j] == "!":
                j += 1
            if j < n and pattern[j] == "]":
                j += 1
            while j < n and pattern[j] != "]":
                j += 1
            if j >= n:
                out.append(("text", "["))
            else:
                out.append(("set", pattern[i:j]))
                i = j + 1
        else:
            out.append(("text", c))
    return out


def sqlite_glob(pattern: str) -> str:
    """The pattern as SQLite's GLOB operator reads it (case-sensitive, like fnmatchcase):
    the same wildcards, ``[^...]`` for a negated set, and a lone ``[`` as ``[[]``."""
    out = []
    for kind, text in _parts(pattern):
        if kind == "any":
            out.append("*")
        elif kind == "one":
            out.append("?")
        elif kind == "set":
            out.append("[" + ("^" + text[1:] if text.startswith("!") else text) + "]")
        else:
            out.append({"*": "[*]", "?": "[?]", "[": "[[]"}.get(text, text))
    return "".join(out)


def pg_regex(pattern: str) -> str:
    """The pattern as a PostgreSQL regular expression (``~``) anchored at both ends."""
    out = ["^"]
    for kind, text in _parts(pattern):
        if kind == "any":
            out.append(".*")
        elif kind == "one":
            out.append(".")
        elif kind == "set":
            negated = text.startswith("!")
            body = text[1:] if negated else text
            body = body.replace("\\", "\\\\").replace("[", "\\[")
            if body.startswith("^"):
                body = "\\" + body
            out.append("[" + ("^" if negated else "") + body + "]")
        else:
            out.append(re.sub(r"([^\w])", r"\\\1", text))
    out.append("$")
    return "".join(out)


_DIGITS = re.compile(r"\d+")


def natural_key(name: str) -> str:
    """A key whose plain text order is the name's natural order (``sweep-9`` before
    ``sweep-10``): each run of digits zero-padded to 20 places."""
    return _DIGITS.sub(lambda m: m.group().zfill(20), name)
