"""The record store: one append-only list of events per job, with optimistic concurrency.

The record is the product's memory (DESIGN.md): a lost or corrupted record is a lost decision.
Every store keeps the same contract, tested on each (tests/integration/stores/):

- ``append`` is all-or-nothing, in one transaction, and only succeeds when the job's version
  (its last seq) still equals ``expected_version``; a stale writer gets ConflictError and
  nothing is written. The database enforces it (a lock plus the unique (job_id, seq) key),
  so two supervisors on one store cannot both record the same decision (R2).
- Events are stored as the codec encodes them and decoded strictly on read: a record written
  by a newer build is refused with the job and seq named, never misread (S13).
- An append may carry a ``Fence`` (the supervisor's lease on the job's scope): the store
  checks, in the append's own transaction, that the lease is still that supervisor's, at that
  epoch and unexpired, and that the job belongs to that scope, else raises Fenced and writes
  nothing (stores/lease.py). Appends without a fence (a person's request) are not checked.
"""

from __future__ import annotations

import abc
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING

from dispatch.core.events import Event, JobCreated, OutcomeCommitted
from dispatch.errors import NotFound, StateConflict, StoreUnusable

if TYPE_CHECKING:
    from dispatch.stores.lease import LeaseBook

SCHEMA_VERSION = 2
"""The schema this build writes and reads. A store whose schema is newer is refused; an older
one is migrated step by step when opened (each store lists its steps):
1 -> 2: jobs get a ``scope`` column (filled with the backend name for existing jobs) and the
supervisor lease table appears (stores/lease.py)."""


class StoreError(StoreUnusable):
    """The store cannot be opened or used (bad URL, unreachable database, I/O error)."""


class ConflictError(StoreError):
    """``expected_version`` was stale: another writer appended first. Nothing was written."""

    def __init__(self, job_id: str, expected: int, actual: int | None) -> None:
        self.job_id = job_id
        self.expected = expected
        self.actual = actual
        now = f"is at version {actual}" if actual is not None else "moved on concurrently"
        super().__init__(
            f"job {job_id}: expected version {expected} but the record {now}; nothing written"
        )


@dataclass(frozen=True, slots=True)
class Fence:
    """What an append by an active supervisor carries: its lease on ``scope`` at ``epoch``."""

    scope: str
    holder: str
    epoch: int


class Fenced(StateConflict):
    """An append carried a fence that is no longer current (the lease expired, or another
    supervisor holds the scope at a later epoch) or names another scope than the job's.
    Nothing was written.

    A StateConflict, not a ConflictError: the store is healthy and the writer's *own* state
    (its lease) forbids the write, and re-reading and retrying — what every caller does with a
    ConflictError — must not happen; the writer stops acting and goes back to standby."""

    def __init__(self, job_id: str, fence: Fence, why: str) -> None:
        self.job_id = job_id
        self.fence = fence
        self.why = why
        super().__init__(
            f"job {job_id}: {fence.holder}'s lease on scope {fence.scope} at epoch "
            f"{fence.epoch} is not current ({why}); nothing written"
        )


class SchemaTooNew(StoreError):
    """The store was written by a newer build of dispatch; this build refuses to touch it."""

    def __init__(self, where: str, found: int, supported: int = SCHEMA_VERSION) -> None:
        self.where = where
        self.found = found
        self.supported = supported
        super().__init__(
            f"{where}: record schema version {found} is newer than this build of dispatch "
            f"supports ({supported}); upgrade dispatch to read it (nothing was changed)"
        )


class JobExists(StoreError):
    def __init__(self, job_ids: Sequence[str]) -> None:
        self.job_ids = tuple(job_ids)
        shown = ", ".join(self.job_ids[:5]) + (" ..." if len(self.job_ids) > 5 else "")
        super().__init__(f"job already exists: {shown}")


class JobNotFound(NotFound, LookupError):
    def __init__(self, what: str | Sequence[str]) -> None:
        names = (what,) if isinstance(what, str) else tuple(what)
        self.job_ids = names
        shown = ", ".join(names[:5]) + (" ..." if len(names) > 5 else "")
        super().__init__(f"no such job: {shown}")


class AmbiguousName(NotFound, LookupError):
    """A name that several jobs carry; use one of their ids."""

    def __init__(self, name: str, job_ids: Sequence[str]) -> None:
        self.name = name
        self.job_ids = tuple(job_ids)
        super().__init__(
            f"name {name!r} matches {len(self.job_ids)} jobs ({', '.join(self.job_ids)}); "
            "use a job id"
        )


@dataclass(frozen=True, slots=True)
class JobRow:
    """One line of ``list_jobs``: what the store knows without decoding the record."""

    job_id: str
    name: str
    backend: str
    terminal: bool
    version: int
    created_at: datetime
    scope: str = ""  # JobCreated.scope, else the backend's name


