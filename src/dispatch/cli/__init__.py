"""The dispatch command line (click + rich): a thin layer over ``dispatch.service``.

Exit codes (``dispatch.errors``): 0 ok (run: succeeded); 1 run: the job failed; 2 bad input
(spec, policy, usage); 3 no such job / ambiguous name; 4 the scheduler could not be reached;
5 the record store could not be used; 6 the request does not fit the job's state;
130 cancelled. Errors name the file, key or job and never print a traceback unless --debug.
"""

from __future__ import annotations

import logging

import click

from dispatch.cli import admin, jobs, segment, serve


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dispatch-jobs", prog_name="dispatch")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """dispatch: every training job's state, the cause behind it, and recovery by cause."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


for _command in (*jobs.COMMANDS, *admin.COMMANDS, *segment.COMMANDS, *serve.COMMANDS):
    main.add_command(_command)

__all__ = ["main"]
