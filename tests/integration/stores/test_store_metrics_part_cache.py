"""Issue 49: the cached /metrics parts (stores/part_cache.py) and the count of removals
(stores/removals.py) on each store, SQLite and PostgreSQL: through any history of writes,
prunes, collectors restarted cold, cached parts spoilt and records edited in place, every
scrape renders exactly what a whole recomputation renders (tests/metrics_oracle.py), and
a store migrated from version 6 keeps parts and counts removals."""

from __future__ import annotations

import itertools
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.stores.helpers import Backdoor
from tests.metrics_oracle import LIFE_STEPS, Life, run_life, story

from dispatch.service import Service
from dispatch.stores import removals
from dispatch.stores.base import SCHEMA_VERSION
from dispatch.stores.select import open_store

_lives = itertools.count()


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=LIFE_STEPS, data=st.data())
def test_a_cold_collector_with_any_cache_equals_a_whole_recomputation(
        store_url: str, steps: list[tuple[Any, ...]], data: st.DataObject) -> None:
    # the store outlives an example: each life's jobs are its own, and every check is of
    # the whole store (a new life's first collector is a cold one over the others' jobs)
    with Service(open_store(store_url)) as service:
        run_life(Life(service), steps, data, prefix=f"l{next(_lives)}-")


def test_a_store_of_version_6_is_migrated_and_then_counts_removals(
        store_url: str, backdoor: Backdoor) -> None:
    with Service(open_store(store_url)) as service:
        life = Life(service)
        for i in range(4):
            life.new(story(f"j{i}", 2, "local"))
        life.check("the first scrape")
    backdoor.execute("DROP TABLE metric_parts", "DROP TABLE dispatch_metric_parts")
    backdoor.execute("DROP TABLE removals", "DROP TABLE dispatch_removals")
    backdoor.execute("DROP TRIGGER jobs_removed", "DROP TRIGGER dispatch_jobs_removed"
                     " ON dispatch_jobs")
    backdoor.execute("SELECT 1", "DROP TRIGGER dispatch_jobs_truncated ON dispatch_jobs")
    backdoor.execute("SELECT 1", "DROP FUNCTION dispatch_jobs_removed()")
    backdoor.set_schema_version(6)
    with Service(open_store(store_url)) as service:
        assert backdoor.schema_version() == SCHEMA_VERSION == 7
        assert removals.removed(service.store) == 0
        life = Life(service)  # a cold collector over an empty cache, which it fills
        life.full = {f"j{i}": story(f"j{i}", 2, "local") for i in range(4)}
        life.written = dict.fromkeys(life.full, 1)
        life.check("the first scrape after the upgrade")
        assert len(backdoor.query("SELECT job_id FROM metric_parts",
                                  "SELECT job_id FROM dispatch_metric_parts")) == 4
        for job_id in ("j1", "j2"):
            life.advance(job_id, 100)
        life.check("two finished")
        life.prune()
        assert life.pruned == 2
        assert removals.removed(service.store) in (1, 2)  # SQLite: per row, PG: per statement
        life.check("the prune")
        life.restart()
        life.check("a restart after the prune")