def created_scope(created: JobCreated) -> str:
    """The scope column of a new job: its JobCreated's scope, else its backend's name."""
    return created.scope or created.spec.backend


def check_batch(job_id: str, events: Sequence[Event], expected_version: int) -> bool:
    """Validate a batch before any I/O; returns whether it commits an outcome.

    Seqs must run expected_version+1, +2, ... with no gap; JobCreated only comes from create().
    """
    if isinstance(expected_version, bool) or not isinstance(expected_version, int):
        raise TypeError(f"expected_version must be an int, got {expected_version!r}")
    if expected_version < 1:
        raise ValueError(f"job {job_id}: expected_version must be >= 1 (create() writes seq 1)")
    if not events:
        raise ValueError(f"job {job_id}: append of an empty batch")
    terminal = False
    for offset, event in enumerate(events, start=1):
        want = expected_version + offset
        if isinstance(event, JobCreated):
            raise ValueError(f"job {job_id}: JobCreated is written by create(), not append()")
        if event.seq != want:
            raise ValueError(
                f"job {job_id}: event {offset} of the batch has seq {event.seq}, expected {want}"
            )
        if isinstance(event, OutcomeCommitted):
            terminal = True
    return terminal


def check_created(created: JobCreated) -> None:
    if not isinstance(created, JobCreated):
        raise TypeError(f"create() takes a JobCreated event, got {type(created).__name__}")
    if created.seq != 1:
        raise ValueError(f"job {created.job_id}: JobCreated must have seq 1, got {created.seq}")
    if not created.job_id:
        raise ValueError("JobCreated.job_id must not be empty")


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def sort_key_us(at: datetime) -> int:
    """Microseconds since the epoch, for ordering by creation (a naive time is taken as UTC)."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    delta = at - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


class RecordStore(abc.ABC):
    """Where every job's record lives. Implementations: SQLiteStore, PostgresStore."""

    @abc.abstractmethod
    def describe(self) -> str:
        """Where the store is, fit to print (a password is always masked)."""

    @abc.abstractmethod
    def create(self, created: JobCreated) -> None:
        """Write ``created`` as seq 1 of job ``created.job_id``; JobExists if it exists."""

    @abc.abstractmethod
    def create_many(self, created: Sequence[JobCreated]) -> None:
        """Create several jobs in one transaction (all or none); JobExists if any exists."""

    @abc.abstractmethod
    def append(self, job_id: str, events: Sequence[Event], expected_version: int, *,
               fence: Fence | None = None) -> int:
        """Append ``events`` (seq expected_version+1, +2, ...) atomically; returns the new
        version. ConflictError (nothing written) when the job is no longer at
        ``expected_version``; JobNotFound when there is no such job; ValueError for a batch
        whose seqs do not follow on; Fenced (nothing written) when ``fence`` is given and is
        not the current, unexpired lease on the job's scope."""

    @abc.abstractmethod
    def read(self, job_id: str) -> list[Event]:
        """The job's whole record in seq order; JobNotFound if none. A stored event this
        build cannot decode raises codec.DecodeError naming the job, seq and field."""

    @abc.abstractmethod
    def version(self, job_id: str) -> int:
        """The job's last seq; JobNotFound if none."""

    @abc.abstractmethod
    def list_jobs(self, *, live_only: bool = False, name: str | None = None,
                  scope: str | None = None) -> list[JobRow]:
        """Jobs ordered by creation; ``live_only`` leaves out jobs with a committed outcome;
        ``scope`` keeps the jobs of that scope only."""

    @abc.abstractmethod
    def read_many(self, job_ids: Sequence[str]) -> dict[str, list[Event]]:
        """Records of many jobs in one query (a supervision tick); JobNotFound naming the
        ids that do not exist."""

    @abc.abstractmethod
    def resolve(self, job_or_name: str) -> str:
        """A job id (returned as is when it exists) or a name carried by exactly one job;
        JobNotFound when neither, AmbiguousName when several jobs carry the name."""

    @abc.abstractmethod
    def leases(self) -> LeaseBook:
        """The supervisor leases kept in this store (stores/lease.py)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


def append_fact(store: RecordStore, job_id: str, make: Callable[[int], Event],
                attempts: int = 10, *, fence: Fence | None = None) -> int:
    """Append one event whose truth does not depend on the record's state (a fact learnt
    from a backend, an operator's decision): on a conflict only its seq changes, so it is
    re-made at the new version and tried again. Returns the new version. Fenced is never
    retried."""
    for _ in range(attempts):
        version = store.version(job_id)
        try:
            return store.append(job_id, [make(version + 1)], version, fence=fence)
        except ConflictError:
            continue
    raise StoreError(f"job {job_id}: could not append after {attempts} conflicting writers")
