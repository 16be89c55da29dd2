"""`dispatch goodput`: how much allocated time was useful, and what each cause cost (G1-G4),
from the record alone."""

from __future__ import annotations

import click

from dispatch.cli.common import emit_json, handle_errors, json_option, open_service, store_option
from dispatch.core.goodput import By, Split, split
from dispatch.support.clock import utcnow


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
    """Node-hours per phase (queued, running, recovering, held, stopping) and cause, lost
    work since the last checkpoint, and goodput = (running - lost work) / wall time.

    JOB: one job (id or unique name); without it, every job in the store."""
    from dispatch.service.goodput import fleet_times, groups, job_times, span_of, split_json

    span = span_of(since) if since is not None else None
    now = utcnow()
    with open_service(store_url) as service:
        if job is not None:
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
        emit_json({"since": since, "by": by, "at": now.isoformat(),
                   "groups": [{"key": k, **split_json(v)} for k, v in sorted(parts.items())],
                   "unreadable": {k: str(v) for k, v in sorted(errors.items())}})
        return
    _print(parts, By(by))
    for job_id, err in sorted(errors.items()):
        click.echo(f"not counted: {job_id}: {err}", err=True)


def _print(parts: dict[str, Split], by: By) -> None:
    from rich.table import Table

    from dispatch.cli import render
    from dispatch.service.goodput import goodput_line, hours

    if not parts:
        click.echo("no job has time in that span")
        return
    for key, s in sorted(parts.items()):
        title = f"{by.value} {key}" if key else "all jobs"
        table = Table(title=f"{title}: {s.jobs} job(s)", title_justify="left")
        for col in ("phase", "cause", "hours", "node-hours", "share"):
            table.add_column(col, justify="right" if col in ("hours", "node-hours", "share")
                             else "left")
        for (phase, cause), v in sorted(s.parts.items()):
            nv = s.node_parts[(phase, cause)]
            share = nv / s.node_wall if s.node_wall else 0.0
            table.add_row(phase.value, cause.value, f"{hours(v):.2f}", f"{hours(nv):.2f}",
                          f"{share:.0%}")
        for cause, v in sorted(s.lost.items()):
            nv = s.node_lost[cause]
            table.add_row("lost work", cause.value, f"{hours(v):.2f}", f"{hours(nv):.2f}",
                          f"{nv / s.node_wall:.0%}" if s.node_wall else "")
        render.out().print(table)
        click.echo(goodput_line(s))


COMMANDS = (goodput,)
