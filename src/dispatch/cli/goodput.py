"""`dispatch goodput`: how much allocated time was useful, and what each cause cost (G1-G4),
from the record alone."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

import click

from dispatch.cli.common import emit_json, handle_errors, json_option, open_service, store_option
from dispatch.core.goodput import By, JobTime, Split, split
from dispatch.support.clock import utcnow

if TYPE_CHECKING:
    from dispatch.errors import DispatchError
    from dispatch.service import Service


@click.command()
@click.argument("job", required=False)
@click.option("--since", default=None, metavar="SPAN",
              help="Only the time within this span before now (7d, 12h, 30m, 90s, 2w).")
@click.option("--by", "by", type=click.Choice([b.value for b in By]), default="cause",
              show_default=True, help="Fleet: one split per job, backend or user; cause: "
                                      "one split for all, by phase and cause.")
@store_option
@json_option
@handle_errors
def goodput(job: str | None, since: str | None, by: str, store_url: str | None,
            as_json: bool) -> None:
    """Node-time per phase (queued, running, recovering, held, stopping) and cause, lost
    work since the last checkpoint, and goodput = (running - lost work) over time to result
    (wall time x nodes, every phase) and over allocated node-time (running, stopping).
    --by job: one row a job.

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
        elif job is not None:
            job_id = service.resolve(job)
            found, errors = job_times(service.store, [job_id], now)
            for err in errors.values():
                raise err
            key = "" if By(by) is By.CAUSE else job_id
            parts = groups(found, By.JOB if key else None, now, span) if span else {
                key: split(found[0])}
        else:
            found, errors = fleet_times(service.store, now)
            parts = groups(found, By(by), now, span)
    if as_json:
        names = {jt.job_id: jt.name for jt in found}
        emit_json({"since": since, "by": by, "at": now.isoformat(),
                   "groups": [{"key": k, **({"name": names.get(k, "")} if by == "job" else {}),
                               **split_json(v)} for k, v in sorted(parts.items())],
                   "unreadable": {k: str(v) for k, v in sorted(errors.items())}})
        return
    if By(by) is By.JOB and job is None:
        _print_jobs(parts, {jt.job_id: jt.name for jt in found})
    else:
        _print(parts, By(by))
    for job_id, err in sorted(errors.items()):
        click.echo(f"not counted: {job_id}: {err}", err=True)


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


def _print(parts: dict[str, Split], by: By) -> None:
    from rich.table import Table

    from dispatch.cli import render
    from dispatch.service.goodput import goodput_line, node_time_text

    if not parts:
        click.echo("no job has time in that span")
        return
    for key, s in sorted(parts.items()):
        title = f"{by.value} {key}" if key else "all jobs"
        table = Table(title=f"{title}: {s.jobs} job(s)", title_justify="left")
        for col in ("phase", "cause", "time", "node-time", "share"):
            table.add_column(col, justify="left" if col in ("phase", "cause") else "right")
        for (phase, cause), v in sorted(s.parts.items()):
            nv = s.node_parts[(phase, cause)]
            share = nv / s.node_wall if s.node_wall else 0.0
            table.add_row(phase.value, cause.value,
                          node_time_text(v.total_seconds(), nodes=False),
                          node_time_text(nv.total_seconds()), f"{share:.0%}")
        for cause, v in sorted(s.lost.items()):
            nv = s.node_lost[cause]
            table.add_row("lost work", cause.value, node_time_text(v.total_seconds(), nodes=False),
                          node_time_text(nv.total_seconds()),
                          f"{nv / s.node_wall:.0%}" if s.node_wall else "")
        render.out().print(table)
        click.echo(goodput_line(s))


def _print_jobs(parts: dict[str, Split], names: dict[str, str]) -> None:
    """``--by job``: one row a job, with its name (cut first when the terminal is narrow);
    both denominators side by side."""
    from rich.table import Table

    from dispatch.cli import render
    from dispatch.service.goodput import node_time_text, share_text

    if not parts:
        click.echo("no job has time in that span")
        return
    table = Table(title=f"goodput by job ({len(parts)} job(s))", title_justify="left",
                  box=None, pad_edge=False, padding=(0, 1))
    table.add_column("job", no_wrap=True)
    table.add_column("name", overflow="ellipsis", no_wrap=True, min_width=4)
    for col in ("to result", "allocated", "lost work", "goodput", "alloc."):
        table.add_column(col, justify="right", no_wrap=True)
    for key, s in sorted(parts.items(), key=lambda kv: (names.get(kv[0], ""), kv[0])):
        table.add_row(key, names.get(key, ""), node_time_text(s.node_wall.total_seconds()),
                      node_time_text(s.allocated().total_seconds()),
                      node_time_text(s.lost_total().total_seconds()),
                      share_text(s.goodput()), share_text(s.allocated_goodput()))
    render.out().print(table)
    click.echo("goodput: of time to result (wall time x nodes, every phase);")
    click.echo("alloc.: of allocated node-time (running, stopping: never queued or held)")


COMMANDS = (goodput,)
