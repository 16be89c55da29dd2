"""Issue 49: while serve's held index is first built, the held jobs are found among the
unfinished jobs the store says may be held (stores/held_candidates.py: a hold writes its
cause to the job's history causes; a job whose events were edited in place is always
named). On each store (SQLite and PostgreSQL), over random lives of holds, releases,
give-ups, cancels and outcomes: that answer is exactly the held jobs a whole fold of every
live job names."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.integration.stores.helpers import Backdoor
from tests.integration.test_held_index import OPS, T0, created, event_for

from dispatch.core import events as ev
from dispatch.service import Service
from dispatch.service.held import HeldIndex
from dispatch.service.listing import held_ids
from dispatch.stores.base import RecordStore
from dispatch.stores.held_candidates import may_be_held
from dispatch.stores.select import open_store

_lives = itertools.count()


def _whole(store: RecordStore) -> list[str]:
    """The held jobs as a list without an index finds them: every live job folded."""
    return held_ids(Service(store))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(steps=st.lists(st.tuples(OPS, st.integers(0, 7)), min_size=1, max_size=24))
def test_the_held_jobs_among_the_candidates_are_the_whole_folds(
        store_url: str, steps: list[tuple[str, int]]) -> None:
    life = next(_lives)  # the store outlives an example: each life's jobs are its own
    with open_store(store_url) as store:
        mine = [f"l{life}-{i}" for i in range(4)]
        store.create_many([_created(job, i) for i, job in enumerate(mine)])
        for op, i in steps:
            if op == "create":
                mine.append(f"l{life}-{len(mine)}")
                store.create_many([_created(mine[-1], len(mine))])
                continue
            job_id = mine[i % len(mine)]
            version = store.version(job_id)
            if isinstance(store.read(job_id)[-1], ev.OutcomeCommitted):
                continue  # finished: nothing follows an outcome
            store.append(job_id, [event_for(op, version + 1)], version)
            early = HeldIndex.held_among_candidates(store, T0)
            assert early is not None and early == _whole(store)
        assert set(may_be_held(store) or ()) >= set(_whole(store))


def test_a_job_whose_events_were_edited_is_always_a_candidate(
        store_url: str, backdoor: Backdoor) -> None:
    with open_store(store_url) as store:
        store.create_many([_created("quiet", 0), _created("edited", 1)])
        assert may_be_held(store) == []
        backdoor.execute("UPDATE events SET body = body WHERE job_id = 'edited'",
                         "UPDATE dispatch_events SET body = body WHERE job_id = 'edited'")
        assert may_be_held(store) == ["edited"]
        store.append("quiet", [event_for("hold", 2)], 1)
        assert may_be_held(store) == ["edited", "quiet"]
        assert HeldIndex.held_among_candidates(store, T0) == ["quiet"]


def _created(job_id: str, i: int) -> ev.JobCreated:
    import msgspec

    return msgspec.structs.replace(created(i), job_id=job_id)
