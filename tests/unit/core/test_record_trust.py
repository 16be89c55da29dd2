"""A record is only read when it is wholly the job's own (issue 21, item 12): the pure check
(record.check_record) and the real SQLite store's reads, which every reader goes through
(CLI, HTTP routes, Python API, supervisor)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tests.strategies import records
from tests.strategies_core import SLURM, T0, Sim, rule

from dispatch.core import events as ev
from dispatch.core.model import CauseKind
from dispatch.core.policy import Action
from dispatch.core.record import Job, RecordError, check_record, fold
from dispatch.errors import EXIT_STORE
from dispatch.stores.reading import fold_own, fold_records
from dispatch.stores.sqlite import SQLiteStore


def record(job_id: str) -> list[ev.Event]:
    """created, submission-intended (seq 1, 2)."""
    sim = Sim([rule([CauseKind.PREEMPTED], Action.RESUBMIT, 1)], job_id=job_id)
    sim.tick([])
    assert len(sim.record) == 2
    return list(sim.record)


def test_a_record_of_this_job_passes() -> None:
    check_record(record("a"), "a")


@pytest.mark.parametrize("damage, seq, words", [
    pytest.param(lambda a, b: [b[0], *a[1:]], 1, "'created' event of job b", id="swapped"),
    pytest.param(lambda a, b: [*a, msgspec.structs.replace(a[0], seq=len(a) + 1)], 3,
                 "a second 'created'", id="second-created-own"),
    pytest.param(lambda a, b: [*a, msgspec.structs.replace(b[0], seq=len(a) + 1)], 3,
                 "a second 'created' event (naming job b)", id="second-created-other"),
    pytest.param(lambda a, b: a[1:], 2, "must start with a 'created'", id="no-created"),
    pytest.param(lambda a, b: [], 1, "no events", id="empty"),
])
def test_a_record_that_is_not_the_job_s_own_is_refused(damage: object, seq: int,
                                                      words: str) -> None:
    bad = damage(record("a"), record("b"))  # type: ignore[operator]
    with pytest.raises(RecordError) as err:
        check_record(bad, "a")
    assert err.value.exit_code == EXIT_STORE and err.value.seq == seq
    assert "job a" in str(err.value) and words in str(err.value)
    if bad:
        with pytest.raises(RecordError):
            fold(bad, T0, job_id="a")


def test_the_sqlite_store_refuses_a_swapped_record_and_reads_its_neighbour(
        tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    store = SQLiteStore(str(path))
    for job_id in ("a", "b"):
        store.create(ev.JobCreated(seq=1, at=T0, job_id=job_id, spec=record(job_id)[0].spec,
                                   declarations=SLURM))
    db = sqlite3.connect(path)
    db.execute("UPDATE events SET body = (SELECT body FROM events WHERE job_id = 'b' AND "
               "seq = 1) WHERE job_id = 'a' AND seq = 1")
    db.commit()
    db.close()
    with pytest.raises(RecordError, match="job a, seq 1: seq 1 is the 'created' event of job b"):
        store.read("a")
    with pytest.raises(RecordError):
        store.read_many(["a", "b"])
    jobs, errors = fold_records(store, ["a", "b"], T0)
    assert [j.id for j in jobs] == ["b"] and set(errors) == {"a"}
    store.close()


@settings(max_examples=300, deadline=None)
@given(a=records(job_id="a", max_events=6), b=records(job_id="b", max_events=3),
       data=st.data())
def test_fold_own_folds_or_refuses_as_check_then_fold(a: list[ev.Event], b: list[ev.Event],
                                                      data: st.DataObject) -> None:
    """reading.fold_own checks a record only to word a refusal (issue 49): over records
    whole or damaged as a store can hold them (another job's or a second 'created', a seq
    off, an event missing, another job asked for), the same job or the same refusal in the
    same words as check_record then fold."""
    rec = list(a)
    how = data.draw(st.sampled_from(["none", "swapped", "second-created", "drop", "empty",
                                     "seq-off", "other-job"]))
    i = data.draw(st.integers(0, len(rec) - 1))
    if how == "swapped":
        rec[0] = b[0]
    elif how == "second-created":
        rec.insert(i + 1, msgspec.structs.replace(b[0], seq=i + 2))
    elif how == "drop":
        del rec[i]
    elif how == "empty":
        rec = []
    elif how == "seq-off":
        rec[i] = msgspec.structs.replace(rec[i], seq=rec[i].seq + 3)
    job_id = "b" if how == "other-job" else "a"

    def checked_then_folded() -> Job:
        check_record(rec, job_id)
        return fold(rec, T0, job_id=job_id)

    assert outcome(lambda: fold_own(rec, T0, job_id)) == outcome(checked_then_folded)


def outcome(fn: Callable[[], Job]) -> tuple[str, object]:
    try:
        return "job", fn()
    except RecordError as err:
        return "refused", str(err)
