"""What every command shares: options, the one place errors become exit codes, output."""

from __future__ import annotations

import functools
import json
import math
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from dispatch.errors import DispatchError
from dispatch.paths import check_path_variables

if TYPE_CHECKING:
    from dispatch.service import Service

F = TypeVar("F", bound=Callable[..., Any])

class Seconds(click.ParamType[float]):
    """Seconds between ticks or refreshes: finite, 0.05 s .. 1 day (no busy loop, no nan)."""

    name = "seconds"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> float:
        try:
            seconds = float(value)
        except (TypeError, ValueError):
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        if not math.isfinite(seconds) or not 0.05 <= seconds <= 86_400:
            self.fail(f"{value!r} must be a finite number of seconds from 0.05 to 86400",
                      param, ctx)
        return seconds


SECONDS = Seconds()


def handle_errors(fn: F) -> F:
    """Every typed error becomes its documented exit code and one line (JSON with --json);
    a traceback only with --debug (the real one, re-raised where it was caught). A relative
    path in a path variable is refused before the command starts (paths.py)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = bool((ctx.find_root().obj or {}).get("debug"))
        try:
            check_path_variables()
            return fn(*args, **kwargs)
        except DispatchError as e:
            if debug:
                raise
            fail(e, as_json=bool(kwargs.get("as_json")))

    return wrapper  # type: ignore[return-value]


def fail(e: DispatchError, *, as_json: bool = False) -> None:
    message = error_text(e)
    if as_json:
        from dispatch.service.views import error_json

        click.echo(json.dumps(error_json(e, message), indent=2))
    click.echo(f"error: {message}", err=True)
    sys.exit(e.exit_code)


def error_text(e: DispatchError) -> str:
    """The one-line message; a policy's every problem on its own line."""
    from dispatch.core.policy import PolicyError

    if isinstance(e, PolicyError):
        return f"{e.where}: invalid policy:\n  " + "\n  ".join(e.problems)
    return str(e)


def store_option(fn: F) -> F:
    return click.option("--store", "store_url", envvar="DISPATCH_STORE", default=None,
                        help="Record store URL (sqlite path or postgresql://...). "
                             "Default: DISPATCH_STORE, else the SQLite file under "
                             "$XDG_STATE_HOME/dispatch.")(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def notify_options(fn: F) -> F:
    fn = click.option("--escalation-webhook", envvar="DISPATCH_ESCALATION_WEBHOOK",
                      default=None, help="POST each escalation as JSON here.")(fn)
    fn = click.option("--escalation-command", envvar="DISPATCH_ESCALATION_COMMAND",
                      default=None, help="Run this argv (split like a shell would, never run "
                                         "by one) with the escalation JSON on stdin.")(fn)
    return fn


def open_service(store_url: str | None) -> Service:
    # Imported here so that a usage error or --help loads no store or core.
    from dispatch.service import Service

    return Service.open(store_url)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))
