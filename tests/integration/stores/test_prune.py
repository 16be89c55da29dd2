"""``prune`` (issue 36 item 6) on SQLite and PostgreSQL: finished jobs created before the
cutoff are removed whole (row, every event, snapshot), all in one transaction; a live job, a
newer one, or any job of a supersede chain that is not wholly prunable is kept; a dry run
names exactly what acting removes and removes nothing."""

from __future__ import annotations

from datetime import timedelta

import msgspec
import pytest
from tests.integration.stores.helpers import Backdoor
from tests.integration.stores.test_supersede import DECL, T0, created, failed

from dispatch.core.record import fold
from dispatch.service.requests import supersede
from dispatch.stores import snapshot
from dispatch.stores.base import JobNotFound, RecordStore, StoreError, sort_key_us

CUT = sort_key_us(T0 + timedelta(seconds=1))  # created_us of created(..., us=N) is below


def rows_of(backdoor: Backdoor, job_id: str) -> tuple[int, int, int]:
    """The job's rows in the jobs, events and snapshots tables (read past the store)."""
    def count(t: str) -> int:
        return int(backdoor.query(f"SELECT count(*) FROM {t} WHERE job_id = ?",
                                  f"SELECT count(*) FROM dispatch_{t} WHERE job_id = %s",
                                  (job_id,))[0][0])
    return count("jobs"), count("events"), count("snapshots")


def test_old_finished_jobs_go_whole_and_the_rest_stay(store: RecordStore,
                                                     backdoor: Backdoor) -> None:
    store.create(created("old-done", us=1))
    store.append("old-done", [failed()], 1)
    store.write_snapshot(fold(store.read("old-done"), T0), snapshot.FORMAT, snapshot.encode)
    store.create(created("old-live", us=2))
    store.create(msgspec.structs.replace(created("new-done"), at=T0 + timedelta(seconds=5)))
    store.append("new-done", [failed()], 1)
    assert rows_of(backdoor, "old-done") == (1, 2, 1)

    assert store.prune(CUT) == ["old-done"]  # a dry run: named, nothing removed
    assert rows_of(backdoor, "old-done") == (1, 2, 1)
    assert store.prune(CUT, act=True) == ["old-done"]
    assert rows_of(backdoor, "old-done") == (0, 0, 0)
    with pytest.raises(JobNotFound):
        store.read("old-done")
    assert sorted(r.job_id for r in store.list_jobs()) == ["new-done", "old-live"]
    assert store.prune(CUT, act=True) == []  # nothing left to prune


def test_a_supersede_chain_goes_whole_or_not_at_all(store: RecordStore,
                                                    backdoor: Backdoor) -> None:
    store.create(created("first", us=1))
    store.append("first", [failed()], 1)
    second = supersede(store, "first", T0 + timedelta(seconds=2), "alice", DECL)
    # the successor is live: neither goes, though the first is old and finished
    assert store.prune(sort_key_us(T0 + timedelta(days=9999)), act=True) == []
    assert rows_of(backdoor, "first")[0] == 1
    store.append(second, [failed()], 1)
    # both finished, but the successor was created after the cutoff: neither goes
    second_us = sort_key_us(store.read(second)[0].at)
    assert store.prune(second_us, act=True) == []
    # a cutoff after both: the chain goes, both jobs whole
    assert sorted(store.prune(second_us + 1, act=True)) == sorted(["first", second])
    assert rows_of(backdoor, "first") == rows_of(backdoor, second) == (0, 0, 0)


def test_a_prune_that_fails_part_way_removes_nothing(store: RecordStore,
                                                    backdoor: Backdoor) -> None:
    for i, job_id in enumerate(("first", "second", "third")):
        store.create(created(job_id, us=i + 1))
        store.append(job_id, [failed()], 1)
    # The database refuses to remove the last job's row, after the others' rows, events
    # and snapshots were deleted in the same transaction.
    backdoor.execute(
        "CREATE TRIGGER refuse BEFORE DELETE ON jobs WHEN old.job_id = 'third' "
        "BEGIN SELECT RAISE(ABORT, 'planted refusal'); END",
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        "IF old.job_id = 'third' THEN RAISE EXCEPTION 'planted refusal'; END IF; "
        "RETURN old; END $$; CREATE TRIGGER refuse BEFORE DELETE ON dispatch_jobs "
        "FOR EACH ROW EXECUTE FUNCTION refuse()")
    with pytest.raises(StoreError, match="planted refusal"):
        store.prune(CUT, act=True)
    for job_id in ("first", "second", "third"):
        assert rows_of(backdoor, job_id) == (1, 2, 0), job_id
        assert len(store.read(job_id)) == 2
