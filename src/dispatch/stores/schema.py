"""The record schema of both stores, and its migrations: one step per version.

A fresh store is created at version 1 and then migrated step by step to SCHEMA_VERSION, so
a fresh store runs exactly the steps an old file runs. Every step runs under the store's
write lock (SQLite: BEGIN IMMEDIATE; PostgreSQL: the schema advisory lock), in the one
transaction that also records the new version: a crash mid-migration leaves the old
version whole, and a second process waiting on the lock sees the migrated schema.

Version 2 (issue 12 item 5): ``jobs.supersedes``, the job a job supersedes (copied from its
JobCreated event), with a UNIQUE index: a job has at most one successor, enforced by the
database. NULLs (jobs that supersede nothing) never collide in a UNIQUE index, on SQLite
and PostgreSQL alike.

Version 3 (issue 16): ``jobs.scope``, the scope whose supervisor serves the job (copied from
its JobCreated event; the backend's name for jobs recorded before scopes), indexed with
``terminal`` for a supervisor's tick, and the supervisor lease table (stores/lease.py).

Version 4 (issue 27): change marks and the snapshot cache (below). Version 5 (issue 32
item 7): ``jobs.edited`` and the triggers that set it (below). Version 6 (issue 48 item 2):
the causes each job's history holds, a table of its own (below); (issue 45 item 12) the
submit attempts never resolved (stores/attempts.py); and the supervisors' presence rows
(issue 48 item 10: standbys and refused reads, stores/presence.py). Version 7 (issue 49):
each job's /metrics part, cached (stores/part_cache.py), and the count of jobs ever
removed, kept by a trigger (stores/removals.py).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable

from dispatch.stores import attempts, part_cache, presence, removals
from dispatch.stores.base import SCHEMA_VERSION, SchemaInvalid, SchemaTooNew
from dispatch.stores.lease import PG_DDL, SQLITE_DDL
from dispatch.support.name_glob import natural_key

SQLITE_V1 = [
    "CREATE TABLE schema (version INTEGER NOT NULL)",
    """CREATE TABLE jobs (
        job_id     TEXT PRIMARY KEY,
        name       TEXT NOT NULL,
        backend    TEXT NOT NULL,
        created_at TEXT NOT NULL,     -- as the JobCreated event says (ISO 8601)
        created_us INTEGER NOT NULL,  -- the same, as a sort key
        version    INTEGER NOT NULL,  -- the last seq
        terminal   INTEGER NOT NULL DEFAULT 0
    )""",
    "CREATE INDEX jobs_by_created ON jobs (created_us, job_id)",
    "CREATE INDEX jobs_by_name ON jobs (name)",
    """CREATE TABLE events (
        job_id TEXT NOT NULL REFERENCES jobs (job_id),
        seq    INTEGER NOT NULL,
        body   BLOB NOT NULL,         -- codec.encode_event, decoded strictly on read
        PRIMARY KEY (job_id, seq)     -- the last line of defence against two writers
    ) WITHOUT ROWID""",
]

PG_V1 = [
    "CREATE TABLE dispatch_schema (version integer NOT NULL)",
    """CREATE TABLE dispatch_jobs (
        job_id     text PRIMARY KEY,
        name       text NOT NULL,
        backend    text NOT NULL,
        created_at text NOT NULL,
        created_us bigint NOT NULL,
        version    integer NOT NULL,
        terminal   boolean NOT NULL DEFAULT false
    )""",
    "CREATE INDEX dispatch_jobs_by_created ON dispatch_jobs (created_us, job_id)",
    "CREATE INDEX dispatch_jobs_by_name ON dispatch_jobs (name)",
    """CREATE TABLE dispatch_events (
        job_id text NOT NULL REFERENCES dispatch_jobs (job_id),
        seq    integer NOT NULL,
        body   text NOT NULL,
        PRIMARY KEY (job_id, seq)
    )""",
]

# The tables of version 1 (every step needs them) and of the current version.
SQLITE_TABLES = ("schema", "jobs", "events")
PG_TABLES = ("dispatch_schema", "dispatch_jobs", "dispatch_events")
SQLITE_TABLES_NOW = (*SQLITE_TABLES, "leases", "snapshots", "job_causes", "open_attempts",
                     "supervisor_presence", "metric_parts", "removals")
PG_TABLES_NOW = (*PG_TABLES, "dispatch_leases", "dispatch_snapshots", "dispatch_job_causes",
                 "dispatch_open_attempts", "dispatch_supervisor_presence",
                 "dispatch_metric_parts", "dispatch_removals")

# Version 2: one successor per job. The statements run after the backfill's column exists.
SQLITE_V2_COLUMN = "ALTER TABLE jobs ADD COLUMN supersedes TEXT"
SQLITE_V2_INDEX = "CREATE UNIQUE INDEX jobs_by_supersedes ON jobs (supersedes)"
PG_V2_COLUMN = "ALTER TABLE dispatch_jobs ADD COLUMN supersedes text"
PG_V2_INDEX = "CREATE UNIQUE INDEX dispatch_jobs_by_supersedes ON dispatch_jobs (supersedes)"
PG_SUPERSEDES_INDEX = "dispatch_jobs_by_supersedes"

# Version 3: each job's scope (the backend's name for the jobs already there), and leases.
SQLITE_V3 = [
    "ALTER TABLE jobs ADD COLUMN scope TEXT",
    "UPDATE jobs SET scope = backend",
    "CREATE INDEX jobs_by_scope ON jobs (scope, terminal)",
    SQLITE_DDL,
]
PG_V3 = [
    "ALTER TABLE dispatch_jobs ADD COLUMN scope text",
    "UPDATE dispatch_jobs SET scope = backend",
    "CREATE INDEX dispatch_jobs_by_scope ON dispatch_jobs (scope, terminal)",
    PG_DDL,
]


# Version 4 (issue 27): each job's change mark, indexed, so a tick asks "which jobs changed
# since my last look" in one range scan (rows of older stores keep mark 0 / NULL: they are
# read by the first look, which lists every live job); each finished job's outcome state,
# so a list filters finished jobs by state in SQL (NULL for jobs finished before version 4:
# such a list folds those); and the snapshot cache. Adding a
# column with a constant default and a table rewrites no event.
SQLITE_V4 = [
    "ALTER TABLE jobs ADD COLUMN changed INTEGER NOT NULL DEFAULT 0",
    "CREATE INDEX jobs_by_changed ON jobs (changed)",
    "CREATE INDEX jobs_by_terminal ON jobs (terminal, created_us, job_id)",  # live lists
    "ALTER TABLE jobs ADD COLUMN outcome TEXT",  # NULL: live, or finished before version 4
    "CREATE INDEX jobs_by_outcome ON jobs (outcome, created_us, job_id)",
    """CREATE TABLE snapshots (
        job_id  TEXT PRIMARY KEY,
        version INTEGER NOT NULL,  -- the last seq folded into it
        format  INTEGER NOT NULL,  -- snapshot.FORMAT; another one is discarded
        body    BLOB NOT NULL,     -- the folded Job (msgspec JSON)
        digest  TEXT NOT NULL      -- sha256 of body and of the event at seq ``version``
    ) WITHOUT ROWID""",
]
# PostgreSQL: the mark is the writing transaction's id (xid8, never wraps); a reader's next
# mark is the oldest transaction still running when it looked (pg_snapshot_xmin), so a
# transaction that commits later, whatever its id, is seen by the next look.
PG_V4 = [
    "ALTER TABLE dispatch_jobs ADD COLUMN changed xid8",
    "CREATE INDEX dispatch_jobs_by_changed ON dispatch_jobs (changed)",
    "CREATE INDEX dispatch_jobs_by_terminal ON dispatch_jobs (terminal, created_us, job_id)",
    "ALTER TABLE dispatch_jobs ADD COLUMN outcome text",
    "CREATE INDEX dispatch_jobs_by_outcome ON dispatch_jobs (outcome, created_us, job_id)",
    # an id prefix (``matches``) as an index range whatever the database's collation
    "CREATE INDEX dispatch_jobs_by_id_prefix ON dispatch_jobs (job_id text_pattern_ops)",
    """CREATE TABLE dispatch_snapshots (
        job_id  text PRIMARY KEY,
        version integer NOT NULL,
        format  integer NOT NULL,
        body    text NOT NULL,
        digest  text NOT NULL
    )""",
]


# Version 5 (issue 32 item 7): a record is append-only, so a stored event is never updated
# or deleted by dispatch. One that is (by hand, by a tool) may have changed a record that a
# snapshot vouches for without the snapshot knowing: two bodies swapped in place leave the
# event at the snapshot's seq, which the digest covers, as it was. The database marks such
# a job ``edited`` (a count of the rows edited, so that the store's stamp moves: a list's
# ETag) and drops its snapshot, in the statement that edits it; a marked job's
# snapshot is never trusted or written again (stores/snapshot.py), so every reader folds
# its record whole and refuses what ``history`` refuses. The mark costs a read nothing (the
# snapshot read already joins the job's row) and an append nothing (an INSERT fires
# neither trigger). The snapshots written before version 5 may sit on a record edited
# before it: all are dropped (a cache), and rebuilt by the next reader.
SQLITE_V5 = [
    "ALTER TABLE jobs ADD COLUMN edited INTEGER NOT NULL DEFAULT 0",  # edits seen
    """CREATE TRIGGER events_updated AFTER UPDATE ON events BEGIN
        UPDATE jobs SET edited = edited + 1 WHERE job_id IN (old.job_id, new.job_id);
        DELETE FROM snapshots WHERE job_id IN (old.job_id, new.job_id);
    END""",
    """CREATE TRIGGER events_deleted AFTER DELETE ON events BEGIN
        UPDATE jobs SET edited = edited + 1 WHERE job_id = old.job_id;
        DELETE FROM snapshots WHERE job_id = old.job_id;
    END""",
    "DELETE FROM snapshots",
]
PG_V5 = [
    "ALTER TABLE dispatch_jobs ADD COLUMN edited integer NOT NULL DEFAULT 0",
    """CREATE FUNCTION dispatch_events_edited() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF TG_OP = 'TRUNCATE' THEN
            UPDATE dispatch_jobs SET edited = edited + 1;
            DELETE FROM dispatch_snapshots;
            RETURN NULL;
        END IF;
        UPDATE dispatch_jobs SET edited = edited + 1 WHERE job_id = OLD.job_id;
        DELETE FROM dispatch_snapshots WHERE job_id = OLD.job_id;
        IF TG_OP = 'UPDATE' AND NEW.job_id IS DISTINCT FROM OLD.job_id THEN
            UPDATE dispatch_jobs SET edited = edited + 1 WHERE job_id = NEW.job_id;
            DELETE FROM dispatch_snapshots WHERE job_id = NEW.job_id;
        END IF;
        RETURN NULL;
    END $$""",
    "CREATE TRIGGER dispatch_events_edited AFTER UPDATE OR DELETE ON dispatch_events"
    " FOR EACH ROW EXECUTE FUNCTION dispatch_events_edited()",
    "CREATE TRIGGER dispatch_events_truncated AFTER TRUNCATE ON dispatch_events"
    " FOR EACH STATEMENT EXECUTE FUNCTION dispatch_events_edited()",
    "DELETE FROM dispatch_snapshots",
]


# Version 6 (issue 48 item 2): the cause kinds each job's committed history holds (a
# recovery's, a hold's, a release, the outcome's: base.history_causes), one row per (job,
# kind), written by the append that commits them. ``ls --cause preempted`` finds the jobs
# that were ever preempted, a recovered success among them, in one indexed lookup rather
# than a fold of every job. The step fills it from the events already stored
# (stores/causes.py ``from_bodies``); a new table, so an older build's reads are unchanged, but an
# older build's appends would not fill it: the version keeps such a build out. And each
# job's ``name_key`` (support/name_glob.natural_key), written with the row and filled by the
# step, so that a list ordered by name is in natural order (sweep-9 before sweep-10) and
# still one indexed range scan a page. And (issue 45 item 12) the submit attempts never
# resolved (stores/attempts.py), filled by the step from the events already stored, so that a
# supervisor taking a scope over finds the finished jobs it must still watch by an index.
# And (issue 48 item 10, issue 47 item 4) each supervisor's presence row per scope it
# serves: the standbys a lease does not name, and the reads each one's scheduler refuses it
# (stores/presence.py); a table of its own.
SQLITE_V6 = [
    """CREATE TABLE job_causes (
        cause  TEXT NOT NULL,  -- a CauseKind value
        job_id TEXT NOT NULL REFERENCES jobs (job_id),
        PRIMARY KEY (cause, job_id)
    ) WITHOUT ROWID""",
    "CREATE INDEX job_causes_by_job ON job_causes (job_id)",  # prune deletes by job
    "ALTER TABLE jobs ADD COLUMN name_key TEXT NOT NULL DEFAULT ''",  # filled by the step
    "CREATE INDEX jobs_by_name_key ON jobs (name_key, created_us, job_id)",
    *attempts.SQLITE_V6,
    presence.SQLITE_DDL,
]
PG_V6 = [
    """CREATE TABLE dispatch_job_causes (
        cause  text NOT NULL,
        job_id text NOT NULL REFERENCES dispatch_jobs (job_id),
        PRIMARY KEY (cause, job_id)
    )""",
    "CREATE INDEX dispatch_job_causes_by_job ON dispatch_job_causes (job_id)",
    "ALTER TABLE dispatch_jobs ADD COLUMN name_key text NOT NULL DEFAULT ''",
    "CREATE INDEX dispatch_jobs_by_name_key ON dispatch_jobs (name_key, created_us, job_id)",
    *attempts.PG_V6,
    presence.PG_DDL,
]


# Version 7 (issue 49): each job's /metrics part, a cache a cold collector reads instead of
# every record (stores/part_cache.py), and the count of jobs ever removed, which a trigger
# keeps, so that a reader that keeps every job's row notices a prune by reading one row
# (stores/removals.py). New tables and a trigger: no row is rewritten, and the cache starts
# empty. An older build's prune would not delete a job's part (the foreign key would refuse
# it): the version keeps such a build out.
SQLITE_V7 = [part_cache.SQLITE_DDL, *removals.SQLITE_V7]
PG_V7 = [part_cache.PG_DDL, *removals.PG_V7]


def name_keys(rows: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    """(name_key, job id) for each (job id, name): the version-6 step's fill."""
    return [(natural_key(name), job_id) for job_id, name in rows]


