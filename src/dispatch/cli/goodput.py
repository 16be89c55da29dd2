"""`dispatch goodput`: how much allocated time was useful, and what each cause cost (G1-G4),
from the record alone."""

from __future__ import annotations

import shlex
from datetime import datetime
from typing import TYPE_CHECKING

import click

from dispatch.cli.common import (
    command_as_given,
    emit_json,
    handle_errors,
    json_option,
    open_service,
    store_option,
)
from dispatch.core.goodput import ZERO, By, JobTime, Phase, Split, split
from dispatch.support.clock import utcnow

if TYPE_CHECKING:
    from dispatch.errors import DispatchError
    from dispatch.service import Service


# --sort for the rows of --by job (issue 48: 980 rows, alphabetical): the key of each, and
# the order said when rows are left out.
SORTS = {"time": "the largest time to result first", "badput": "the largest badput first",
         "goodput": "the lowest goodput first", "name": "by name"}
SHOWN = 50  # --by job on a terminal or a pipe, unless --limit says otherwise


@click.command()
@click.argument("job", required=False)
@click.option("--since", default=None, metavar="SPAN",
              help="Only the time within this span before now (7d, 12h, 30m, 90s, 2w).")
@click.option("--by", "by", type=click.Choice([b.value for b in By]), default="cause",
              show_default=True, help="Fleet: one split per job, backend or user; cause: "
                                      "one split for all, by phase and cause.")
@click.option("--sort", "sort", type=click.Choice(list(SORTS)), default=None,
              help="--by job: the rows' order (default time: the largest time to result "
                   "first; goodput: the lowest first).")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help=f"--by job: at most this many rows (default {SHOWN}; --json: all).")
@store_option
@json_option
@handle_errors
def goodput(job: str | None, since: str | None, by: str, sort: str | None, limit: int | None,
            store_url: str | None, as_json: bool) -> None:
    """Node-time per phase (queued, running, recovering, held, stopping, settling) and cause,
    lost work since the last checkpoint, and goodput = (running - lost work) over time to
    result (wall time x nodes; held time is time, never node-time) and over allocated
    node-time (running, stopping). --by job: one row a job.

    JOB: one job (id or unique name), or the jobs whose name matches a shell-style pattern
    ('sweep-*', quoted; counted as the fleet is: --by); without it, every job in the store."""
    from dispatch.service.goodput import fleet_times, groups, job_times, span_of, split_json
    from dispatch.support.name_glob import is_glob

    span = span_of(since) if since is not None else None
    now = utcnow()
    with open_service(store_url) as service:
        if job is not None and is_glob(job):
            found, errors = _matching_times(service, job, now)
            parts = groups(found, By(by), now, span)
            scope = f"jobs named {shlex.quote(job)}"
        elif job is not None:
            job_id = service.resolve(job)
            found, errors = job_times(service.store, [job_id], now)
            for err in errors.values():
                raise err
            key = "" if By(by) is By.CAUSE else job_id
            parts = groups(found, By.JOB if key else None, now, span) if span else {
                key: split(found[0])}
            scope = f"job {job_id}" + (f" ({found[0].name})" if found[0].name else "")
        else:
            found, errors = fleet_times(service.store, now)
            parts = groups(found, By(by), now, span)
            scope = "all jobs"
    names = {jt.job_id: jt.name for jt in found}
    order = sorted(parts)
    if By(by) is By.JOB and (sort is not None or not as_json):
        order = sort_jobs(parts, names, sort or "time")
    shown = order[:limit] if limit is not None or as_json else order[:SHOWN]
    if as_json:
        emit_json({"since": since, "by": by, "at": now.isoformat(),
                   "groups": [{"key": k, **({"name": names.get(k, "")} if by == "job" else {}),
                               **split_json(parts[k])} for k in shown],
                   "unreadable": {k: str(v) for k, v in sorted(errors.items())}})
        return
    if By(by) is By.JOB and (job is None or is_glob(job)):
        _print_jobs(parts, names, shown, scope)
        if len(shown) < len(order):
            rest = command_as_given("dispatch goodput", {"--limit": str(len(order))})
            click.echo(f"{len(shown)} of {len(order)} jobs shown, {SORTS[sort or 'time']}; "
                       f"all of them: {rest}", err=True)
    else:
        _print(parts, By(by), scope)
    for job_id, err in sorted(errors.items()):
        click.echo(f"not counted: {job_id}: {err}", err=True)


def sort_jobs(parts: dict[str, Split], names: dict[str, str], sort: str) -> list[str]:
    """The job ids of ``parts`` in the order ``sort`` names (ties by name, then id)."""
    def key(k: str) -> tuple[float | str, ...]:
        s, tie = parts[k], (names.get(k, ""), k)
        if sort == "time":
            return (-s.node_wall.total_seconds(), *tie)
        if sort == "badput":
            return (-sum(s.badput().values(), ZERO).total_seconds(), *tie)
        if sort == "goodput":
            g = s.goodput()
            return (2.0 if g is None else g, *tie)
        return tie
    return sorted(parts, key=key)


