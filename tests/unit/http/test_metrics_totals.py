"""Issue 36: /metrics keeps the fleet's totals between scrapes and reads only the jobs
written to since the last one. After every step of a store's life (jobs created, advanced,
finished, pruned; drawn records, many of which cannot be used), the kept totals render
exactly what a whole recomputation over every record renders (tests/metrics_oracle.py; the
same on PostgreSQL: tests/integration/stores/test_store_metrics_totals.py)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.metrics_oracle import Life, story
from tests.strategies import records

from dispatch.service import Service
from dispatch.stores.sqlite import SQLiteStore

# A step: ("new", story or drawn record), ("advance", job number, events), ("prune",)
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("story"), st.integers(1, 64), st.sampled_from(["local", "slurm"])),
        st.tuples(st.just("drawn"), st.integers(0, 10**6)),
        st.tuples(st.just("advance"), st.integers(0, 50), st.integers(1, 12)),
        st.tuples(st.just("prune")),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(steps=_steps, data=st.data())
def test_kept_totals_equal_a_whole_recomputation_after_every_step(
    steps: list[tuple[Any, ...]], data: st.DataObject
) -> None:
    with (
        tempfile.TemporaryDirectory() as tmp,
        Service(SQLiteStore(Path(tmp) / "r.sqlite3")) as service,
    ):
        life = Life(service)
        for n, step in enumerate(steps):
            if step[0] == "story":
                life.new(story(f"j{n}", step[1], step[2]))
            elif step[0] == "drawn":
                drawn = data.draw(records(job_id=f"j{n}", max_events=12))
                # no supersede chains: the store refuses one to a job it does not hold
                life.new([msgspec.structs.replace(drawn[0], supersedes=None), *drawn[1:]])
            elif step[0] == "advance" and life.full:
                life.advance(sorted(life.full)[step[1] % len(life.full)], step[2])
            elif step[0] == "prune":
                life.prune()
            life.check(f"step {n}: {step}")
