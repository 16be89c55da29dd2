"""One query over the jobs table for both stores: filters, an order and a keyset cursor.

``list_jobs`` (every job, by creation) and the dashboard's pages (``query_jobs``) share it.
A page is keyset-paged: the next page starts after the last row's key (the order's column,
then creation time, then id), so a page costs one indexed range scan whatever its depth.
Pure: it builds SQL text and parameters; the stores run it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Order = Literal["created", "name", "backend", "job"]
ORDERS: tuple[Order, ...] = ("created", "name", "backend", "job")
# The column each order sorts by first; every order ends with (created_us, job_id).
_COLUMN: dict[Order, str] = {"created": "", "name": "name", "backend": "backend",
                             "job": "job_id"}
Key = tuple[str | int, ...]


@dataclass(frozen=True)
class JobQuery:
    """Which jobs, in which order, from where. ``search``: a name containing it (any case)
    or an id starting with it. ``after``: the key of the last row of the previous page (as
    ``row_key`` makes it). ``terminal``: only finished (True) or unfinished (False) jobs."""

    terminal: bool | None = None
    name: str | None = None
    scope: str | None = None
    backend: str | None = None
    search: str | None = None
    order: Order = "created"
    descending: bool = False
    after: Key | None = None
    limit: int | None = None


def _like(text: str) -> str:
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def query_sql(q: JobQuery, table: str, mark: str) -> tuple[str, list[object]]:
    """The SELECT for ``q`` over ``table``, with ``mark`` as the placeholder (``?``/``%s``);
    rows as the stores' ``_row`` reads them."""
    where: list[str] = []
    params: list[object] = []
    if q.terminal is not None:
        if mark == "?":  # SQLite keeps booleans as 0/1
            where.append(f"terminal = {int(q.terminal)}")
        else:
            where.append("terminal" if q.terminal else "NOT terminal")
    for column, value in (("name", q.name), ("scope", q.scope), ("backend", q.backend)):
        if value is not None:
            where.append(f"{column} = {mark}")
            params.append(value)
    if q.search:
        where.append(f"(lower(name) LIKE {mark} ESCAPE '\\' OR lower(job_id) LIKE {mark} "
                     "ESCAPE '\\')")
        text = _like(q.search.lower())
        params += [f"%{text}%", f"{text}%"]
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


def stamp_sql(table: str) -> str:
    """A change marker for the whole table: the number of jobs and the sum of their versions
    (versions only grow, so any new event or job changes it)."""
    return f"SELECT count(*), coalesce(sum(version), 0) FROM {table}"
