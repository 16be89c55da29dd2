"""One successor per job (S7, issue 12 item 5), enforced by the store on SQLite and PostgreSQL:
two concurrent supersedes of one finished job leave exactly one new job, and the loser's
call creates nothing. Also: a version-1 store (before the supersedes column) is migrated in
place when opened, keeping the successor its old job names."""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from tests.integration.stores.helpers import Backdoor, build_v1_store, spawn_child

from dispatch.core.codec import encode_event
from dispatch.core.events import (
    EscalationRaised,
    Event,
    JobCreated,
    OutcomeCommitted,
    Superseded,
)
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.record import fold
from dispatch.core.spec import JobSpec
from dispatch.errors import StateConflict
from dispatch.service.requests import JobAlreadySuperseded, JobStateError, supersede
from dispatch.stores.base import (
    SCHEMA_VERSION,
    AlreadySuperseded,
    ConflictError,
    JobExists,
    JobNotFound,
    RecordStore,
)
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
DECL = Declarations(backend="local")


def created(job_id: str, supersedes: str | None = None, us: int = 0) -> JobCreated:
    return JobCreated(seq=1, at=T0.replace(microsecond=us), job_id=job_id,
                      spec=JobSpec(name="train", command=("python", "t.py"), backend="local"),
                      declarations=DECL, supersedes=supersedes)


def failed(seq: int = 2) -> OutcomeCommitted:
    return OutcomeCommitted(seq=seq, at=T0, state=State.FAILED,
                            cause=Cause(kind=CauseKind.NON_ZERO_EXIT, exit_code=1))


def finished_job(store: RecordStore, job_id: str) -> None:
    store.create(created(job_id))
    store.append(job_id, [failed()], 1)


def successors(store: RecordStore, old: str) -> list[str]:
    """Jobs whose created event names ``old``, read back through the store."""
    ids = [r.job_id for r in store.list_jobs()]
    out = []
    for job_id, record in store.read_many(ids).items():
        first = record[0]
        assert isinstance(first, JobCreated)
        if first.supersedes == old:
            out.append(job_id)
    return out


def assert_one_successor(store: RecordStore, old: str, winner: str) -> None:
    assert successors(store, old) == [winner]
    record = store.read(old)
    marks = [e for e in record if isinstance(e, Superseded)]
    assert [m.by for m in marks] == [winner]
    assert fold(record, T0).superseded_by == winner
    assert fold(store.read(winner), T0).supersedes == old


def test_supersede_writes_the_new_job_and_the_mark_together(store: RecordStore) -> None:
    finished_job(store, "old")
    new = supersede(store, "old", T0, "alice", DECL)
    assert_one_successor(store, "old", new)
    assert store.version("old") == 3
    with pytest.raises(JobAlreadySuperseded, match=f"already superseded by {new}") as info:
        supersede(store, "old", T0, "bob", DECL)
    # One error for the CLI's state-conflict path (exit 6) and for the store's family.
    assert isinstance(info.value, JobStateError) and isinstance(info.value, AlreadySuperseded)
    assert info.value.exit_code == StateConflict.exit_code
    assert successors(store, "old") == [new]


def test_a_live_job_cannot_be_superseded(store: RecordStore) -> None:
    store.create(created("live"))
    with pytest.raises(JobStateError, match="not finished"):
        supersede(store, "live", T0, "alice", DECL)
    assert [r.job_id for r in store.list_jobs()] == ["live"]


def test_the_store_refuses_a_second_successor_however_it_is_written(store: RecordStore) -> None:
    finished_job(store, "old")
    store.create(created("first", supersedes="old"))
    # A plain create naming the same old job: the unique key refuses it.
    with pytest.raises(AlreadySuperseded) as info:
        store.create(created("second", supersedes="old"))
    assert info.value.job_id == "old" and info.value.by == "first"
    with pytest.raises(AlreadySuperseded):
        store.create_many([created("third"), created("fourth", supersedes="old")])
    with pytest.raises(AlreadySuperseded):
        store.create_successor(created("fifth", supersedes="old"),
                               Superseded(seq=3, at=T0, by="fifth"), 2)
    for gone in ("second", "third", "fourth", "fifth"):
        with pytest.raises(JobNotFound):
            store.read(gone)
    assert store.version("old") == 2  # no Superseded event was added by any refusal
    # Jobs that supersede nothing never collide.
    store.create_many([created("x"), created("y")])


