"""Stores check contiguity on read (issue 12 item 10): a record whose seqs are not 1..n, or
whose job version disagrees with its last event, is refused with RecordDamaged naming the
store, the job and the seq, never folded into a different state. Damage is done with raw
SQL on the real SQLite file and the real PostgreSQL rows; the refusal changes nothing, so
repairing the rows makes the record readable again."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime

import pytest
from tests.integration.stores.helpers import Backdoor

from dispatch.core.events import EscalationRaised, JobCreated, OutcomeCommitted
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.errors import StoreUnusable
from dispatch.service.requests import request_cancel, supersede
from dispatch.stores.base import RecordDamaged, RecordStore

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def make(store: RecordStore, job_id: str, n: int) -> None:
    """A job of ``n`` events: created, then escalations."""
    store.create(JobCreated(seq=1, at=T0, job_id=job_id,
                            spec=JobSpec(name=job_id, command=("x",), backend="local"),
                            declarations=Declarations(backend="local")))
    store.append(job_id, [EscalationRaised(seq=s, at=T0, message=f"m{s}")
                          for s in range(2, n + 1)], 1)


def delete_event(seq: int) -> Callable[[Backdoor], None]:
    def damage(bd: Backdoor) -> None:
        bd.execute("DELETE FROM events WHERE job_id = 'hurt' AND seq = ?",
                   "DELETE FROM dispatch_events WHERE job_id = 'hurt' AND seq = %s", (seq,))
    return damage


def set_version(v: int) -> Callable[[Backdoor], None]:
    def damage(bd: Backdoor) -> None:
        bd.execute("UPDATE jobs SET version = ? WHERE job_id = 'hurt'",
                   "UPDATE dispatch_jobs SET version = %s WHERE job_id = 'hurt'", (v,))
    return damage


def move_event(src: int, dst: int) -> Callable[[Backdoor], None]:
    def damage(bd: Backdoor) -> None:
        bd.execute("UPDATE events SET seq = ? WHERE job_id = 'hurt' AND seq = ?",
                   "UPDATE dispatch_events SET seq = %s WHERE job_id = 'hurt' AND seq = %s",
                   (dst, src))
    return damage


def delete_all_events(bd: Backdoor) -> None:
    bd.execute("DELETE FROM events WHERE job_id = 'hurt'",
               "DELETE FROM dispatch_events WHERE job_id = 'hurt'")


# (damage, the seq the error names, words the message must hold). The job has 5 events.
CASES = {
    "middle event deleted": (delete_event(3), 3, "seq 3 is missing"),
    "created event deleted": (delete_event(1), 1, "seq 1 is missing"),
    "last event deleted": (delete_event(5), 5, "version is 5 but the last stored event is seq 4"),
    "version ahead": (set_version(7), 6, "version is 7 but the last stored event is seq 5"),
    "version behind": (set_version(3), 4, "version is 3 but events run to seq 5"),
    "version zero": (set_version(0), 1, "version is 0 but events run to seq 5"),
    "event moved past the end": (move_event(5, 9), 5, "seq 5 is missing"),
    "every event deleted": (delete_all_events, 1, "has no events"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_damaged_record_is_refused_naming_store_job_and_seq(
    store: RecordStore, backdoor: Backdoor, case: str
) -> None:
    damage, seq, words = CASES[case]
    make(store, "fine", 3)
    make(store, "hurt", 5)
    store.append("hurt", [OutcomeCommitted(seq=6, at=T0, state=State.FAILED,
                                           cause=Cause(kind=CauseKind.NONE))], 5)
    # The outcome at seq 6 is kept aside so the job has 5 events, then damaged.
    saved = backdoor.query("SELECT seq, body FROM events WHERE job_id = 'hurt' ORDER BY seq",
                           "SELECT seq, body FROM dispatch_events WHERE job_id = 'hurt'"
                           " ORDER BY seq")
    delete_event(6)(backdoor)
    set_version(5)(backdoor)
    jobs_row = backdoor.query("SELECT version FROM jobs WHERE job_id = 'hurt'",
                              "SELECT version FROM dispatch_jobs WHERE job_id = 'hurt'")
    assert jobs_row == [(5,)]
    assert len(store.read("hurt")) == 5
    damage(backdoor)

    for attempt in (lambda: store.read("hurt"),
                    lambda: store.read_many(["fine", "hurt"]),
                    lambda: request_cancel(store, "hurt", T0, "alice"),
                    lambda: supersede(store, "hurt", T0, "alice", Declarations(backend="local"))):
        with pytest.raises(RecordDamaged) as info:
            attempt()
        err = info.value
        assert isinstance(err, StoreUnusable) and err.exit_code == 5
        assert err.job_id == "hurt" and err.seq == seq, str(err)
        text = str(err)
        assert store.describe() in text and "job hurt" in text and f"seq {seq}" in text
        assert words in text, text
    assert len(store.read("fine")) == 3  # another job is still readable

    # The refusals wrote nothing: putting the rows back makes the record whole again.
    delete_all_events(backdoor)
    for s, body in saved[:5]:
        backdoor.execute("INSERT INTO events (job_id, seq, body) VALUES ('hurt', ?, ?)",
                         "INSERT INTO dispatch_events (job_id, seq, body)"
                         " VALUES ('hurt', %s, %s)", (s, body))
    set_version(5)(backdoor)
    assert [e.seq for e in store.read("hurt")] == [1, 2, 3, 4, 5]


def test_sqlite_values_of_the_wrong_type_are_refused(tmp_path: object) -> None:
    """SQLite keeps whatever type a value is given: a text seq or version is damage."""
    from pathlib import Path

    from dispatch.stores.select import open_store

    url = f"sqlite://{Path(str(tmp_path)) / 'r.sqlite3'}"
    bd = Backdoor(url)
    with open_store(url) as store:
        make(store, "hurt", 3)
        bd.execute("UPDATE events SET seq = 'three' WHERE job_id = 'hurt' AND seq = 3", "")
        with pytest.raises(RecordDamaged, match="job hurt, seq 3.*'three', not an integer"):
            store.read("hurt")
        bd.execute("UPDATE events SET seq = 3 WHERE job_id = 'hurt' AND seq = 'three'", "")
        bd.execute("UPDATE events SET seq = 'two' WHERE job_id = 'hurt' AND seq = 2", "")
        with pytest.raises(RecordDamaged, match="job hurt, seq 2: .*seq 2 is missing"):
            store.read("hurt")  # text sorts after numbers: seq 2 is where the gap shows
        bd.execute("UPDATE events SET seq = 2 WHERE job_id = 'hurt' AND seq = 'two'", "")
        assert len(store.read("hurt")) == 3
        bd.execute("UPDATE jobs SET version = 'three' WHERE job_id = 'hurt'", "")
        for attempt in (lambda: store.read("hurt"), lambda: store.version("hurt"),
                        store.list_jobs):
            with pytest.raises(RecordDamaged, match="job hurt.*version is 'three'"):
                attempt()
        bd.execute("UPDATE jobs SET version = 3, created_at = 'yesterday'"
                   " WHERE job_id = 'hurt'", "")
        with pytest.raises(RecordDamaged, match="job hurt, seq 1.*'yesterday' is not a time"):
            store.list_jobs()
