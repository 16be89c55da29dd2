"""What every command shares: options, the one place errors become exit codes, output."""

from __future__ import annotations

import functools
import json
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from dispatch.errors import BadInput, DispatchError
from dispatch.support.durations import LEASE_MAX_S, LEASE_MIN_S, POLL_MAX_S, POLL_MIN_S
from dispatch.support.paths import check_path_variables

if TYPE_CHECKING:
    from dispatch.service import Service

F = TypeVar("F", bound=Callable[..., Any])

class Seconds(click.ParamType[float]):
    """A duration option in seconds: a finite number within the option's documented bounds
    (dispatch.support.durations); anything else (nan, inf, 1e12, -1, 0, text) is a usage error,
    exit 2. Every duration option of the CLI uses this one type."""

    name = "seconds"

    def __init__(self, low: float, high: float) -> None:
        self.low, self.high = low, high

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        from dispatch.support.durations import seconds_in

        what = (param.opts[0] if param is not None and param.opts else "seconds")
        try:
            return seconds_in(value, what, self.low, self.high, from_text=True)
        except BadInput as err:
            self.fail(str(err).removeprefix(f"{what}: "), param, ctx)

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return f"SECONDS ({self.low:g}-{self.high:g})"


# --poll and --interval: 0.05 s .. 10 min (no busy loop, no sleep past the next renewal's
# need); --lease: 1 s .. 10 min (a dead holder keeps a scope at most that long).
SECONDS = Seconds(POLL_MIN_S, POLL_MAX_S)
LEASE_SECONDS = Seconds(LEASE_MIN_S, LEASE_MAX_S)


def handle_errors(fn: F) -> F:
    """Every typed error becomes its documented exit code and one line (JSON with --json);
    a traceback only with --debug (the real one, re-raised where it was caught). A relative
    path in a path variable is refused before the command starts (support/paths.py)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = bool((ctx.find_root().obj or {}).get("debug"))
        refuse_undecodable(ctx)
        try:
            from dispatch.backends.registry import path_variables  # each backend's root

            check_path_variables(path_variables())
            return fn(*args, **kwargs)
        except DispatchError as e:
            if debug:
                raise
            fail(e, as_json=bool(kwargs.get("as_json")))

    return wrapper  # type: ignore[return-value]


def refuse_undecodable(ctx: click.Context) -> None:
    """A value that is not UTF-8 (a job reference, ``ls --name``, any option: argv's bytes
    as surrogateescape holds them) is a usage error naming its parameter, the bytes shown
    escaped, before the command starts: no record, name or id can hold it, and the store or
    a JSON encoder would fail on it with a traceback (issue 45). A file's path is left to
    the command (a file name may be any bytes)."""
    from dispatch.support.utf8 import encodable, escaped

    for param in ctx.command.params:
        if isinstance(param.type, click.Path) or param.name is None:
            continue
        value = ctx.params.get(param.name)
        for v in value if isinstance(value, tuple | list) else (value,):
            if isinstance(v, str) and not encodable(v):
                raise click.BadParameter(f"{escaped(v)} is not UTF-8 text", ctx, param)


def fail(e: DispatchError, *, as_json: bool = False) -> None:
    message = error_text(e)
    if as_json:
        from dispatch.service.views import error_json

        click.echo(json.dumps(error_json(e, message), indent=2))
    from dispatch.cli.render import visible  # a scheduler's words may be in the message

    click.echo(f"error: {visible(message, newlines=True)}", err=True)
    sys.exit(e.exit_code)


def error_text(e: DispatchError) -> str:
    """The one-line message; a policy's every problem on its own line."""
    from dispatch.core.policy import PolicyError

    if isinstance(e, PolicyError):
        return f"{e.where}: invalid policy:\n  " + "\n  ".join(e.problems)
    return str(e)


def command_as_given(program: str, replace: dict[str, str]) -> str:
    """The running command as a shell runs it (issue 48: a hint a person can paste, never
    ``...``): ``program``, then the options given on the command line, with ``replace``'s
    options (long names) set to new values, and the arguments, each quoted for a shell."""
    import shlex

    ctx = click.get_current_context()
    words = program.split()
    args: list[str] = []
    for param in ctx.command.params:
        name = param.name or ""
        value = ctx.params.get(name)
        if isinstance(param, click.Argument):
            if value is not None:
                args.append(str(value))
            continue
        if not isinstance(param, click.Option):
            continue
        flag = max(param.opts, key=len)
        if flag in replace or value is None or value is False or (
                ctx.get_parameter_source(name) is not click.core.ParameterSource.COMMANDLINE):
            continue
        words += [flag] if param.is_flag else [flag, str(value)]
    for flag, new in replace.items():
        words += [flag, new]
    return shlex.join([*words, *args])


def store_option(fn: F) -> F:
    return click.option("--store", "store_url", envvar="DISPATCH_STORE", default=None,
                        help="Record store URL (sqlite path or postgresql://...). "
                             "Default: DISPATCH_STORE, else the SQLite file under "
                             "$XDG_STATE_HOME/dispatch.")(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def _escalation_target(ctx: click.Context, param: click.Parameter,
                       value: str | None) -> str | None:
    """Refuse a webhook or command that can never be used, at start (exit 2). The message
    names the option and its environment variable (either may be where it came from)."""
    if value is None:
        return None
    from dispatch.supervise.escalations import check_webhook, split_command

    where = "escalation target"
    try:
        if param.name == "escalation_webhook":
            check_webhook(value, where)
        else:
            split_command(value, where)
    except DispatchError as err:
        source = f" (set by the option or by ${param.envvar})" if param.envvar else ""
        raise click.BadParameter(str(err).removeprefix(f"{where}: ") + source, ctx,
                                 param) from None
    return value


def notify_options(fn: F) -> F:
    fn = click.option("--escalation-webhook", envvar="DISPATCH_ESCALATION_WEBHOOK",
                      default=None, callback=_escalation_target,
                      help="POST each escalation as JSON here (an http:// or https:// URL).")(fn)
    fn = click.option("--escalation-command", envvar="DISPATCH_ESCALATION_COMMAND",
                      default=None, callback=_escalation_target,
                      help="Run this argv (split like a shell would, never run by one) with "
                           "the escalation JSON on stdin.")(fn)
    return fn


def open_service(store_url: str | None) -> Service:
    # Imported here so that a usage error or --help loads no store or core.
    from dispatch.service import Service

    return Service.open(store_url)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))
