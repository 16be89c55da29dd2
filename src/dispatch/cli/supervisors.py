"""The command line of supervision under leases: the options ``supervise`` takes (--scope,
--lease), the loop it runs, and ``dispatch supervisors`` (who is active for each scope, since
when, last tick, lag; the rows come from dispatch.supervise.leases, shared with serve's
/api/supervisors; below the table each scope's standbys and the reads its scheduler refuses
the active one, from supervise/presence.py). ``supervisors`` is mounted through
``COMMANDS``; ``supervise`` itself lives in cli/admin.py and calls ``serve_scopes``.
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import click

from dispatch.backends.base import Backend, refusals_of
from dispatch.cli.common import (
    LEASE_SECONDS,
    emit_json,
    handle_errors,
    json_option,
    open_service,
    store_option,
)
from dispatch.stores.base import RecordStore
from dispatch.stores.fence import Lease
from dispatch.supervise.escalations import Notifier
from dispatch.supervise.leases import (
    DEFAULT_LEASE_S,
    ScopeError,
    Supervision,
    resolve_scopes,
    scopes_to_serve,
    supervisors_rows,
    unresolved_note,
)
from dispatch.supervise.loop import TickReport
from dispatch.supervise.scopes import ONCE_SCOPE_WAIT_S

F = TypeVar("F", bound=Callable[..., Any])


def scope_options(fn: F) -> F:
    """--scope (repeatable) and --lease, for ``supervise`` (and ``serve``)."""
    fn = click.option(
        "--lease", "lease_s", type=LEASE_SECONDS, default=DEFAULT_LEASE_S, show_default=True,
        help="Lease period in seconds, 1 to 600: a standby takes a scope over within one "
             "period (+ one poll) of its active supervisor dying, and a killed one holds it "
             "no longer.")(fn)
    fn = click.option(
        "--scope", "scopes", multiple=True, metavar="SCOPE",
        help="Serve this scope: a backend (local, slurm, kubeflow: this machine's cluster of "
             "it, plus jobs recorded before scopes) or backend:cluster, e.g. slurm:clusterA. "
             "Repeatable. Default: the local backend and the scopes of the unfinished jobs "
             "(only the backends they use are asked which cluster they are), and the "
             "scopes of jobs recorded later.")(fn)
    return fn


def serve_scopes(store: RecordStore, backends: Callable[[str], Backend],
                 scopes: Sequence[str], *, poll: float, lease_s: float, notifier: Notifier,
                 once: bool = False, echo: Callable[[str], None] = click.echo,
                 as_json: bool | None = None) -> None:
    """Resolve the scopes (none given: the local backend and the scopes of live jobs, and
    later ones as they come), then serve them until SIGTERM/SIGINT (which hand the leases
    back). ``once``: take each free scope, tick it once, hand it back, print a summary: JSON
    with ``as_json`` (None: when stdout is not a terminal), else lines for a person."""
    try:
        # One pass has no later tick to take a late answer in (scopes.ONCE_SCOPE_WAIT_S).
        resolved, unresolved = (resolve_scopes(scopes, backends,
                                               wait_s=ONCE_SCOPE_WAIT_S if once else None)
                                if scopes else scopes_to_serve([], store, backends))
    except ScopeError as err:  # exit 2 with the reason, whichever CLI mounts this
        raise click.BadParameter(str(err), param_hint="--scope") from None
    for u in unresolved:
        click.echo(f"note: {unresolved_note(u)}", err=True)
    sup = Supervision(store, backends, resolved, lease_s=lease_s, poll=poll, notifier=notifier,
                      unresolved=unresolved)
    if once:
        try:
            reports = sup.step()
        finally:
            sup.release_all()
        summary = once_summary(resolved, reports, {s: lease for s in resolved
                                                    if (lease := sup.book.get(s))},
                               sup.untick)
        summary["refused"] = refused_reads(backends, resolved)
        if as_json is None:
            from dispatch.cli.render import styles_stdout

            as_json = not styles_stdout()
        for line in [json.dumps(summary)] if as_json else once_lines(summary):
            echo(line)
        return

    def stop(signum: int, _frame: Any) -> None:
        sup.stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if not scopes:  # a job recorded later for a backend not served yet: served too
        sup.follow_live_scopes()
    logging.getLogger("dispatch").setLevel(logging.INFO)
    # Not "supervising": per scope it is the active supervisor, or a standby while another
    # is; each scope's role is said as it is taken or changes (issue 48 item 10).
    sup.on_change = lambda _scope, what, _lease: click.echo(what, err=True)
    click.echo(f"serving scopes as {sup.holder}: {', '.join(resolved)} (lease {lease_s:g}s; "
               "each scope's role follows)", err=True)
    sup.run()


def once_summary(scopes: Sequence[str], reports: dict[str, TickReport],
                 leases: dict[str, Lease], why: dict[str, str] | None = None
                 ) -> dict[str, Any]:
    """What ``supervise --once`` prints: the totals, then per scope what was done, or who
    holds it and why it was not ticked."""
    per: dict[str, Any] = {}
    for scope in scopes:
        if scope in reports:
            r = reports[scope]
            per[scope] = {"ticked": True, "jobs": r.jobs, "decisions": r.decisions,
                          "unreachable": r.unreachable, "errors": r.errors}
        else:
            lease = leases.get(scope)
            per[scope] = {"ticked": False,
                          "held_by": lease.holder if lease is not None and lease.active
                          else None,
                          "why": (why or {}).get(scope, "not reached")}
    return {"jobs": sum(r.jobs for r in reports.values()),
            "decisions": sum(r.decisions for r in reports.values()),
            "unreachable": [u for r in reports.values() for u in r.unreachable],
            "errors": [e for r in reports.values() for e in r.errors],
            "scopes": per}


def refused_reads(backends: Callable[[str], Backend], scopes: Sequence[str]) -> list[str]:
    """The reads a scheduler refuses now (a backend's ``refused_reads``, e.g. the kubeflow
    backend's RBAC refusals, each also logged once with the API server's words), one line
    each: never silent (issue 47)."""
    return [f"{name}: {r.verb} {r.resource}: {r.words}"
            for name in dict.fromkeys(scope.partition(":")[0] for scope in scopes)
            for r in refusals_of(backends(name))]


def once_lines(summary: dict[str, Any]) -> list[str]:
    """``supervise --once`` on a terminal: the totals, a line a scope, then what could not
    be reached and the errors (the JSON summary's content, for a person)."""
    def jobs(n: int, decisions: int) -> str:
        return (f"{n} job{'s' if n != 1 else ''}, {decisions} "
                f"decision{'s' if decisions != 1 else ''}")
    from dispatch.cli.render import visible

    lines = [f"one pass: {jobs(summary['jobs'], summary['decisions'])}"]
    width = max((len(s) for s in summary["scopes"]), default=0)
    for scope, r in summary["scopes"].items():
        what = (f"ticked, {jobs(r['jobs'], r['decisions'])}" if r["ticked"] else
                f"not ticked: {r['why']}"
                + (f" (active supervisor: {r['held_by']})" if r.get("held_by") else ""))
        lines.append(visible(f"  {scope:<{width}}  {what}"))
    lines += [visible(f"unreachable: {u}") for u in summary["unreachable"]]
    lines += [visible(f"error: {e}") for e in summary["errors"]]
    lines += [visible(f"refused: {r}") for r in summary.get("refused", [])]
    return lines


IDLE_HIDDEN = timedelta(days=1)


def recently_held(rows: Sequence[dict[str, Any]], now: datetime) -> list[dict[str, Any]]:
    """The rows worth showing by default: a scope that is active, has live jobs, or was
    held (acquired or ticked) within the last day. A scope nobody has held for a day and
    with nothing to serve is history (``--all`` shows it)."""
    def recent(r: dict[str, Any]) -> bool:
        last = r.get("last_tick") or r.get("since")
        if last is None:
            return False
        at = datetime.fromisoformat(last)
        return now - (at if at.tzinfo else at.replace(tzinfo=UTC)) < IDLE_HIDDEN
    return [r for r in rows if r["state"] == "active" or r["live_jobs"] or recent(r)]


@click.command("supervisors")
@click.option("--all", "show_all", is_flag=True,
              help="Also the scopes nobody has held for a day and that have no live jobs.")
@store_option
@json_option
@handle_errors
def supervisors(show_all: bool, store_url: str | None, as_json: bool) -> None:
    """Who is active for each scope, since when, the last tick and the lag; then each
    scope's standbys and the reads its scheduler refuses the active one."""
    from rich.console import Console
    from rich.table import Table

    with open_service(store_url) as service:
        rows = supervisors_rows(service.store)
    if not show_all:
        rows = recently_held(rows, datetime.now(UTC))
    if as_json:
        emit_json(rows)
        return
    table = Table(box=None, pad_edge=False)
    # Never cut a scope or holder short: the scope is kept on one line (it is what a person
    # reads along the row, and pastes into --scope); the holder folds when the row is narrow
    # (at 80 columns a long host name), never below its header. JOBS: the live jobs.
    longest = {"SCOPE": max([5, *(len(r["scope"]) for r in rows)]),
               "ACTIVE": min(max([6, *(len(r["holder"] or "-") for r in rows)]), 12)}
    for col in ("SCOPE", "STATE", "ACTIVE", "EPOCH", "SINCE", "LAST TICK", "LAG", "JOBS"):
        table.add_column(col, overflow="fold", no_wrap=col != "ACTIVE",
                         min_width=longest.get(col))
    style = {"active": "green", "unserved": "bold red", "expired": "bold red",
             "released": "yellow"}
    for r in rows:
        table.add_row(
            r["scope"], f"[{style[r['state']]}]{r['state']}[/]", r["holder"] or "-",
            str(r["epoch"] or "-"), _hms(r["since"]), _hms(r["last_tick"]),
            "-" if r["lag_s"] is None else f"{r['lag_s']:.1f}s", str(r["live_jobs"]))
    console = Console(highlight=False, soft_wrap=True)
    console.print(table)
    from dispatch.cli.render import visible

    for line in presence_lines(rows):  # folded at the terminal's width, never cut
        console.print(visible(line), markup=False, soft_wrap=False, overflow="fold")


def presence_lines(rows: Sequence[dict[str, Any]]) -> list[str]:
    """Below the table: each scope's standbys (a process waiting for its lease) and the
    reads its active supervisor's scheduler refuses it, with since when."""
    lines: list[str] = []
    for r in rows:
        for sb in r.get("standbys", []):
            lines.append(f"standby for {r['scope']}: {sb['holder']} (since "
                         f"{_hms(sb['since'])}, last seen {_hms(sb['seen'])})")
        for x in r.get("refusals", []):
            lines.append(f"refused to {r['holder']} in {r['scope']}: {x['verb']} "
                         f"{x['resource']} since {_hms(x['since'])} ({x['words']}): "
                         f"{x['cost']}")
    return lines


def _hms(iso: str | None) -> str:
    return "-" if iso is None else datetime.fromisoformat(iso).strftime("%H:%M:%S")


COMMANDS = (supervisors,)
