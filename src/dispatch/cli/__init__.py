"""The dispatch command line (click + rich): a thin layer over ``dispatch.service``.

Exit codes (``dispatch.errors``): 0 ok (run: succeeded); 1 run: the job failed; 2 bad input
(spec, policy, usage); 3 no such job / ambiguous name; 4 the scheduler could not be reached;
5 the record store could not be used; 6 the request does not fit the job's state;
130 cancelled. Errors name the file, key or job and never print a traceback unless --debug.

Command modules are imported when their command runs (``LazyGroup``): ``dispatch status``
never pays for the segment-health, policy or HTTP server code.
"""

from __future__ import annotations

import importlib
import logging

import click

# Which module defines each command (its ``COMMANDS`` tuple); tests check they agree.
COMMAND_MODULES: dict[str, str] = {
    **{name: "dispatch.cli.jobs" for name in (
        "submit", "run", "status", "ls", "watch", "history", "cancel", "resubmit", "give-up",
        "supersede", "logs")},
    **{name: "dispatch.cli.admin" for name in ("policy", "supervise", "local")},
    "segment": "dispatch.cli.segment",
    "serve": "dispatch.cli.serve",
    "supervisors": "dispatch.cli.supervisors",
}


class LazyGroup(click.Group):
    """A group whose commands are imported from their module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in COMMAND_MODULES:
            module = importlib.import_module(COMMAND_MODULES[cmd_name])
            for command in module.COMMANDS:
                if command.name not in self.commands:
                    self.add_command(command)
        return super().get_command(ctx, cmd_name)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="dispatch-jobs", prog_name="dispatch")
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """dispatch: every training job's state, the cause behind it, and recovery by cause."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


__all__ = ["COMMAND_MODULES", "main"]
