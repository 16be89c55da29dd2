"""What a scheduler refuses the supervisor to read, as data (issue 47 item 4). Pure.

A backend may report the reads its scheduler refuses now (kubeflow: an RBAC 403 on a list or
a watch of pods, JobSets, Events, nodes): each a ``Refusal``. The active supervisor of a
scope publishes its backend's refusals in the store beside its presence row
(stores/presence.py), ``dispatch supervisors`` shows them, and ``status`` names them in the
notes of the scope's unfinished jobs: a refused read makes a look incomplete or reads as
"no nodes", and without a word the user sees jobs that never move.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dispatch.errors import StoreUnusable


class RefusalsInvalid(StoreUnusable, ValueError):
    """A stored list of refusals that does not decode (naming what was wrong): a record we
    cannot trust, in the dispatch error tree."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """One read the scheduler refuses: ``verb`` (list, watch) of ``resource`` (as the backend
    names it, e.g. "Node in cluster"), the scheduler's own ``words``, what dispatch does not
    see while it lasts (``cost``), and since when (the refusing process's clock)."""

    resource: str
    verb: str
    words: str
    cost: str
    since: datetime

    def to_json(self) -> dict[str, str]:
        return {"resource": self.resource, "verb": self.verb, "words": self.words,
                "cost": self.cost, "since": self.since.isoformat()}


_FIELDS = ("resource", "verb", "words", "cost", "since")


def encode(refusals: Sequence[Refusal]) -> str:
    """The refusals as the store keeps them (JSON, sorted: an unchanged list is the same
    text, so a writer can tell it changed)."""
    return json.dumps(sorted((r.to_json() for r in refusals),
                             key=lambda d: (d["resource"], d["verb"])), sort_keys=True)


def decode(text: str) -> list[Refusal]:
    """Strict: RefusalsInvalid unless ``text`` is a JSON list of objects with exactly the
    fields of a Refusal, strings, ``since`` an ISO 8601 time with its zone."""
    try:
        doc: Any = json.loads(text)
    except ValueError as err:
        raise RefusalsInvalid(f"refusals: not JSON ({err})") from None
    if not isinstance(doc, list):
        raise RefusalsInvalid(f"refusals: expected a list, got {type(doc).__name__}")
    out: list[Refusal] = []
    for i, item in enumerate(doc):
        if not isinstance(item, dict) or sorted(item) != sorted(_FIELDS):
            raise RefusalsInvalid(f"refusals[{i}]: expected an object with the fields "
                                  f"{', '.join(_FIELDS)}")
        if not all(isinstance(item[f], str) for f in _FIELDS):
            raise RefusalsInvalid(f"refusals[{i}]: every field must be a string")
        try:
            since = datetime.fromisoformat(item["since"])
        except ValueError:
            raise RefusalsInvalid(f"refusals[{i}].since: not an ISO 8601 time: "
                                  f"{item['since']!r}") from None
        if since.tzinfo is None:
            raise RefusalsInvalid(f"refusals[{i}].since: no time zone: {item['since']!r}")
        out.append(Refusal(item["resource"], item["verb"], item["words"], item["cost"], since))
    return out


def refusal_note(r: Refusal, backend: str) -> str:
    """One note line for a job the refusal affects."""
    return (f"the {backend} scheduler refuses `{r.verb} {r.resource}` to the supervisor's "
            f"identity since {r.since:%Y-%m-%d %H:%M:%S %Z} ({r.words}): {r.cost}; see "
            f"`dispatch doctor --backend {backend}`")


def refusal_notes(refusals: Sequence[Refusal], *, backend: str, terminal: bool) -> list[str]:
    """The notes of a job whose scope's active supervisor sees ``refusals``: one a refused
    read, for an unfinished job (a finished job's outcome is committed: no later look can
    change it, so a refusal now does not affect it)."""
    if terminal:
        return []
    return [refusal_note(r, backend)
            for r in sorted(refusals, key=lambda r: (r.resource, r.verb))]
