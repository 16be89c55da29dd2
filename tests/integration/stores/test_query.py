"""query_jobs and stamp on both stores: filters, search, every order both ways, and keyset
pages that together are the whole ordered list, each job once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tests.integration.stores.helpers import Backdoor

from dispatch.core.events import JobCreated, OutcomeCommitted
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.base import JobRow, RecordStore, sort_key_us
from dispatch.stores.query import ORDERS, JobQuery, Order
from dispatch.support.name_glob import natural_key

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = ["train", "eval_1", "train", "Sweep%", "eval_10", "train"]


def _fill(store: RecordStore) -> list[str]:
    ids = [f"{i:02d}{'ab' if i % 2 else 'cd'}job" for i in range(len(NAMES))]
    store.create_many([
        JobCreated(seq=1, at=T0 + timedelta(seconds=i // 2), job_id=job_id,  # ties on time
                   spec=JobSpec(name=name, command=("true",),
                                backend="slurm" if i == 3 else "local"),
                   declarations=Declarations(backend="slurm" if i == 3 else "local"))
        for i, (job_id, name) in enumerate(zip(ids, NAMES, strict=True))])
    store.append(ids[1], [OutcomeCommitted(seq=2, at=T0, state=State.SUCCEEDED,
                                           cause=Cause(kind=CauseKind.NONE))], 1)
    return ids


def _key(order: Order, r: JobRow) -> tuple[object, ...]:
    first = {"name": natural_key(r.name), "backend": r.backend, "job": r.job_id}.get(order)
    tail = (sort_key_us(r.created_at), r.job_id)
    return tail if first is None else (first, *tail)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("descending", [False, True])
def test_keyset_pages_cover_the_ordered_list(store: RecordStore, order: Order,
                                             descending: bool) -> None:
    _fill(store)
    whole = store.query_jobs(JobQuery(order=order, descending=descending))
    assert [_key(order, r) for r in whole] == sorted(
        (_key(order, r) for r in whole), reverse=descending)
    pages: list[str] = []
    after = None
    while True:
        page = store.query_jobs(JobQuery(order=order, descending=descending, after=after,
                                         limit=4 if order == "created" else 2))
        pages += [r.job_id for r in page]
        if not page:
            break
        after = _key(order, page[-1])  # type: ignore[assignment]
    assert pages == [r.job_id for r in whole]


def test_filters_and_search(store: RecordStore) -> None:
    ids = _fill(store)

    def q(**kw: object) -> list[str]:
        return [r.job_id for r in store.query_jobs(JobQuery(**kw))]  # type: ignore[arg-type]
    assert q(terminal=True) == [ids[1]]
    assert q(terminal=False) == [i for i in ids if i != ids[1]]
    assert q(backend="slurm") == [ids[3]]
    assert q(search="TRAIN") == [ids[0], ids[2], ids[5]]  # any case
    assert q(search="eval_1") == [ids[1], ids[4]]  # '_' is a character, not a wildcard
    assert q(search="%") == [ids[3]]  # '%' too
    assert q(search="03") == [ids[3]]  # an id prefix
    assert q(search="ab") == []  # ids contain it, but do not start with it
    assert store.list_jobs(live_only=True, name="train") == store.query_jobs(
        JobQuery(terminal=False, name="train"))


def test_the_stamp_changes_with_every_job_and_event(store: RecordStore,
                                                    backdoor: Backdoor) -> None:
    empty = store.stamp()
    assert empty == (0, 0)
    ids = _fill(store)
    filled = store.stamp()
    assert filled == (len(ids), len(ids) + 1)
    store.append(ids[0], [OutcomeCommitted(seq=2, at=T0, state=State.FAILED,
                                           cause=Cause(kind=CauseKind.UNKNOWN))], 1)
    assert store.stamp() == (len(ids), len(ids) + 2)
    # an event edited in place (no new version): a list's ETag must not say "unchanged"
    backdoor.execute("UPDATE events SET body = body WHERE job_id = ? AND seq = 1",
                     "UPDATE dispatch_events SET body = body WHERE job_id = %s AND seq = 1",
                     (ids[1],))
    assert store.stamp() == (len(ids), len(ids) + 3)
