"""How many jobs a name pattern matches (support/name_glob.py), and what to say about it:
``ls``, ``watch``, ``goodput`` and ``cancel`` print the count, and a name that matches
nothing is told the pattern that would (issue 48 item 3). From the jobs table alone: no
record is read."""

from __future__ import annotations

import shlex

from dispatch.errors import BadInput
from dispatch.service.operations import Service
from dispatch.stores.query import JobQuery
from dispatch.support.name_glob import is_glob


def check_pattern(pattern: str, option: str = "--name") -> str:
    """The pattern, or BadInput naming the option when it cannot be one (empty, or not
    UTF-8 text: no name holds it, and a store cannot be asked for it)."""
    from dispatch.support.utf8 import encodable, escaped

    if not pattern:
        raise BadInput(f"{option} '': an empty pattern matches no name (a name, or a "
                       "shell-style pattern such as 'sweep-*')")
    if not encodable(pattern):
        raise BadInput(f"{option} {escaped(pattern)}: not UTF-8 text")
    return pattern


def count_matching(service: Service, pattern: str) -> int:
    """How many jobs (any state) have a name ``pattern`` matches."""
    return len(service.store.query_jobs(JobQuery(name_glob=pattern)))


def match_note(service: Service, pattern: str, shown: int | None = None,
               option: str = "--name") -> str:
    """``12 jobs match --name 'sweep-*' (3 shown)``; for a plain name that matches none,
    how many names contain it and the pattern that finds them. ``option``: the option the
    pattern came in ("" for an argument)."""
    n = count_matching(service, pattern)
    quoted = shlex.quote(pattern)
    said = f"{option} {quoted}" if option else quoted
    if n:
        seen = f" ({shown} shown)" if shown is not None and shown != n else ""
        return f"{n} job{'s' if n != 1 else ''} match{'es' if n == 1 else ''} {said}{seen}"
    if not is_glob(pattern):
        wider = f"*{pattern}*"
        near = count_matching(service, wider)
        if near:
            return (f"no job is named {quoted}; {near} name{'s' if near != 1 else ''} "
                    f"contain{'s' if near == 1 else ''} it: {option + ' ' if option else ''}"
                    f"{shlex.quote(wider)} "
                    "(a shell-style pattern: * any characters, ? one)")
    return f"no job matches {said}"
