"""Commands on many jobs at once (issue 36 item 6): ``cancel`` of several jobs (ids, names, or
the unfinished jobs a name pattern or a state selects) and ``prune``, which forgets old
finished jobs whole (a dry run unless ``--yes``; docs/semantics.md)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import click

from dispatch.cli import render
from dispatch.cli.common import emit_json, handle_errors, json_option, open_service, store_option
from dispatch.core.model import State
from dispatch.errors import BadInput, DispatchError
from dispatch.service.views import status_json
from dispatch.support.clock import utcnow

if TYPE_CHECKING:
    from dispatch.service.views import JobView

LIVE_STATES = [s.value for s in State if not s.terminal]


def selected(views: Sequence[JobView], pattern: str | None, state: State | None) -> list[str]:
    """The unfinished jobs whose name matches ``pattern`` (support/name_glob.py: a name or
    a shell-style glob, ``sweep-*``) and whose state is ``state`` (each when given), in
    ``views``' order."""
    from dispatch.support.name_glob import glob_matches

    out = []
    for v in views:
        s = v.status
        if s is None or s.state.terminal:
            continue
        if pattern is not None and not glob_matches(pattern, s.name):
            continue
        if state is not None and s.state is not state:
            continue
        out.append(s.job)
    return out


@click.command()
@click.argument("jobs", nargs=-1, metavar="[JOB]...")
@click.option("--name", "pattern", default=None, metavar="PATTERN",
              help="Every unfinished job whose name matches PATTERN (a shell-style glob: "
                   "'sweep-*', quoted so the shell leaves it alone).")
@click.option("--state", type=click.Choice(LIVE_STATES), default=None,
              help="Every unfinished job in this state (with --name: both must hold).")
@store_option
@json_option
@handle_errors
def cancel(jobs: tuple[str, ...], pattern: str | None, state: str | None,
           store_url: str | None, as_json: bool) -> None:
    """Cancel jobs: the supervisor cancels their objects and commits cancelled.

    JOB: an id, a unique id prefix or a name; several may be given. Or select the unfinished
    jobs with --name and/or --state. Each job is requested on its own: one that cannot be
    cancelled (finished, not found) is said and the others go on; the exit code is the
    first failure's."""
    from dispatch.cli.jobs import show
    from dispatch.cli.notes import unsupervised_notes

    if jobs and (pattern is not None or state is not None):
        raise BadInput("name the jobs (JOB...) or select them (--name, --state), not both")
    if not jobs and pattern is None and state is None:
        raise BadInput("cancel what? name a JOB (several may be given), or select with "
                       "--name PATTERN and/or --state STATE")
    from dispatch.service.names import check_pattern, match_note

    if pattern is not None:
        check_pattern(pattern)
    single = len(jobs) == 1
    with open_service(store_url) as service:
        refs = list(jobs) or selected(service.jobs(name=pattern), pattern,
                                      State(state) if state else None)
        if pattern is not None:  # how many the pattern names, finished ones too
            click.echo(f"{match_note(service, pattern)}; {len(refs)} unfinished"
                       + (f" and {state}" if state else ""), err=True)
        if not refs:
            click.echo("no unfinished job matches; nothing to cancel", err=True)
            if as_json:
                emit_json([])
            return
        done: list[JobView] = []
        failures: list[DispatchError] = []
        for ref in refs:
            try:
                view = service.cancel(ref)
            except DispatchError as err:
                if single:
                    raise
                failures.append(err)
                click.echo(f"error: {render.visible(ref)}: {render.visible(str(err))}",
                           err=True)
                continue
            done.append(view)
            if single:
                if not as_json:
                    click.echo(f"{view.job}: cancel requested; the supervisor carries it out")
                show(view, as_json)
            elif not as_json:
                name = view.status.name if view.status is not None else "?"
                click.echo(render.visible(f"{view.job} {name}: cancel requested"))
        if as_json and not single:
            emit_json([status_json(v) for v in done])
        if not as_json:
            if not single and done:
                click.echo(f"{len(done)} job{'s' if len(done) != 1 else ''}: cancel "
                           "requested; the supervisor carries it out", err=True)
            for note in unsupervised_notes(service, done):
                click.echo(note, err=True)
    if failures:
        sys.exit(failures[0].exit_code)


@click.command()
@click.option("--before", "age", required=True, metavar="AGE|TIME",
              help="Forget the finished jobs created before this: an age (30d, 12h, 1w) or "
                   "an ISO 8601 time (UTC unless it says).")
@click.option("--yes", is_flag=True, help="Remove them; without it, only say which would go.")
@store_option
@json_option
@handle_errors
def prune(age: str, yes: bool, store_url: str | None, as_json: bool) -> None:
    """Forget old finished jobs: each goes whole (its every event, with its row) and all in
    one transaction; a supersede chain goes only when every job of it is finished and old
    enough. A dry run (which jobs, and how many) unless --yes."""
    from dispatch.service.pages import parse_since
    from dispatch.stores.query import JobQuery

    before_us = parse_since(age, utcnow(), option="--before")
    with open_service(store_url) as service:
        rows = {r.job_id: r for r in service.store.query_jobs(JobQuery(terminal=True))}
        ids = service.store.prune(before_us, act=yes)
    doc: dict[str, Any] = {"removed" if yes else "would_remove": ids, "count": len(ids)}
    if as_json:
        emit_json(doc)
        return
    for job_id in ids:
        r = rows.get(job_id)
        created = render.when(r.created_at) if r is not None else "?"
        name = r.name if r is not None else "?"
        click.echo(render.visible(f"{job_id}  {name}  created {created}"))
    n = f"{len(ids)} finished job{'s' if len(ids) != 1 else ''}"
    if yes:
        click.echo(f"{n} removed", err=True)
    elif ids:
        click.echo(f"{n} would be removed (a dry run): `dispatch prune --before {age} --yes` "
                   "removes them", err=True)
    else:
        click.echo(f"no finished job was created before {age}", err=True)


COMMANDS = (cancel, prune)
