"""The read commands that list and follow: ls, watch, history, logs. Each reads the record
(and the job's output) through the service and renders it; nothing here writes."""

from __future__ import annotations

import shlex
import sys
import time
from typing import TYPE_CHECKING

import click

from dispatch.cli import render
from dispatch.cli.common import (
    SECONDS,
    command_as_given,
    emit_json,
    handle_errors,
    json_option,
    open_service,
    store_option,
)
from dispatch.core.model import CauseKind, State
from dispatch.errors import EXIT_CANCELLED
from dispatch.service.views import cause_text, history_json, status_json
from dispatch.support.clock import utcnow

if TYPE_CHECKING:
    from dispatch.core.record import Job

PLAIN_HELP = ("Tab-separated lines (a header, then one line per job), for scripts; on a "
              "pipe the table is never cut or wrapped either way.")


STATES = ["live", *(s.value for s in State)]
NAME_HELP = ("Only jobs whose name matches PATTERN: a name, or a shell-style pattern "
             "('sweep-*', 'sweep-1?', quoted so the shell leaves it alone); how many jobs "
             "match is said on stderr.")


@click.command("ls")
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs.")
@click.option("--name", "name", default=None, metavar="PATTERN", help=NAME_HELP)
@click.option("--state", type=click.Choice(STATES), default=None,
              help="Only jobs in this state (a finished state implies --all; live: every "
                   "unfinished job), as the HTTP API's state=.")
@click.option("--cause", type=click.Choice([c.value for c in CauseKind]), default=None,
              help="Only jobs that had this cause: their own, one they recovered from, or "
                   "any in their committed history (a success after a preemption is found "
                   "by --cause preempted), as the HTTP API's cause=; implies --all.")
@click.option("--backend", default=None, help="Only jobs of this backend.")
@click.option("--since", default=None, metavar="TIME",
              help="Only jobs created at or after TIME: ISO 8601 (UTC unless it says), or an "
                   "age (90m, 2h, 30d, 1w).")
@click.option("--limit", type=click.IntRange(min=1), default=100,
              show_default=True, help="At most this many jobs: the newest.")
@click.option("--before", default=None, metavar="CURSOR",
              help="The page of older jobs that the previous page named.")
@click.option("--plain", is_flag=True, help=PLAIN_HELP)
@store_option
@json_option
@handle_errors
def ls(show_all: bool, name: str | None, state: str | None, cause: str | None,
       backend: str | None, since: str | None, limit: int, before: str | None, plain: bool,
       store_url: str | None, as_json: bool) -> None:
    """Jobs: state, cause, submissions, budget used, age, the application's error. The
    newest --limit jobs, oldest first; when there are older ones, how to see them is said on
    stderr, and so are the finished jobs a bare `ls` hides and the jobs no supervisor
    serves."""
    from dispatch.cli.notes import hidden_note, unsupervised_notes
    from dispatch.service.names import check_pattern, match_note
    from dispatch.service.pages import ls_page, parse_cursor, parse_since

    now = utcnow()
    live = state == "live"
    since_us = parse_since(since, now) if since is not None else None
    if name is not None:
        check_pattern(name)
    with open_service(store_url) as service:
        page = ls_page(service, finished=show_all,
                       state=State(state) if state and not live else None, live=live,
                       cause=CauseKind(cause) if cause else None, backend=backend,
                       name=name, since_us=since_us, limit=limit,
                       before=parse_cursor(before) if before else None)
        notes = [] if as_json else unsupervised_notes(service, page.jobs)
        if name is not None and not as_json:
            notes.insert(0, match_note(service, name, len(page.jobs)))
        if not (as_json or show_all or state or cause or before):
            filters = [f"--{k} {shlex.quote(v)}" for k, v in (
                ("name", name), ("backend", backend), ("since", since)) if v is not None]
            notes += hidden_note(service, backend=backend, name=name, since_us=since_us,
                                 filters=filters)
    if as_json:
        emit_json([status_json(v) for v in page.jobs])
    else:
        render.print_table(page.jobs, now, plain=plain)
    if page.older is not None:
        click.echo(f"older jobs: {command_as_given('dispatch ls', {'--before': page.older})}",
                   err=True)
    for note in notes:
        click.echo(note, err=True)


@click.command()
@click.option("--interval", type=SECONDS, default=2.0, show_default=True)
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs.")
@click.option("--plain", is_flag=True, help=PLAIN_HELP)
@click.option("--count", type=click.IntRange(min=1), default=None,
              help="Stop after this many refreshes.")
