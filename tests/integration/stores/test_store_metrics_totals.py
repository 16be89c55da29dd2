"""Issue 36: /metrics' kept totals against a whole recomputation on each store (SQLite and
PostgreSQL): the store's change feed (``changes``) and count (``stamp``) are what the kept
totals trust, so the same life is checked on both (tests/metrics_oracle.py)."""

from __future__ import annotations

from tests.integration.stores.helpers import Backdoor
from tests.metrics_oracle import Life, story

from dispatch.service import Service
from dispatch.stores.select import open_store


def test_a_fleet_in_mixed_states_kept_through_rounds_of_change(
    store_url: str, backdoor: Backdoor
) -> None:
    """60 jobs on two backends advanced at different paces (queued, running, recovering,
    finished), one whose record cannot be used, and a prune between rounds."""
    with Service(open_store(store_url)) as service:
        life = Life(service)
        for i in range(60):
            life.new(story(f"s{i:02d}", 1 + i % 5, ("local", "slurm")[i % 2]))
        life.new(story("bad", 2, "local"))
        life.advance("bad", 4)
        backdoor.execute(
            "DELETE FROM events WHERE job_id = 'bad' AND seq = 3",  # a hole
            "DELETE FROM dispatch_events WHERE job_id = 'bad' AND seq = 3",
        )
        life.check("creating them")
        for r in range(6):
            for i in range(60):
                if (i + r) % 3 and f"s{i:02d}" in life.full:
                    life.advance(f"s{i:02d}", 1 + (i * 7 + r) % 6)
            life.check(f"round {r}")
            if r == 4:
                life.prune()
                life.check("the prune")
        assert life.pruned > 0 and life.unusable == 1  # the scenario held what it says
