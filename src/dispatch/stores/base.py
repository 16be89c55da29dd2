"""The record store: one append-only list of events per job, with optimistic concurrency.

The record is the product's memory (docs/semantics.md): a lost or corrupted record is a lost
decision.
Every store keeps the same contract, tested on each (tests/integration/stores/):

- ``append`` is all-or-nothing, in one transaction, and only succeeds when the job's version
  (its last seq) still equals ``expected_version``; a stale writer gets ConflictError and
  nothing is written. The database enforces it (a lock plus the unique (job_id, seq) key),
  so two supervisors on one store cannot both record the same decision (R2).
- Events are stored as the codec encodes them and decoded strictly on read: a record written
  by a newer build is refused with the job and seq named, never misread (S13).
- A read refuses a record that is not whole: seqs 1..n with no gap, and the job's version
  equal to n (RecordDamaged names the job and the seq), never folding a damaged record.
- A job has at most one successor: the store keeps ``supersedes`` unique (S7), and
  ``create_successor`` writes the new job and the old job's Superseded event in one
  transaction, so two concurrent supersedes leave one successor and the loser nothing.
- Any fault of the store (a damaged file, a full disk, a lost connection, a read-only
  database) is a StoreError naming the store, never a raw driver exception.
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
from typing import TYPE_CHECKING, Any

import msgspec

from dispatch.core.codec import DecodeError, decode_event
from dispatch.core.events import Event, JobCreated, OutcomeCommitted, Superseded
from dispatch.core.record import check_record
from dispatch.errors import NotFound, StateConflict, StoreUnusable

# Fence and Fenced live in stores/fence.py (so lease.py needs nothing of this module's to
# name them); they are handed on here for the stores that import them from base.
from dispatch.stores.fence import Fence as Fence
from dispatch.stores.fence import Fenced as Fenced
from dispatch.stores.query import JobQuery
from dispatch.support.name_glob import natural_key

if TYPE_CHECKING:
    from dispatch.core.record import Job
    from dispatch.stores.batch import Append, Outcome
    from dispatch.stores.fence import LeaseBook
    from dispatch.stores.snapshot_sql import Stored

# snapshot.encode: (the snapshot's body, its digest) of a Job and its last event's body.
Encoder = Callable[["Job", bytes], tuple[bytes, str]]

SCHEMA_VERSION = 7
"""The schema this build writes and reads. A store whose schema is newer is refused; an
older one is migrated in place, step by step, under the store's write lock
(stores/schema.py): 1 -> 2 one successor per job (``supersedes`` UNIQUE); 2 -> 3 each job's
``scope`` and the supervisor leases (stores/lease.py); 3 -> 4 each job's change mark (for
a tick that reads only what changed) and the snapshot cache (stores/snapshot.py); 4 -> 5
``jobs.edited``, set by the database when a stored event is updated or deleted, so that no
snapshot outlives an edit of the events under it (stores/schema.py); 5 -> 6 the causes each
job's history holds (stores/causes.py), so a list finds jobs by a cause they recovered
from, the submit attempts never resolved (stores/attempts.py), and the supervisors' presence
rows (standbys, refused reads: stores/presence.py); 6 -> 7 each job's /metrics part, cached
(stores/part_cache.py), and the count of jobs ever removed (stores/removals.py)."""


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


class SchemaInvalid(StoreError):
    """The schema table holds no usable version, or a table the schema needs is missing."""


class RecordDamaged(StoreError):
    """A stored record that is not whole: a gap or disorder in its seqs, or a job version
    that disagrees with its last event. Refused rather than folded into another state."""

    def __init__(self, where: str, job_id: str, seq: int | None, problem: str) -> None:
        self.where = where
        self.job_id = job_id
        self.seq = seq
        at = f", seq {seq}" if seq is not None else ""
        super().__init__(
            f"{where}: job {job_id}{at}: damaged record: {problem}; refusing to read it "
            "(restore the store from a backup, or repair the record by hand)"
        )


class AlreadySuperseded(StateConflict, ValueError):
    """The old job already has a successor: a job is superseded at most once (S7)."""

    def __init__(self, job_id: str, by: str | None) -> None:
        self.job_id = job_id
        self.by = by
        who = f" by {by}" if by else ""
        super().__init__(f"job {job_id} is already superseded{who}; nothing was created")


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

    def __init__(self, name: str, job_ids: Sequence[str],
                 described: Sequence[str] = (), what: str = "name") -> None:
        self.name = name
        self.job_ids = tuple(job_ids)
        listed = "\n  ".join(described) if described else ", ".join(self.job_ids)
        sep = "\n  " if described else " ("
        end = "" if described else ")"
        super().__init__(
            f"{what} {name!r} matches {len(self.job_ids)} unrelated jobs; use a job id "
            f"(or a longer prefix):{sep}{listed}{end}"
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


class Change(msgspec.Struct, frozen=True, gc=False):
    """A job written to since a supervisor's last look (``RecordStore.changes``). A msgspec
    struct: a first look makes one per live job, and a frozen dataclass cost ten times as
    much to make (0.07 s of a first look at 100,000 live jobs)."""

    job_id: str
    version: int
    terminal: bool
    outcome: str | None = None  # the outcome column (/metrics counts jobs by it)


@dataclass(frozen=True, slots=True)
class JobMatch:
    """A job a reference could mean (``RecordStore.matches``): ``how`` it matched (``id``,
    ``name`` or ``prefix``); a name matches only the newest job of a supersede chain."""

    job_id: str
    name: str
    created_at: datetime
    terminal: bool
    how: str


# An id prefix needs this many characters: fewer would match most of a busy record.
MIN_PREFIX = 4


def match_row(where: str, r: tuple[object, ...]) -> JobMatch:
    """A row of ``matches``: (job_id, name, created_at, terminal, how)."""
    job_id, name, created_at, terminal, how = r
    try:
        at = datetime.fromisoformat(str(created_at))
    except ValueError:
        raise RecordDamaged(where, str(job_id), 1,
                            f"created_at {created_at!r} is not a time") from None
    return JobMatch(job_id=str(job_id), name=str(name), created_at=at,
                    terminal=bool(terminal), how=str(how))


def created_scope(created: JobCreated) -> str:
    """The scope column of a new job: its JobCreated's scope, else its backend's name."""
    return created.scope or created.spec.backend


def created_columns(e: JobCreated) -> tuple[object, ...]:
    """A new job's row as both stores insert it: job_id, name, backend, created_at,
    created_us, supersedes, scope, name_key (support/name_glob.natural_key: a name order
    is natural, schema version 6)."""
    return (e.job_id, e.spec.name, e.spec.backend, e.at.isoformat(), sort_key_us(e.at),
            e.supersedes, created_scope(e), natural_key(e.spec.name))


def outcome_of(events: Sequence[Event]) -> str | None:
    """The state a batch commits (its first OutcomeCommitted's), else None."""
    return next((e.state.value for e in events if isinstance(e, OutcomeCommitted)), None)


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


def check_contiguous(where: str, job_id: str, version: object, seqs: Sequence[object]) -> None:
    """Refuse a record that is not seq 1..n with the job's version n (RecordDamaged)."""
    if not seqs:
        raise RecordDamaged(where, job_id, 1, "the job has no events (its created event, "
                            "seq 1, is missing)")
    for want, seq in enumerate(seqs, start=1):
        if isinstance(seq, bool) or not isinstance(seq, int):
            raise RecordDamaged(where, job_id, want, f"the event after seq {want - 1} has "
                                f"seq {seq!r}, not an integer")
        if seq != want:
            problem = (f"seq {want} is missing (the next stored event is seq {seq})"
                       if seq > want else f"seq {seq} is stored after seq {want - 1}")
            raise RecordDamaged(where, job_id, want, problem)
    last = len(seqs)
    if isinstance(version, bool) or not isinstance(version, int):
        raise RecordDamaged(where, job_id, None, f"the job's version is {version!r}, "
                            "not an integer")
    if version != last:
        if version > last:
            problem = (f"the job's version is {version} but the last stored event is seq "
                       f"{last} (events {last + 1}..{version} are missing)")
        else:
            problem = f"the job's version is {version} but events run to seq {last}"
        raise RecordDamaged(where, job_id, max(1, min(version, last) + 1), problem)


def decode_stored(where: str, body: bytes | str, job_id: str, seq: int) -> Event:
    """codec.decode_event, with the store named in the error (job, seq and field kept)."""
    try:
        return decode_event(body, job_id=job_id, seq=seq)
    except DecodeError as err:
        raise DecodeError(f"{err.reason} (stored in {where})", field=err.field,
                          job_id=job_id, seq=seq) from None


def decode_record(where: str, job_id: str, version: object,
                  stored: Sequence[tuple[Any, bytes | str]]) -> list[Event]:
    """A job's stored ``(seq, body)`` rows, checked whole (seq 1..n, the job's version n),
    decoded, and refused unless the record is the job's own (record.check_record: seq 1 is
    this job's 'created' event, and the only one)."""
    check_contiguous(where, job_id, version, [s for s, _ in stored])
    events = [decode_stored(where, body, job_id, seq) for seq, body in stored]
    check_record(events, job_id)
    return events


def check_successor(created: JobCreated, superseded: Superseded, expected_version: int) -> str:
    """Validate a create_successor call before any I/O; returns the old job's id."""
    check_created(created)
    old = created.supersedes
    if not old:
        raise ValueError(f"job {created.job_id}: a successor's JobCreated must name the job "
                         "it supersedes")
    if old == created.job_id:
        raise ValueError(f"job {old} cannot supersede itself")
    if not isinstance(superseded, Superseded) or superseded.by != created.job_id:
        raise ValueError(f"job {old}: the Superseded event must name {created.job_id}")
    check_batch(old, [superseded], expected_version)
    return old


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
    def create_successor(self, created: JobCreated, superseded: Superseded,
                         expected_version: int) -> int:
        """In one transaction: create job ``created`` (which supersedes
        ``created.supersedes``) and append ``superseded`` to the old job at
        ``expected_version``; returns the old job's new version. AlreadySuperseded when the
        old job has a successor already, ConflictError when it moved on, JobNotFound when it
        does not exist, JobExists when the new id is taken: in each case nothing is written."""

    @abc.abstractmethod
    def append(self, job_id: str, events: Sequence[Event], expected_version: int, *,
               fence: Fence | None = None) -> int:
        """Append ``events`` (seq expected_version+1, +2, ...) atomically; returns the new
        version. ConflictError (nothing written) when the job is no longer at
        ``expected_version``; JobNotFound when there is no such job; ValueError for a batch
        whose seqs do not follow on; Fenced (nothing written) when ``fence`` is given and is
        not the current, unexpired lease on the job's scope."""

    @abc.abstractmethod
    def append_many(self, appends: Sequence[Append], *, fence: Fence | None = None
                    ) -> list[Outcome]:
        """Several jobs' appends in one transaction (stores/batch.py), each checked as
        ``append`` checks it, in a savepoint of its own: per append, its new version or
        what refused it (ConflictError, JobNotFound, ValueError: nothing of that job
        written, the others kept). Fenced or a StoreError is raised: nothing written."""

    @abc.abstractmethod
    def read(self, job_id: str) -> list[Event]:
        """The job's whole record in seq order; JobNotFound if none. A stored event this
        build cannot decode raises codec.DecodeError naming the job, seq and field; a record
        with a gap, or whose version disagrees with its events, raises RecordDamaged."""

    @abc.abstractmethod
    def version(self, job_id: str) -> int:
        """The job's last seq; JobNotFound if none."""

    def list_jobs(self, *, live_only: bool = False, name: str | None = None,
                  scope: str | None = None) -> list[JobRow]:
        """Jobs ordered by creation; ``live_only`` leaves out jobs with a committed outcome;
        ``scope`` keeps the jobs of that scope only."""
        return self.query_jobs(JobQuery(terminal=False if live_only else None, name=name,
                                        scope=scope))

    @abc.abstractmethod
    def query_jobs(self, query: JobQuery) -> list[JobRow]:
        """One page of jobs: filtered, ordered and keyset-paged (stores/query.py)."""

    @abc.abstractmethod
    def count_jobs(self, query: JobQuery) -> dict[str | None, int]:
        """How many jobs ``query``'s filters keep, by outcome (stores/query.py count_sql):
        '' for the unfinished, None for those finished before the store kept outcomes."""

    @abc.abstractmethod
    def prune(self, before_us: int, *, act: bool = False) -> list[str]:
        """The finished jobs created before ``before_us`` (whole supersede chains only,
        stores/prune.py): removed, each whole and all in one transaction, when ``act``;
        else only named (a dry run)."""

    @abc.abstractmethod
    def stamp(self) -> tuple[int, int]:
        """A cheap marker that changes whenever any job is created or appended to, or has a
        stored event edited in place: the number of jobs and the sum of their versions and
        edit counts."""

    @abc.abstractmethod
    def read_many(self, job_ids: Sequence[str]) -> dict[str, list[Event]]:
        """Records of many jobs in one query (a supervision tick); JobNotFound naming the
        ids that do not exist."""

    @abc.abstractmethod
    def changes(self, since: int | None, *, scope: str | None = None
                ) -> tuple[list[Change], int | None]:
        """(jobs changed since the mark ``since``, the mark to pass next time), one indexed
        query. ``since`` None: every live job (the first look). A job may be reported again
        though unchanged (the caller compares versions); a committed change is never missed.
        ``scope`` keeps the jobs of that scope only."""

    @abc.abstractmethod
    def watched(self, scope: str | None, since_us: int, host: str | None = None,
                boot_id: str | None = None) -> list[str]:
        """The finished jobs of ``scope`` (None: every scope) with a submit attempt never
        resolved made at or after ``since_us`` or by a process on ``host`` in boot
        ``boot_id``: those whose watch may not be over (core/waits.watch_until decides),
        from an index (stores/attempts.py), never their records."""

    @abc.abstractmethod
    def read_after(self, versions: dict[str, int]) -> dict[str, list[Event]]:
        """For each job, its events after seq ``versions[job]`` up to its version, in one
        query, checked whole and decoded strictly; RecordDamaged when a job's version is
        behind the seq given, JobNotFound naming the ids that do not exist."""

    @abc.abstractmethod
    def read_snapshots(self, job_ids: Sequence[str]) -> list[Stored]:
        """The stored snapshots of these jobs (stores/snapshot.py), one query."""

    @abc.abstractmethod
    def write_snapshot(self, job: Job, format: int, encode: Encoder) -> None:
        """Store ``job``'s snapshot (its own transaction; an older one never replaces a
        newer one); nothing when the job has no event at ``job.version`` or its events were
        edited in place (``jobs.edited``, stores/schema.py)."""

    @abc.abstractmethod
    def drop_snapshot(self, job_id: str) -> None:
        """Forget the job's snapshot (always safe: the events are the truth)."""

    @abc.abstractmethod
    def matches(self, ref: str, limit: int = 21) -> list[JobMatch]:
        """The jobs ``ref`` could mean, oldest first, at most ``limit``: the job with that id;
        the jobs carrying that name that no job supersedes (the newest of each supersede
        chain); the jobs whose id starts with ``ref`` when it has at least MIN_PREFIX
        characters. Which one it means is the service's choice (service/resolve.py)."""

    @abc.abstractmethod
    def leases(self) -> LeaseBook:
        """The supervisor leases kept in this store (stores/lease.py)."""

    @abc.abstractmethod
    def close(self) -> None: ...

    def __enter__(self) -> RecordStore:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
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
