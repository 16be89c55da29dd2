""""Did you mean": the closest valid words to a mistyped one, and the valid values named in
an error, so that a typo gets its fix in the message. Pure (difflib only)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

from dispatch.core.model import CauseKind

_ENUM = re.compile(r"^Invalid enum value (?P<given>.*)$")
_LAST_KEY = re.compile(r"(?:^|\.)(?P<key>[A-Za-z_]+)(?:\[\d+\])*$")


# Words people write for a cause that spelling alone does not bring near its name (``oom``
# is three letters of ``out-of-memory``): each with the word it means.
ALIASES = {
    "oom": "out-of-memory", "oomkilled": "out-of-memory", "oom-killed": "out-of-memory",
    "timeout": "time-limit", "walltime": "time-limit", "preemption": "preempted",
    "node-failure": "node-lost", "node-fail": "node-lost", "nodefail": "node-lost",
    "exit": "non-zero-exit", "error": "non-zero-exit", "success": "none",
}


def closest(word: str, choices: Iterable[str]) -> list[str]:
    """The valid words closest to ``word``, best first (at most two): the word it is a
    common name for (``ALIASES``), else the closest in spelling."""
    options = list(choices)
    alias = ALIASES.get(word.strip().lower())
    if alias in options:
        return [alias]
    return difflib.get_close_matches(word, options, n=2, cutoff=0.6)


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` when a valid word is close to ``word``, else ``""``."""
    near = closest(word, choices)
    if not near:
        return ""
    return " (did you mean " + " or ".join(repr(w) for w in near) + "?)"


def enum_values(key: str) -> tuple[str, ...]:
    """The valid values of a policy key that takes a closed word: ``on`` (causes),
    ``action``, ``enforcer``; () for any other key."""
    from dispatch.core.policy import Action, Enforcer

    kinds: dict[str, tuple[str, ...]] = {
        "on": tuple(k.value for k in CauseKind),
        "action": tuple(a.value for a in Action),
        "enforcer": tuple(e.value for e in Enforcer),
    }
    return kinds.get(key, ())


def explain(message: str, where: str) -> str:
    """A decoder's message made useful: an invalid word gets the valid values of its key
    (found from ``where``, e.g. ``rules[0].on[1]``) and the closest of them."""
    m = _ENUM.match(message.strip())
    k = _LAST_KEY.search(where)
    if m is None or k is None:
        return message
    values = enum_values(k.group("key"))
    if not values:
        return message
    given = m.group("given").strip("'\"")
    return (f"{message.strip()}{did_you_mean(given, values)}; valid values: "
            f"{', '.join(values)}")
