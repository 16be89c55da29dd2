"""Issue 49: serve's first /metrics scrape after start does not wait for the record's totals
to be built; it answers what the store counts (``dispatch_jobs_stored``) with
``dispatch_record_totals_ready`` 0 and leaves every family the totals give absent. Over
random fleets on each store (SQLite and PostgreSQL): each sample of that first scrape equals
the same sample once the totals are built, and those counts agree with the records'
(tests/metrics_oracle.py ``check_first_scrape``)."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.stores.helpers import Backdoor
from tests.metrics_oracle import STORED, Life, check_first_scrape, story

from dispatch.service import Service
from dispatch.stores.select import open_store

_names = itertools.count()

# A job: (nodes, events written after 'created' (its story has 11), a stored event deleted)
_fleets = st.lists(st.tuples(st.integers(1, 8), st.integers(0, 12), st.booleans()),
                   min_size=0, max_size=12)


@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(fleet=_fleets)
def test_the_first_scrape_holds_only_the_stores_counts_each_as_once_built(
        store_url: str, backdoor: Backdoor, fleet: list[tuple[int, int, bool]]) -> None:
    with Service(open_store(store_url)) as service:
        life = Life(service)
        for nodes, written, damaged in fleet:
            job = f"f{next(_names)}"  # the store outlives an example: names never repeat
            life.new(story(job, nodes, "local"))
            life.advance(job, written)
            if damaged and written >= 2:  # a hole: the record cannot be used
                backdoor.execute(f"DELETE FROM events WHERE job_id = '{job}' AND seq = 2",
                                 f"DELETE FROM dispatch_events WHERE job_id = '{job}'"
                                 " AND seq = 2")
    check_first_scrape(store_url)


def test_the_first_scrape_of_a_store_with_finished_live_and_unusable_jobs(
        store_url: str, backdoor: Backdoor) -> None:
    """A fixed fleet holding each kind the property draws: finished, live, unusable."""
    with Service(open_store(store_url)) as service:
        life = Life(service)
        for i, written in enumerate((0, 3, 11, 11, 5)):
            life.new(story(f"k{i}", 2, "local"))
            life.advance(f"k{i}", written)
    backdoor.execute("DELETE FROM events WHERE job_id = 'k3' AND seq = 2",
                     "DELETE FROM dispatch_events WHERE job_id = 'k3' AND seq = 2")
    built = check_first_scrape(store_url)
    # the fleet held what it says: k2 succeeded, k3 (finished) cannot be used, 3 unfinished
    assert built[(STORED, (("state", "succeeded"),))] == 2
    assert built[("dispatch_jobs", (("state", "succeeded"),))] == 1
    assert built[("dispatch_jobs_record_unusable", ())] == 1
    assert built[(STORED, (("state", "unfinished"),))] == 3
