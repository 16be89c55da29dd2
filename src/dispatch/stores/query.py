"""One query over the jobs table for both stores: filters, an order and a keyset cursor.

``list_jobs`` (every job, by creation) and the dashboard's pages (``query_jobs``) share it.
A page is keyset-paged: the next page starts after the last row's key (the order's column,
then creation time, then id), so a page costs one indexed range scan whatever its depth.
Pure: it builds SQL text and parameters; the stores run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from dispatch.support.name_glob import is_glob, pg_regex, sqlite_glob

Order = Literal["created", "name", "backend", "job"]
ORDERS: tuple[Order, ...] = ("created", "name", "backend", "job")
# The column each order sorts by first; every order ends with (created_us, job_id).
# "name" sorts by the name's natural key (support/name_glob.natural_key: sweep-9 before
# sweep-10), a column the stores write beside the name (schema version 6).
_COLUMN: dict[Order, str] = {"created": "", "name": "name_key", "backend": "backend",
                             "job": "job_id"}
Key = tuple[str | int, ...]


@dataclass(frozen=True)
class JobQuery:
    """Which jobs, in which order, from where. ``search``: a name containing it (any case)
    or an id starting with it. ``outcome``: finished jobs whose committed outcome is that
    state (State value), and those finished before the store kept it (the caller looks).
    ``since_us``: created at or after. ``after``: the key of the last row of the previous
    page (as ``row_key`` makes it; for the name order, the name's ``natural_key``).
    ``terminal``: only finished (True) or unfinished (False) jobs. ``name_glob``: a name
    pattern (support/name_glob.py; one without wildcards is an exact name). ``cause``: jobs
    whose committed history holds that cause kind (the causes table, schema version 6), and
    every unfinished job (whose shown cause may be one not yet committed: the caller
    looks)."""

    terminal: bool | None = None
    name: str | None = None
    name_glob: str | None = None  # a shell-style name pattern (support/name_glob.py)
    scope: str | None = None
    backend: str | None = None
    search: str | None = None
    outcome: str | None = None  # the committed outcome's state (a finished job's state)
    since_us: int | None = None  # created at or after (base.sort_key_us)
    cause: str | None = None  # a CauseKind value the history holds (or an unfinished job)
    order: Order = "created"
    descending: bool = False
    after: Key | None = None
    limit: int | None = None


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def query_sql(q: JobQuery, table: str, mark: str) -> tuple[str, list[object]]:
    """The SELECT for ``q`` over ``table``, with ``mark`` as the placeholder (``?``/``%s``);
    rows as the stores' ``_row`` reads them."""
    where, params = _filters(q, table, mark)
    columns = [c for c in (_COLUMN[q.order], "created_us", "job_id") if c]
    if q.after is not None:
        if len(q.after) != len(columns):
            raise ValueError(f"a cursor of {len(columns)} values was expected")
        op = "<" if q.descending else ">"
        where.append(f"({', '.join(columns)}) {op} ({', '.join([mark] * len(columns))})")
        params += list(q.after)
    sql = f"SELECT job_id, name, backend, terminal, version, created_at, scope FROM {table}"
    if where:
        sql += " WHERE " + " AND ".join(where)
    direction = " DESC" if q.descending else ""
    sql += " ORDER BY " + ", ".join(c + direction for c in columns)
    if q.limit is not None:
        sql += f" LIMIT {int(q.limit)}"
    return sql, params


def count_sql(q: JobQuery, table: str, mark: str) -> tuple[str, list[object]]:
    """``RecordStore.count_jobs``: (outcome, count) rows of the jobs ``q``'s filters keep
    (its order, cursor and limit ignored), one per outcome (NULL: unfinished, or finished
    before the store kept outcomes), and ('', the unfinished ones). Each part is a scan of
    an index (the outcome's, the terminal flag's); no record is read. ``count_rows`` reads
    them."""
    where, params = _filters(q, table, mark)
    live = "terminal = 0" if mark == "?" else "NOT terminal"
    keep = " AND ".join(where) if where else "TRUE"
    sql = (f"SELECT outcome, count(*) FROM {table} WHERE {keep} GROUP BY outcome"
           f" UNION ALL SELECT '', count(*) FROM {table} WHERE {keep} AND {live}")
    return sql, params + params


def count_rows(rows: list[tuple[str | None, int]]) -> dict[str | None, int]:
    """``count_sql``'s rows as ``count_jobs`` answers: outcome -> jobs, '' for the
    unfinished ones, None for those finished before the store kept outcomes; no zeros."""
    found = {o: int(n) for o, n in rows}
    found[None] = found.get(None, 0) - found.get("", 0)
    return {o: n for o, n in found.items() if n}


def _filters(q: JobQuery, table: str, mark: str) -> tuple[list[str], list[object]]:
    where: list[str] = []
    params: list[object] = []
    if q.terminal is not None:
        if mark == "?":  # SQLite keeps booleans as 0/1
            where.append(f"terminal = {int(q.terminal)}")
        else:
            where.append("terminal" if q.terminal else "NOT terminal")
    if q.since_us is not None:
        where.append(f"created_us >= {mark}")
        params.append(int(q.since_us))
    for column, value in (("name", q.name), ("scope", q.scope), ("backend", q.backend)):
        if value is not None:
            where.append(f"{column} = {mark}")
            params.append(value)
    if q.name_glob is not None:
        if not is_glob(q.name_glob):
            where.append(f"name = {mark}")
            params.append(q.name_glob)
        elif mark == "?":
            where.append(f"name GLOB {mark}")
            params.append(sqlite_glob(q.name_glob))
        else:
            where.append(f"name ~ {mark}")
            params.append(pg_regex(q.name_glob))
    if q.outcome is not None:  # NULL: finished before schema 4; the caller reads those
        where.append(f"(outcome = {mark} OR (outcome IS NULL AND "
                     + ("terminal = 1))" if mark == "?" else "terminal))"))
        params.append(q.outcome)
    if q.cause is not None:
        causes = {"jobs": "job_causes", "dispatch_jobs": "dispatch_job_causes"}[table]
        live = "terminal = 0" if mark == "?" else "NOT terminal"
        where.append(f"({live} OR job_id IN (SELECT job_id FROM {causes} WHERE cause = {mark}))")
        params.append(q.cause)
    if q.search:
        where.append(f"(lower(name) LIKE {mark} ESCAPE '\\' OR lower(job_id) LIKE {mark} "
                     "ESCAPE '\\')")
        text = _like(q.search.lower())
        params += [f"%{text}%", f"{text}%"]
    return where, params


def stamp_sql(table: str) -> str:
    """A change marker for the whole table: the number of jobs and the sum of their versions
    and of their edit counts (both only grow, so any new event or job changes it, and so
    does an event edited in place: stores/schema.py, version 5)."""
    return f"SELECT count(*), coalesce(sum(version + edited), 0) FROM {table}"


def matches_sql(table: str, mark: str, ref: str, limit: int, min_prefix: int
                ) -> tuple[str, list[object]]:
    """``RecordStore.matches``: (job_id, name, created_at, terminal, how) rows. Each way a
    reference can match is its own indexed lookup (the id, the name, an id prefix as an
    index range: SQLite compares text bytewise, PostgreSQL's LIKE uses its pattern index),
    so finding a job costs the same among a million as among ten."""
    prefix = len(ref) >= min_prefix
    sql = (f"SELECT j.job_id, j.name, j.created_at, j.terminal, CASE WHEN j.job_id = {mark}"
           f" THEN 'id' WHEN j.name = {mark} THEN 'name' ELSE 'prefix' END FROM {table} j"
           f" WHERE j.job_id IN (SELECT job_id FROM {table} WHERE job_id = {mark}"
           f" UNION SELECT n.job_id FROM {table} n WHERE n.name = {mark} AND NOT EXISTS"
           f" (SELECT 1 FROM {table} s WHERE s.supersedes = n.job_id)")
    params: list[object] = [ref, ref, ref, ref]
    if prefix and mark == "%s":
        sql += f" UNION SELECT job_id FROM {table} WHERE job_id LIKE {mark} ESCAPE '\\'"
        params.append(_like(ref) + "%")
    elif prefix:  # [ref, the next string after every string starting with ref)
        sql += (f" UNION SELECT job_id FROM {table} WHERE job_id >= {mark}"
                f" AND job_id < {mark} AND substr(job_id, 1, {len(ref)}) = {mark}")
        upper = ref[:-1] + chr(min(ord(ref[-1]) + 1, 0x10FFFF))
        params += [ref, upper if upper != ref else ref + "\U0010ffff", ref]
    sql += f") ORDER BY j.created_us, j.job_id LIMIT {int(limit)}"
    return sql, params