def _matching_times(service: Service, pattern: str, now: datetime
                    ) -> tuple[list[JobTime], dict[str, DispatchError]]:
    """The times of the jobs whose name matches ``pattern``, the count said on stderr;
    NotFound (with what would match) when none does."""
    from dispatch.errors import NotFound
    from dispatch.service.goodput import job_times
    from dispatch.service.names import match_note
    from dispatch.stores.query import JobQuery

    rows = service.store.query_jobs(JobQuery(name_glob=pattern))
    note = match_note(service, pattern, option="")
    if not rows:
        raise NotFound(note)
    click.echo(note, err=True)
    return job_times(service.store, [r.job_id for r in rows], now)


def _print(parts: dict[str, Split], by: By, scope: str) -> None:
    from rich.table import Table

    from dispatch.cli import render
    from dispatch.service.goodput import goodput_line, node_time_text

    if not parts:
        click.echo("no job has time in that span")
        return
    for key, s in sorted(parts.items()):
        # issue 48: one job is headed by its id and name, never "all jobs: 1 job(s)"
        title = f"{scope}, {by.value} {key}" if key and by is not By.JOB else scope
        if s.jobs > 1 or not scope.startswith("job "):
            title += f": {s.jobs} job(s)"
        table = Table(title=title, title_justify="left")
        for col in ("phase", "cause", "time", "node-time", "share"):
            table.add_column(col, justify="left" if col in ("phase", "cause") else "right")
        for (phase, cause), v in sorted(s.parts.items()):
            nv = s.node_parts[(phase, cause)]
            share = nv / s.node_wall if s.node_wall else 0.0
            held = phase is Phase.HELD  # waiting for a person: time, never node-time
            table.add_row(phase.value, cause.value,
                          node_time_text(v.total_seconds(), nodes=False),
                          "-" if held else node_time_text(nv.total_seconds()),
                          "-" if held else f"{share:.0%}")
        for cause, v in sorted(s.lost.items()):
            nv = s.node_lost[cause]
            table.add_row("lost work", cause.value, node_time_text(v.total_seconds(), nodes=False),
                          node_time_text(nv.total_seconds()),
                          f"{nv / s.node_wall:.0%}" if s.node_wall else "")
        render.out().print(table)
        click.echo(goodput_line(s))


def _print_jobs(parts: dict[str, Split], names: dict[str, str], order: list[str],
                scope: str) -> None:
    """``--by job``: one row a job, in ``order``, with its name; both denominators side by
    side. Ids, figures and headers are never cut (issue 48: an id that is cut cannot be
    pasted): the name takes the width left, and is left out when none is."""
    from rich.cells import cell_len
    from rich.table import Table

    from dispatch.cli import render
    from dispatch.service.goodput import node_time_text, share_text

    if not parts:
        click.echo("no job has time in that span")
        return
    heads = ("job", "to result", "allocated", "lost work", "goodput", "alloc.")
    rows = [(key, node_time_text(s.node_wall.total_seconds()),
             node_time_text(s.allocated().total_seconds()),
             node_time_text(s.lost_total().total_seconds()),
             share_text(s.goodput()), share_text(s.allocated_goodput()))
            for key in order for s in (parts[key],)]
    widths = [max(cell_len(r[i]) for r in (heads, *rows)) for i in range(len(heads))]
    console = render.out()
    name_width = max(cell_len(render.visible(names.get(k, ""))) for k in order)
    room = console.width - sum(widths) - len(widths)  # one space after each other column
    show_name = not console.is_terminal or room >= 4
    table = Table(title=f"goodput by job, {scope} ({len(parts)} job(s))", title_justify="left",
                  box=None, pad_edge=False, padding=(0, 1, 0, 0))
    table.add_column(heads[0], no_wrap=True, min_width=widths[0])
    if show_name:
        table.add_column("name", overflow="ellipsis", no_wrap=True,
                         max_width=room if console.is_terminal else None,
                         min_width=min(4, max(name_width, 4)))
    for head, w in zip(heads[1:], widths[1:], strict=True):
        table.add_column(head, justify="right", no_wrap=True, min_width=w)
    for row in rows:
        name = [render.visible(names.get(row[0], ""))] if show_name else []
        table.add_row(row[0], *name, *row[1:])
    console.print(table)
    click.echo("goodput: of time to result (wall time x nodes, every phase);")
    click.echo("alloc.: of allocated node-time (running, stopping: the phases that hold "
               "nodes)")


COMMANDS = (goodput,)