def check_version(where: str, found: object) -> int:
    """The stored schema version, or SchemaInvalid / SchemaTooNew naming the store."""
    if found is None:
        raise SchemaInvalid(f"{where}: the schema table holds no version; this is not a "
                            "usable dispatch record store (nothing was changed)")
    if isinstance(found, bool) or not isinstance(found, int):
        raise SchemaInvalid(f"{where}: the schema version {found!r} is not an integer; "
                            "this is not a usable dispatch record store (nothing was changed)")
    if found < 1:
        raise SchemaInvalid(f"{where}: the schema version {found} is not a version (they "
                            "start at 1); this is not a usable dispatch record store "
                            "(nothing was changed)")
    if found > SCHEMA_VERSION:
        raise SchemaTooNew(where, found)
    return found


def check_tables(where: str, present: Iterable[str], needed: Iterable[str]) -> None:
    missing = [t for t in needed if t not in set(present)]
    if missing:
        raise SchemaInvalid(f"{where}: table {', '.join(missing)} is missing; this is not a "
                            "usable dispatch record store (nothing was changed)")


def check_fresh(where: str, present: Iterable[str]) -> None:
    """Before creating the schema where no schema table is: refuse a database that already
    holds tables of ours (the schema table was lost) or, for a SQLite file, anyone's."""
    found = sorted(present)
    if found:
        raise SchemaInvalid(f"{where}: there is no schema table but there are tables "
                            f"({', '.join(found[:5])}); this is not a usable dispatch record "
                            "store (nothing was changed)")