def test_create_successor_refusals_write_nothing(store: RecordStore) -> None:
    finished_job(store, "old")
    store.create(created("taken"))
    with pytest.raises(ConflictError) as conflict:  # stale version of the old job
        store.create_successor(created("new", supersedes="old"),
                               Superseded(seq=2, at=T0, by="new"), 1)
    assert conflict.value.actual == 2
    with pytest.raises(JobExists):  # the new id is taken
        store.create_successor(created("taken", supersedes="old"),
                               Superseded(seq=3, at=T0, by="taken"), 2)
    with pytest.raises(JobNotFound):
        store.create_successor(created("new", supersedes="nobody"),
                               Superseded(seq=2, at=T0, by="new"), 1)
    with pytest.raises(ValueError, match="must name new"):
        store.create_successor(created("new", supersedes="old"),
                               Superseded(seq=3, at=T0, by="other"), 2)
    with pytest.raises(ValueError, match="must name the job it supersedes"):
        store.create_successor(created("new"), Superseded(seq=3, at=T0, by="new"), 2)
    assert store.version("old") == 2 and successors(store, "old") == []
    assert store.create_successor(created("new", supersedes="old"),
                                  Superseded(seq=3, at=T0, by="new"), 2) == 3
    assert_one_successor(store, "old", "new")


def test_a_supersede_retries_when_the_old_job_moved_on(store: RecordStore) -> None:
    """An unrelated append to the old job between the read and the write: ConflictError
    inside supersede, which folds again and succeeds."""
    finished_job(store, "old")
    real = store.create_successor
    calls: list[int] = []

    def interleaved(c: JobCreated, s: Superseded, expected: int) -> int:
        if not calls:
            store.append("old", [EscalationRaised(seq=expected + 1, at=T0, message="m")],
                         expected)
        calls.append(expected)
        return real(c, s, expected)

    store.create_successor = interleaved  # type: ignore[method-assign,assignment]
    new = supersede(store, "old", T0, "alice", DECL)
    assert calls == [2, 3]
    assert_one_successor(store, "old", new)


