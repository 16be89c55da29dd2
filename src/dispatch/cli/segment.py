"""`dispatch segment check|mark|clear|list`: segment-health decisions.

``check`` needs no store (it runs inside the allocation: see ``segment_health.cli``);
mark / clear record who, why and when in the job's record and write the artifact.
"""

from __future__ import annotations

import json

import click

from dispatch.cli.common import handle_errors, json_option, open_service, store_option
from dispatch.errors import BadInput
from dispatch.segment_health.cli import segment
from dispatch.segment_health.commands import SegmentCommandError, one_line


@segment.command("mark")
@click.argument("job")
@click.option("--task", default=None, help="Array task id (default: the job's own unit).")
@click.option("--reason", required=True, help="Why the unit is unavailable.")
@store_option
@handle_errors
def mark_cmd(job: str, task: str | None, reason: str, store_url: str | None) -> None:
    """Mark the job's allocation unit unavailable for the next rendezvous."""
    with open_service(store_url) as service:
        job_id, path = service.segment_mark(job, task, reason)
    click.echo(f"{job_id}: published {path}")


@segment.command("clear")
@click.argument("job")
@click.option("--task", default=None, help="Array task id (default: the job's own unit).")
@click.option("--reason", default="", help="Why the unit may be used again.")
@store_option
@handle_errors
def clear_cmd(job: str, task: str | None, reason: str, store_url: str | None) -> None:
    """Remove the decision: the unit may join rendezvous again."""
    with open_service(store_url) as service:
        job_id, removed = service.segment_clear(job, task, reason)
    click.echo(f"{job_id}: " + ("cleared" if removed else "nothing was published"))


@segment.command("list")
@click.argument("job", required=False)
@store_option
@json_option
@handle_errors
def list_cmd(job: str | None, store_url: str | None, as_json: bool) -> None:
    """Decisions published for a job (or for every job with a decision directory)."""
    with open_service(store_url) as service:
        try:
            rows = service.segment_list(job)
        except SegmentCommandError as e:
            raise BadInput(str(e)) from None
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no segment health decisions")
    for r in rows:
        click.echo(f"{r['job']}  unit {r['unit_job_id']}.{r['task_id']}  {r['path']}  "
                   f"{one_line(str(r['reason'])) if r['reason'] else '(not in the record)'}")


COMMANDS = (segment,)
