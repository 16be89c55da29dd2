"""``dispatch serve``: supervise every unfinished job and serve the JSON API, /metrics and
the dashboard (dispatch.http) from one process."""

from __future__ import annotations

import shlex

import click

from dispatch.cli.common import SECONDS, handle_errors, notify_options, store_option
from dispatch.cli.supervisors import scope_options


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to bind; a non-loopback one needs --token-file.")
@click.option("--port", type=click.IntRange(0, 65535), default=8642, show_default=True)
@click.option("--token-file", type=click.Path(dir_okay=False), default=None,
              help="Lines name:token (mode 600): team tokens, besides the per-start one; "
                   "person requests are recorded as the token's name.")
@click.option("--poll", type=SECONDS, default=2.0, show_default=True,
              help="Seconds between supervisor ticks.")
@click.option("--no-supervise", is_flag=True,
              help="Serve only; another process supervises.")
@scope_options
@store_option
@notify_options
@handle_errors
def serve(host: str, port: int, token_file: str | None, poll: float, no_supervise: bool,
          scopes: tuple[str, ...], lease_s: float, store_url: str | None,
          escalation_webhook: str | None, escalation_command: str | None) -> None:
    """Supervise jobs and serve the JSON API, /metrics and the dashboard at http://HOST:PORT/.

    Every TCP request needs a token: the one printed at start as a /login?token= URL (also
    in the state dir, mode 600) or one from --token-file. This user's programs may use the
    Unix socket named at start instead (curl --unix-socket PATH http://localhost/api/jobs).

    Supervision is ``dispatch supervise``'s: per scope one active supervisor (this process or
    another on the same store), the others hot standbys."""
    from dispatch.http.server import serve as run_server
    from dispatch.supervise.escalations import Notifier

    notifier = Notifier(webhook=escalation_webhook,
                        command=shlex.split(escalation_command) if escalation_command else None)
    run_server(store_url, host, port, token_file=token_file, poll=poll, notifier=notifier,
               supervise=not no_supervise, scopes=scopes, lease_s=lease_s)


COMMANDS = (serve,)