def test_two_threads_superseding_one_job_leave_one_successor(store_url: str) -> None:
    rounds = 8
    with open_store(store_url) as s:
        for r in range(rounds):
            finished_job(s, f"old{r}")
    stores = [open_store(store_url), open_store(store_url)]
    try:
        for r in range(rounds):
            barrier = threading.Barrier(2)
            results: list[tuple[str, str | None]] = [("", None), ("", None)]

            def go(i: int, r: int = r, b: threading.Barrier = barrier,
                   results: list[tuple[str, str | None]] = results) -> None:
                b.wait()
                try:
                    results[i] = ("won", supersede(stores[i], f"old{r}", T0, f"t{i}", DECL))
                except JobAlreadySuperseded as err:
                    results[i] = ("lost", err.by)

            threads = [threading.Thread(target=go, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            assert sorted(w for w, _ in results) == ["lost", "won"], (r, results)
            winner = next(x for w, x in results if w == "won")
            loser_saw = next(x for w, x in results if w == "lost")
            assert winner is not None and loser_saw == winner
            assert_one_successor(stores[0], f"old{r}", winner)
        assert len(stores[1].list_jobs()) == 2 * rounds
    finally:
        for s in stores:
            s.close()


def test_two_processes_superseding_one_job_leave_one_successor(store_url: str,
                                                              tmp_path: Path) -> None:
    rounds = 4
    with open_store(store_url) as s:
        for r in range(rounds):
            finished_job(s, f"old{r}")
    for r in range(rounds):
        godir = tmp_path / f"go{r}"
        godir.mkdir()
        children = [spawn_child("supersede", store_url, f"old{r}", str(godir), f"p{i}")
                    for i in range(2)]
        try:
            for c in children:
                assert c.stdout.readline().strip() == "ready"  # type: ignore[union-attr]
            (godir / "go").touch()
            lines = []
            for c in children:
                out, err = c.communicate(timeout=120)
                assert c.returncode == 0, err
                lines.append(out.split())
        finally:
            for c in children:
                if c.poll() is None:
                    c.kill()
                    c.wait()
        assert sorted(w[0] for w in lines) == ["lost", "won"], (r, lines)
        won = next(w for w in lines if w[0] == "won")
        lost = next(w for w in lines if w[0] == "lost")
        assert lost[1:] == ["JobAlreadySuperseded", won[1]]
        with open_store(store_url) as s:
            assert_one_successor(s, f"old{r}", won[1])
    with open_store(store_url) as s:
        assert len(s.list_jobs()) == 2 * rounds


# -- migration from schema version 1 ---------------------------------------------------------


def test_a_version_1_store_is_migrated_in_place(store_url: str) -> None:
    """Before version 2 a race could leave two successors of one job: the one the old job's
    Superseded event names keeps the link; both records stay readable."""
    old: list[Event] = [created("old"), failed(), Superseded(seq=3, at=T0, by="late")]
    early = created("early", supersedes="old", us=1)
    late = created("late", supersedes="old", us=2)
    other_old: list[Event] = [created("other", us=3), failed()]
    single = created("single", supersedes="other", us=4)
    build_v1_store(store_url, {"old": old, "early": [early], "late": [late],
                               "other": other_old, "single": [single]})
    threads_done: list[object] = []

    def open_and_list() -> None:  # two openers at once: one migrates, the other waits
        with open_store(store_url) as s:
            threads_done.append(len(s.list_jobs()))

    threads = [threading.Thread(target=open_and_list) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert threads_done == [5, 5]
    assert Backdoor(store_url).schema_version() == SCHEMA_VERSION == 7
    assert Backdoor(store_url).supersedes_column() == {
        "old": None, "early": None, "late": "old", "other": None, "single": "other"}
    with open_store(store_url) as s:
        assert fold(s.read("old"), T0).superseded_by == "late"
        assert fold(s.read("early"), T0).supersedes == "old"  # its record is kept as is
        with pytest.raises(JobAlreadySuperseded, match="by late"):
            supersede(s, "old", T0, "alice", DECL)
        with pytest.raises(AlreadySuperseded, match="by single"):
            s.create(created("again", supersedes="other"))
        # Jobs written by version 1 and new ones live side by side.
        s.append("other", [EscalationRaised(seq=3, at=T0, message="m")], 2)
        assert len(s.read("other")) == 3


def test_a_version_1_store_with_a_missing_table_is_refused_not_migrated(
    store_url: str,
) -> None:
    build_v1_store(store_url, {"a": [created("a")]})
    bd = Backdoor(store_url)
    bd.execute("DROP TABLE events", "DROP TABLE dispatch_events")
    from dispatch.stores.base import StoreError

    with pytest.raises(StoreError, match="table .*events is missing"):
        open_store(store_url)
    assert bd.schema_version() == 1


def test_bodies_are_the_codec_s() -> None:
    """The migration reads ``supersedes`` and Superseded's ``by`` from stored JSON: the
    codec's field names must stay what the migration looks for."""
    doc = msgspec.json.decode(encode_event(created("n", supersedes="o")))
    assert doc["supersedes"] == "o"
    doc = msgspec.json.decode(encode_event(Superseded(seq=3, at=T0, by="n")))
    assert doc["type"] == "superseded" and doc["by"] == "n"
