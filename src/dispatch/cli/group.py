"""The ``dispatch`` command group: its lazy loading of command modules, the global options,
and the exit statuses of a failed command (the package docstring lists them)."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import sys
from collections.abc import Iterator
from typing import Any, NoReturn

import click

# Which module defines each command (its ``COMMANDS`` tuple); tests check they agree.
COMMAND_MODULES: dict[str, str] = {
    **{name: "dispatch.cli.jobs" for name in (
        "submit", "run", "status", "resubmit", "give-up", "supersede")},
    **{name: "dispatch.cli.bulk" for name in ("cancel", "prune")},
    **{name: "dispatch.cli.reading" for name in ("ls", "watch", "history", "logs")},
    **{name: "dispatch.cli.admin" for name in ("policy", "supervise", "local")},
    "segment": "dispatch.cli.segment",
    "goodput": "dispatch.cli.goodput",
    "serve": "dispatch.cli.serve",
    "supervisors": "dispatch.cli.supervisors",
    **{name: "dispatch.cli.doctor" for name in ("doctor", "kubeflow")},
}


# Exit status when the reader of stdout goes away (`dispatch history J | head`): what a
# shell reports for a program ended by SIGPIPE (128 + 13), as for coreutils; nothing printed.
EXIT_PIPE_CLOSED = 141


class LazyGroup(click.Group):
    """A group whose commands are imported from their module on first use. Also the one
    place for what no command sees: a usage error under ``--json`` prints the JSON error
    shape on stdout (and click's usage text on stderr), exit 2; a closed stdout ends the
    command quietly with exit 141."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        _check_failpoints()
        return super().main(*args, **kwargs)

    def make_context(self, info_name: str | None, args: list[str],
                     parent: click.Context | None = None, **extra: Any) -> click.Context:
        with _usage_json(list(args)):  # a copy: parsing consumes the list
            return super().make_context(info_name, args, parent, **extra)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            # the subcommand's name and arguments (click keeps the name apart, privately)
            rest = [*getattr(ctx, "_protected_args", ()), *ctx.args]
            with _usage_json(rest):
                return super().invoke(ctx)
        except BrokenPipeError:
            _reader_left()

    def resolve_command(self, ctx: click.Context, args: list[str]
                        ) -> tuple[str | None, click.Command | None, list[str]]:
        """As click's, and an unknown command gets the closest ones (``dispatch lst``: did
        you mean 'ls'?) and the list of every command."""
        try:
            return super().resolve_command(ctx, args)
        except click.UsageError:
            name = click.utils.make_str(args[0]) if args else ""
            if not name or self.get_command(ctx, name) is not None or name.startswith("-"):
                raise
            import difflib

            names = self.list_commands(ctx)
            near = difflib.get_close_matches(name, names, n=3, cutoff=0.5)
            hint = f" Did you mean {' or '.join(repr(n) for n in near)}?" if near else ""
            raise click.UsageError(f"No such command {name!r}.{hint} Commands: "
                                   f"{', '.join(names)}.", ctx) from None

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
@click.option("--utc", is_flag=True, envvar="DISPATCH_UTC",
              help="Show times in UTC (marked UTC); default: local time with its offset.")
@click.pass_context
def main(ctx: click.Context, debug: bool, utc: bool) -> None:
    """dispatch: every training job's state, the cause behind it, and recovery by cause."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    if utc or "dispatch.cli.render" in sys.modules:  # one process may run many commands
        from dispatch.cli import render

        render.SHOW_UTC[0] = utc
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


@contextlib.contextmanager
def _usage_json(args: list[str]) -> Iterator[None]:
    """With ``--json`` among ``args``, a usage error also prints ``{"error": ...}`` (code
    bad-input, exit 2) on stdout, as every other --json error does; click then shows it."""
    try:
        yield
    except click.UsageError as err:
        if "--json" in args[:args.index("--")] if "--" in args else "--json" in args:
            from dispatch.errors import BadInput
            from dispatch.service.views import error_json

            message = err.format_message()
            if err.ctx is not None:
                message = f"{err.ctx.command_path}: {message}"
            click.echo(json.dumps(error_json(BadInput(message)), indent=2))
        raise


def _check_failpoints() -> None:
    """A mistyped DISPATCH_FAILPOINTS (a test hook, support/failpoints.py, read when that
    module is imported) is exit 2 naming the known points, before any command or --help
    imports the module: else the first import (the supervisor's loop, the local backend)
    raised it as a traceback (issue 45)."""
    if not os.environ.get("DISPATCH_FAILPOINTS"):
        return
    from dispatch.errors import BadInput

    try:
        import dispatch.support.failpoints  # noqa: F401  (it parses the variable)
    except BadInput as err:
        click.echo(f"error: {err}", err=True)
        sys.exit(err.exit_code)


def _reader_left() -> NoReturn:
    """stdout's reader is gone: stop writing, and let nothing flush into the closed pipe at
    exit (which would print "Exception ignored ... BrokenPipeError")."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass
    sys.exit(EXIT_PIPE_CLOSED)


__all__ = ["COMMAND_MODULES", "EXIT_PIPE_CLOSED", "main"]