def _supersedes(body: object) -> str | None:
    """The ``supersedes`` of a stored JobCreated body; None when absent or unreadable (a
    body that does not decode is refused when the record is read, not here)."""
    try:
        doc = json.loads(body if isinstance(body, str | bytes) else str(body))
    except (ValueError, TypeError):
        return None
    old = doc.get("supersedes") if isinstance(doc, dict) else None
    return old if isinstance(old, str) and old else None


def successor_links(
    created: Iterable[tuple[str, int, object]],
    first_superseded_by: Callable[[str], str | None],
) -> list[tuple[str, str]]:
    """(new job, old job) pairs to fill ``supersedes`` with, from every job's seq-1 body
    ``(job_id, created_us, body)``. Before version 2 a race could leave two jobs naming one
    old job: only one keeps the link, the one the old job's first Superseded event names
    (the successor fold reports), else the earliest created; the other keeps its record."""
    claims: dict[str, list[tuple[int, str]]] = {}
    for job_id, created_us, body in created:
        old = _supersedes(body)
        if old is not None:
            claims.setdefault(old, []).append((created_us, job_id))
    links = []
    for old, claimants in claims.items():
        claimants.sort()
        chosen = claimants[0][1]
        if len(claimants) > 1:
            named = first_superseded_by(old)
            if named in {j for _, j in claimants}:
                chosen = str(named)
        links.append((chosen, old))
    return links


def first_superseded(bodies: Iterable[object]) -> str | None:
    """The ``by`` of the first Superseded event among an old job's bodies, in seq order."""
    for body in bodies:
        try:
            doc = json.loads(body if isinstance(body, str | bytes) else str(body))
        except (ValueError, TypeError):
            continue
        if isinstance(doc, dict) and doc.get("type") == "superseded":
            by = doc.get("by")
            return by if isinstance(by, str) else None
    return None