@click.option("--name", "name", default=None, metavar="PATTERN", help=NAME_HELP)
@store_option
@json_option
@handle_errors
def watch(interval: float, show_all: bool, plain: bool, count: int | None, name: str | None,
          store_url: str | None, as_json: bool) -> None:
    """`ls`, refreshed in place until Ctrl-C. When stdout is not a terminal (a pipe, a
    file), or with --plain or --json, each refresh is printed after the last (--json: one
    JSON array a line), a blank line between tables."""
    import itertools
    import json

    from dispatch.service.names import check_pattern, match_note

    if name is not None:
        check_pattern(name)
    refreshes = itertools.count() if count is None else range(count)
    with open_service(store_url) as service:
        if name is not None and not as_json:  # once: the count as the watch begins
            click.echo(match_note(service, name), err=True)
        try:
            if as_json or plain or not render.out().is_terminal:
                for i in refreshes:
                    if i:
                        time.sleep(interval)
                    rows = service.jobs(include_finished=show_all, name=name)
                    if as_json:
                        click.echo(json.dumps([status_json(v) for v in rows], default=str))
                    else:
                        if i:
                            click.echo("")
                        render.print_table(rows, utcnow(), plain=plain)
                return
            from rich.live import Live

            with Live(console=render.out(), refresh_per_second=2) as live:
                for i in refreshes:
                    if i:
                        time.sleep(interval)
                    live.update(render.table(service.jobs(include_finished=show_all,
                                                          name=name), utcnow()))
        except KeyboardInterrupt:
            return


@click.command()
@click.argument("job")
@click.option("--all", "every", is_flag=True,
              help="Every checkpoint on a line of its own (by default an execution's "
                   "checkpoints are one line, where the last of them stands).")
@store_option
@json_option
@handle_errors
def history(job: str, every: bool, store_url: str | None, as_json: bool) -> None:
    """The job's story: every committed event with its time, cause and the scheduler's words
    (an execution's checkpoints folded into one line unless --all; --json lists every
    event)."""
    with open_service(store_url) as service:
        lines = service.history(job, folded=not (every or as_json))
    if as_json:
        emit_json(history_json(lines))
        return
    for e, text in lines:
        click.echo(render.history_line(e, text))


@click.command()
@click.argument("job")
@click.option("--follow", "-f", is_flag=True, help="Follow the job across submissions until "
              "its outcome is committed; exit with the job's exit code.")
@click.option("--submission", type=click.IntRange(min=1), default=None,
              help="Read this submission's logs (default: the latest).")
@click.option("--tail", "-n", type=click.IntRange(min=0), default=None, metavar="N",
              help="Only the last N lines of each stream (read from the end of the file); "
                   "with --follow, go on from there.")
@store_option
@json_option
@handle_errors
def logs(job: str, follow: bool, submission: int | None, tail: int | None,
         store_url: str | None, as_json: bool) -> None:
    """Print the job's logs where the backend keeps them.

    --json: one JSON object a line, {"submission", "node", "line"} (node: the stream, a
    node's log file or a pod; null for dispatch's own line between submissions)."""
    import json

    from dispatch.api import follow_log_lines, follow_log_text

    with open_service(store_url) as service:
        job_id = service.resolve(job)
    out = click.get_binary_stream("stdout")
    said_held: list[bool] = []

    def on_poll(j: Job) -> None:
        # A job held for a person waits for them, not for the scheduler: say it once.
        if j.hold is None:
            said_held.clear()
        elif not said_held:
            said_held.append(True)
            render.err().print(f"job {job_id} is held ({cause_text(j.hold.cause)}) and waits "
                               f"for you: `dispatch resubmit {job_id}` or `dispatch give-up "
                               f"{job_id}` (or `dispatch cancel {job_id}`); still following")
    try:
        if as_json:
            for n, node, text in follow_log_lines(store_url, job_id, submission=submission,
                                                  follow=follow, tail=tail,
                                                  on_poll=on_poll if follow else None):
                doc = {"submission": n, "node": node, "line": text}
                out.write(json.dumps(doc, ensure_ascii=False).encode() + b"\n")
                out.flush()
        else:
            for text in follow_log_text(store_url, job_id, submission=submission,
                                        follow=follow, tail=tail,
                                        on_poll=on_poll if follow else None):
                out.write(text.encode())
                out.flush()
    except KeyboardInterrupt:
        sys.exit(EXIT_CANCELLED)
    except BrokenPipeError:  # `dispatch logs J | head`: the reader has what it wanted
        _quiet_stdout()
        return
    if follow:
        from dispatch.cli.jobs import EXIT_BY_OUTCOME

        with open_service(store_url) as service:
            outcome = service.job(job_id).outcome
        sys.exit(EXIT_BY_OUTCOME[outcome.state] if outcome is not None else 0)


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so that the flush at exit meets no closed pipe."""
    import os

    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # not a real file (an in-process runner)
        pass
    finally:
        os.close(devnull)


COMMANDS = (ls, watch, history, logs)
