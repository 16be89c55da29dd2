"""What the pure core needs to know about a backend, as data it is given.

Each backend's entry in ``backends/registry.py`` is the one place that says these things; the
core may not import the registry (the layers), so the registry hands them down: every caller
passes ``registry.traits()`` to ``parse_spec`` / ``check_spec`` (no table kept here: a caller
that forgets it is a type error, never a stale or empty table).
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum

import msgspec


class Enforces(Enum):
    """A spec key only some backends carry out: a spec that sets it is refused on a backend
    that does not declare it (the rule is keyed on what a backend does, never its name)."""

    # Bounds each node's log to ``max_output_bytes`` and drops the rest (its own runner
    # writes the logs).
    OUTPUT_BOUND = "max_output_bytes"
    # Reads ``progress.checkpoint_pattern`` from the nodes' logs as they are written.
    LOG_PROGRESS = "progress"
    # Publishes segment health decisions over its allocation units (``segment_health``).
    SEGMENT_HEALTH = "segment_health"


class BackendTraits(msgspec.Struct, frozen=True, kw_only=True):
    """One backend as the spec language sees it."""

    name: str
    # The JobSpec key holding its free-form options (None: it takes none).
    section: str | None = None
    enforces: frozenset[Enforces] = frozenset()




def enforcing(backends: Mapping[str, BackendTraits], what: Enforces) -> list[str]:
    """The names of the backends that carry out ``what``, in the table's order."""
    return [name for name, t in backends.items() if what in t.enforces]
