"""Spec rules keyed on what a backend does, not on its name (issue 50 item 2): the core is
given each backend's traits as data (the registry's entries hand them down) and refuses a key
only on a backend that does not declare it enforces it."""

from __future__ import annotations

import pytest
from tests.specs import parse_spec

from dispatch.core.backend_traits import BackendTraits, Enforces
from dispatch.core.spec import SpecError

# A table as a registry would give it: "runner" is a backend the core has never heard of
# whose runner bounds output and reads logs; "cluster" enforces nothing.
TABLE = {
    "runner": BackendTraits(name="runner", enforces=frozenset({Enforces.OUTPUT_BOUND,
                                                               Enforces.LOG_PROGRESS})),
    "cluster": BackendTraits(name="cluster", section="slurm"),
    "segments": BackendTraits(name="segments", enforces=frozenset({Enforces.SEGMENT_HEALTH})),
}
KEYS = {
    Enforces.OUTPUT_BOUND: {"max_output_bytes": "1M"},
    Enforces.LOG_PROGRESS: {"progress": {"checkpoint_pattern": "saved"}},
    Enforces.SEGMENT_HEALTH: {"segment_health": {"dir": "/shared/seg"}},
}


def _spec(backend: str, what: Enforces) -> dict[str, object]:
    return {"name": "t", "command": ["x"], "backend": backend, **KEYS[what]}


@pytest.mark.parametrize("what", list(Enforces))
@pytest.mark.parametrize("backend", list(TABLE))
def test_a_key_is_taken_exactly_where_the_backend_declares_it_enforces_it(
        backend: str, what: Enforces) -> None:
    if what in TABLE[backend].enforces:
        spec = parse_spec(_spec(backend, what), backends=TABLE)
        assert spec.backend == backend
        return
    with pytest.raises(SpecError) as err:
        parse_spec(_spec(backend, what), backends=TABLE)
    assert err.value.where == what.value
    enforcing = [n for n, t in TABLE.items() if what in t.enforces]
    assert f"only the {' and '.join(enforcing)} backend" in err.value.message
    assert f"the {backend} backend" in err.value.message


def test_the_backends_a_spec_may_name_are_the_tables() -> None:
    with pytest.raises(SpecError, match="unknown backend 'local'.*runner, cluster, segments"):
        parse_spec({"name": "t", "command": ["x"]}, backends=TABLE)  # local: not in this table
    assert parse_spec({"name": "t", "command": ["x"], "backend": "cluster"},
                      backends=TABLE).backend == "cluster"
