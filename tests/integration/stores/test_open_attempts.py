"""Issue 45 item 12: the submit attempts never resolved, kept by the stores at append time
(schema version 6, stores/attempts.py), on SQLite and PostgreSQL: ``watched`` answers a
supervisor taking a scope over with the scope's finished jobs whose watch may not be over
(an unresolved attempt within the horizon, or by a holder of its own host and boot), from
the index; a store written before version 6 is filled by its migration; prune forgets them.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.integration.stores.helpers import Backdoor, build_v1_store

from dispatch.core.events import (
    Event,
    ExecutionEnded,
    Holder,
    JobCreated,
    OutcomeCommitted,
    SubmissionAttempted,
    SubmissionBound,
    SubmissionIntended,
    SubmissionRejected,
)
from dispatch.core.model import Cause, CauseKind, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.attempts import changes
from dispatch.stores.base import SCHEMA_VERSION, RecordStore, sort_key_us
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HERE = Holder(host="vm", boot_id="b1", pid=10, start_ticks=1)
EARLIER_BOOT = Holder(host="vm", boot_id="b0", pid=10, start_ticks=1)
ELSEWHERE = Holder(host="other", boot_id="b9", pid=10, start_ticks=1)
NOW = T0 + timedelta(hours=3)
HORIZON_US = sort_key_us(NOW - timedelta(hours=1))


def created(job_id: str, scope: str = "local") -> JobCreated:
    backend = scope.partition(":")[0]  # a store from before scopes: the backend's name
    return JobCreated(seq=1, at=T0, job_id=job_id, scope=scope,
                      spec=JobSpec(name=job_id, command=("true",), backend=backend),
                      declarations=Declarations(backend=backend))


def intended(seq: int, at: datetime, holder: Holder | None, n: int = 1) -> SubmissionIntended:
    return SubmissionIntended(seq=seq, at=at, submission=n, token=f"t{n}", holder=holder)


def cancelled(seq: int, at: datetime) -> OutcomeCommitted:
    return OutcomeCommitted(seq=seq, at=at, state=State.CANCELLED,
                            cause=Cause(kind=CauseKind.CANCELLED))


RECENT = NOW - timedelta(minutes=10)
OLD = NOW - timedelta(hours=2)
RECORDS: dict[str, list[Event]] = {
    # finished within the horizon, its attempt never resolved: watched (any holder)
    "recent": [created("recent"), intended(2, RECENT, ELSEWHERE), cancelled(3, RECENT)],
    # finished 2 h ago, the holder on this host and boot (it may be alive: paused)
    "paused": [created("paused"), intended(2, OLD, ELSEWHERE),
               SubmissionAttempted(seq=3, at=OLD, submission=1, holder=HERE),
               cancelled(4, OLD)],
    # 2 h ago, a holder elsewhere, one of an earlier boot, none: its watch is over
    "elsewhere": [created("elsewhere"), intended(2, OLD, ELSEWHERE), cancelled(3, OLD)],
    "rebooted": [created("rebooted"), intended(2, OLD, EARLIER_BOOT), cancelled(3, OLD)],
    "nobody": [created("nobody"), intended(2, OLD, None), cancelled(3, OLD)],
    # resolved: bound, rejected, ended (the second submission of "ended" is bound)
    "bound": [created("bound"), intended(2, RECENT, HERE),
              SubmissionBound(seq=3, at=RECENT, submission=1, ref="r1"), cancelled(4, RECENT)],
    "rejected": [created("rejected"), intended(2, RECENT, HERE),
                 SubmissionRejected(seq=3, at=RECENT, submission=1,
                                    cause=Cause(kind=CauseKind.LAUNCH_FAILED)),
                 cancelled(4, RECENT)],
    "ended": [created("ended"), intended(2, RECENT, HERE),
              ExecutionEnded(seq=3, at=RECENT, submission=1, ref="r1", execution=1,
                             cause=Cause(kind=CauseKind.PREEMPTED)),
              intended(4, RECENT, HERE, 2),
              SubmissionBound(seq=5, at=RECENT, submission=2, ref="r2"),
              cancelled(6, RECENT)],
    # live, its submit in flight: not a finished job to watch (the tick has it)
    "live": [created("live"), intended(2, RECENT, HERE)],
    # another scope's
    "theirs": [created("theirs", scope="slurm:c"), intended(2, RECENT, HERE),
               cancelled(3, RECENT)],
}


def watched(store: RecordStore, scope: str | None = "local") -> list[str]:
    return store.watched(scope, HORIZON_US, HERE.host, HERE.boot_id)


def scopes(store: RecordStore) -> set[str]:
    return {r.scope for r in store.list_jobs()}


def check(store: RecordStore) -> None:
    assert watched(store) == ["paused", "recent"]
    assert watched(store, None) == ["paused", "recent", "theirs"]
    assert watched(store, "slurm:c" if "slurm:c" in scopes(store) else "slurm") == ["theirs"]
    # Without a host of its own (no /proc) only the horizon answers.
    assert store.watched("local", HORIZON_US) == ["recent"]
    assert store.watched("local", HORIZON_US, "elsewhere-host", "b1") == ["recent"]


def test_appends_keep_the_attempts_never_resolved(store: RecordStore) -> None:
    for job_id, events in RECORDS.items():
        store.create(events[0])  # type: ignore[arg-type]
        for e in events[1:]:  # one event a batch, as a supervisor appends them
            store.append(job_id, [e], e.seq - 1)
    check(store)


def test_one_batch_that_attempts_and_resolves_leaves_nothing(store: RecordStore) -> None:
    store.create(created("j"))
    store.append("j", [intended(2, RECENT, HERE),
                       SubmissionBound(seq=3, at=RECENT, submission=1, ref="r1"),
                       cancelled(4, RECENT)], 1)
    assert watched(store) == []


def test_a_store_from_before_version_6_is_filled_by_its_migration(store_url: str) -> None:
    build_v1_store(store_url, RECORDS)
    with open_store(store_url) as store:
        assert Backdoor(store_url).schema_version() == SCHEMA_VERSION == 7
        check(store)
        # The live job's submit was in flight at the upgrade: when it finishes unresolved,
        # the row the migration wrote is what finds it.
        store.append("live", [cancelled(3, RECENT)], 2)
        assert watched(store) == ["live", "paused", "recent"]


def test_prune_forgets_a_jobs_attempts(store: RecordStore, backdoor: Backdoor) -> None:
    for job_id in ("recent", "paused"):
        events = RECORDS[job_id]
        store.create(events[0])  # type: ignore[arg-type]
        store.append(job_id, events[1:], 1)
    assert sorted(store.prune(sort_key_us(NOW), act=True)) == ["paused", "recent"]
    assert watched(store) == []
    assert backdoor.query("SELECT count(*) FROM open_attempts",
                          "SELECT count(*) FROM dispatch_open_attempts") == [(0,)]


def test_the_batch_changes_follow_the_fold() -> None:
    """Opened per (submission, holder's host and boot), the latest attempt kept; a
    submission resolved anywhere in the batch leaves no row, as the fold never undoes it."""
    later = RECENT + timedelta(seconds=5)
    opened, resolved = changes([
        intended(2, RECENT, HERE),
        SubmissionAttempted(seq=3, at=later, submission=1, holder=HERE),
        SubmissionAttempted(seq=4, at=RECENT, submission=1, holder=None),
        intended(5, RECENT, ELSEWHERE, 2),
        SubmissionRejected(seq=6, at=later, submission=2,
                           cause=Cause(kind=CauseKind.LAUNCH_FAILED)),
        ExecutionEnded(seq=7, at=later, submission=3, ref="r3", execution=1, final=False,
                       cause=Cause(kind=CauseKind.PREEMPTED)),
    ])
    assert opened == [(1, "", "", sort_key_us(RECENT)), (1, "vm", "b1", sort_key_us(later))]
    assert resolved == [2]  # an execution that is not final resolves nothing
