"""The dispatch command line (click + rich).

Exit codes: 0 ok (run: succeeded); 1 run: the job failed; 2 bad input (spec, policy, usage);
3 no such job / ambiguous name; 4 the scheduler could not be reached; 5 the record store
could not be used; 6 the request does not fit the job's state; 130 run: cancelled.
Errors name the file, key or job and never print a traceback unless --debug.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import signal
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click
from rich.console import Console
from rich.live import Live
from rich.table import Table

from dispatch.backends.registry import BackendCache, BackendConfigError, declarations_for
from dispatch.cli_supervisors import register as register_supervisors
from dispatch.cli_supervisors import scope_options, serve_scopes
from dispatch.core.codec import DecodeError, cause_json, to_builtins
from dispatch.core.model import (
    Cause,
    Discovery,
    SchedulerUnreachable,
    State,
    Status,
    token_for,
)
from dispatch.core.policy import Plan, PolicyError, RecoveryPolicy
from dispatch.core.record import Job, RecordError, fold
from dispatch.core.spec import SpecError
from dispatch.core.status import project, project_objects
from dispatch.jobs import (
    JobStateError,
    create_job,
    give_up,
    request_cancel,
    resubmit_from_hold,
    supersede,
    whoami,
)
from dispatch.notify import Notifier
from dispatch.specfile import load_policy, load_spec
from dispatch.stores.base import (
    AmbiguousName,
    ConflictError,
    JobNotFound,
    RecordStore,
    SchemaTooNew,
    StoreError,
)
from dispatch.stores.select import open_store
from dispatch.supervision import scope_for
from dispatch.supervisor import Supervisor, TickReport, utcnow

EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_STORE = 5
EXIT_STATE = 6
EXIT_CANCELLED = 130

STATE_STYLE = {
    State.PENDING: "yellow", State.HELD: "magenta", State.RUNNING: "cyan",
    State.RECOVERING: "bold yellow", State.SUCCEEDED: "green", State.FAILED: "bold red",
    State.CANCELLED: "dim", State.UNKNOWN: "red",
}

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

F = TypeVar("F", bound=Callable[..., Any])


class Fail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _fail(code: int, message: str) -> NoReturn:
    raise Fail(code, message)


def handle_errors(fn: F) -> F:
    """Map typed errors to a one-line message and an exit code; tracebacks only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = bool((ctx.find_root().obj or {}).get("debug"))
        try:
            return fn(*args, **kwargs)
        except Fail as e:
            code, message = e.code, e.message
        except PolicyError as e:
            code, message = EXIT_BAD_INPUT, f"{e.where}: invalid policy:\n  " + "\n  ".join(
                e.problems)
        except SpecError as e:
            code, message = EXIT_BAD_INPUT, str(e)
        except (JobNotFound, AmbiguousName) as e:
            code, message = EXIT_NOT_FOUND, str(e)
        except SchedulerUnreachable as e:
            code, message = EXIT_UNREACHABLE, str(e)
        except JobStateError as e:
            code, message = EXIT_STATE, str(e)
        except (StoreError, SchemaTooNew, DecodeError, RecordError, ConflictError) as e:
            code, message = EXIT_STORE, f"record store: {e}"
        except BackendConfigError as e:
            code, message = EXIT_BAD_INPUT, f"backend: {e}"
        if debug:
            raise
        err.print(f"[bold red]error:[/] {message}", markup=True) if sys.stderr.isatty() \
            else click.echo(f"error: {message}", err=True)
        sys.exit(code)

    return wrapper  # type: ignore[return-value]


def store_option(fn: F) -> F:
    return click.option("--store", "store_url", envvar="DISPATCH_STORE", default=None,
                        help="Record store URL (sqlite path or postgresql://...). "
                             "Default: DISPATCH_STORE, else the SQLite file under "
                             "$XDG_STATE_HOME/dispatch.")(fn)


def json_option(fn: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON.")(fn)


def _store(url: str | None) -> RecordStore:
    return open_store(url)


def emit_json(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=False, default=str))


# ---- JSON shapes ---------------------------------------------------------------------------
def status_json(s: Status, scheduler: str = "ok") -> dict[str, Any]:
    return {
        "job": s.job, "name": s.name, "state": s.state.value, "cause": cause_json(s.cause),
        "level": s.level.value, "settled": s.settled, "backend": s.backend,
        "history": [{"at": t.at.isoformat(), "state": t.state.value,
                     "cause": cause_json(t.cause), "seq": t.seq, "note": t.note}
                    for t in s.history],
        "escalations": [{"at": x.at.isoformat(), "message": x.message,
                         "cause": cause_json(x.cause), "seq": x.seq} for x in s.escalations],
        "supersedes": s.supersedes, "superseded_by": s.superseded_by,
        "submissions": s.submissions, "budget_used": s.budget_used, "objects": list(s.objects),
        "created_at": s.created_at.isoformat() if s.created_at else None,
        "segments": list(s.segments),
        "scheduler": scheduler,
    }


def cause_text(c: Cause | None) -> str:
    if c is None:
        return "-"
    text = c.kind.value
    if c.exit_code is not None:
        text += f" (exit {c.exit_code})"
    if c.actor:
        text += f" by {c.actor}"
    return text


def age(created: datetime | None, now: datetime) -> str:
    if created is None:
        return "-"
    secs = int((now - created).total_seconds())
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= size:
            return f"{secs // size}{unit}"
    return f"{secs}s"


# ---- reading jobs --------------------------------------------------------------------------
def discover_jobs(jobs: Sequence[Job], backends: BackendCache) -> tuple[dict[str, Discovery],
                                                                         list[str]]:
    """One discover() per backend for all the jobs asked about."""
    by_backend: dict[str, list[Job]] = {}
    for job in jobs:
        if job.outcome is None:
            by_backend.setdefault(job.spec.backend, []).append(job)
    found: dict[str, Discovery] = {}
    unreachable: list[str] = []
    for name, group in by_backend.items():
        tokens = [s.token for j in group for s in j.submissions]
        refs = [s.ref for j in group for s in j.submissions if s.ref is not None]
        try:
            found[name] = backends(name).discover(tokens, refs)
        except SchedulerUnreachable as e:
            unreachable.append(str(e))
    return found, unreachable


def statuses(store: RecordStore, job_ids: Sequence[str], backends: BackendCache,
             ask_scheduler: bool = True) -> tuple[list[Status], list[str]]:
    now = utcnow()
    records = store.read_many(list(job_ids))
    jobs = [fold(records[j], now) for j in job_ids if j in records]
    discoveries, unreachable = discover_jobs(jobs, backends) if ask_scheduler else ({}, [])
    return [project(j, discoveries.get(j.spec.backend), now) for j in jobs], unreachable


def render_table(rows: Sequence[Status], now: datetime) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for col in ("JOB", "NAME", "STATE", "CAUSE", "SUBMISSIONS", "BUDGET USED", "AGE"):
        table.add_column(col)
    for s in rows:
        state = s.state.value + ("" if s.settled or not s.state.terminal else "*")
        used = ", ".join(f"{k}={v}" for k, v in s.budget_used.items() if v) or "-"
        table.add_row(s.job, s.name, f"[{STATE_STYLE[s.state]}]{state}[/]", cause_text(s.cause),
                      str(s.submissions), used, age(s.created_at, now))
    return table


# ---- the commands --------------------------------------------------------------------------
@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, help="Show tracebacks and debug logs.")
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """dispatch: every training job's state, the cause behind it, and recovery by cause."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(level=logging.DEBUG if debug else logging.WARNING,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")


@main.group()
def policy() -> None:
    """Recovery policies."""


@policy.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--backend", type=click.Choice(["local", "slurm", "kubeflow"]), default="local",
              show_default=True)
@json_option
@handle_errors
def policy_check(file: Path, backend: str, as_json: bool) -> None:
    """Validate a policy file (or a job spec's policy: section)."""
    try:
        pol = _policy_from_file(file)
    except PolicyError as e:
        if as_json:
            emit_json({"valid": False, "problems": e.problems, "uncovered": [],
                       "unenforced": []})
            sys.exit(EXIT_BAD_INPUT)
        raise
    except SpecError as e:
        if as_json:
            emit_json({"valid": False, "problems": [str(e)], "uncovered": [], "unenforced": []})
            sys.exit(EXIT_BAD_INPUT)
        raise
    plan = Plan(policy=pol, declarations=declarations_for(backend))
    uncovered = [k.value for k in plan.uncovered()]
    unenforced = plan.unenforced()
    if as_json:
        emit_json({"valid": True, "problems": [], "uncovered": uncovered,
                   "unenforced": unenforced})
        return
    click.echo(f"{file}: valid ({len(pol.rules)} rules, backend {backend})")
    click.echo("uncovered: " + (", ".join(uncovered) if uncovered else "none") +
               ("  (an execution ending with these fails the job and escalates)"
                if uncovered else ""))
    for line in unenforced:
        click.echo(f"unenforced: {line}")


def _policy_from_file(file: Path) -> RecoveryPolicy:
    """A policy file, or a job spec whose policy: section is checked."""
    import yaml

    from dispatch.specfile import load_yaml_text

    try:
        data = load_yaml_text(file.read_text())
    except (OSError, yaml.YAMLError):
        return load_policy(file)  # produces the precise error
    if isinstance(data, dict) and "command" in data:
        return load_spec(file).policy
    return load_policy(file)


def _dry_run(spec_path: Path) -> None:
    from dispatch.backends.base import Submission

    spec = load_spec(spec_path)
    submission = Submission(job_id="DRYRUN", number=1, token=token_for("DRYRUN", 1), spec=spec)
    if spec.backend == "slurm":
        from dispatch.backends.slurm.script import dry_run

        script, argv = dry_run(submission)
        click.echo("# argv: " + " ".join(argv))
        click.echo(script)
    elif spec.backend == "kubeflow":
        from dispatch.backends.kubeflow.backend import KubeflowBackend

        kube = BackendCache()("kubeflow")
        assert isinstance(kube, KubeflowBackend)
        click.echo(kube.dry_run(submission))
    else:
        click.echo(json.dumps({"backend": "local", "nodes": spec.nodes,
                               "argv": list(spec.command), "time_limit": spec.time_limit,
                               "memory": spec.memory, "env": spec.env}, indent=2))


def _create(store: RecordStore, spec_path: Path, backends: BackendCache) -> str:
    spec = load_spec(spec_path)
    if spec.workdir is None:
        # Relative paths in the command mean what they meant where the job was submitted.
        import msgspec

        spec = msgspec.structs.replace(spec, workdir=os.getcwd())
    declarations = backends(spec.backend).declarations()
    plan = Plan(policy=spec.policy, declarations=declarations)
    for line in plan.unenforced():
        err.print(f"warning: {line} (an execution ending with it fails the job)", markup=False)
    return create_job(store, spec, declarations, utcnow(),
                      scope=scope_for(spec.backend, backends(spec.backend)))


@main.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--dry-run", is_flag=True, help="Print what would reach the scheduler; submit "
              "nothing.")
@store_option
@json_option
@handle_errors
def submit(spec_path: Path, dry_run: bool, store_url: str | None, as_json: bool) -> None:
    """Record a job and make its first submission (a running `supervise` takes it on)."""
    if dry_run:
        _dry_run(spec_path)
        return
    backends = BackendCache()
    with _store(store_url) as store:
        job_id = _create(store, spec_path, backends)
        Supervisor(store, backends).tick([job_id])
        s, unreachable = statuses(store, [job_id], backends)
        _print_status(s[0], as_json, unreachable)


def _supervisor(store: RecordStore, backends: BackendCache, webhook: str | None,
                command: str | None) -> Supervisor:
    import shlex

    notifier = Notifier(webhook=webhook, command=shlex.split(command) if command else None)
    return Supervisor(store, backends, notifier=notifier)


def notify_options(fn: F) -> F:
    fn = click.option("--escalation-webhook", envvar="DISPATCH_ESCALATION_WEBHOOK",
                      default=None, help="POST each escalation as JSON here.")(fn)
    fn = click.option("--escalation-command", envvar="DISPATCH_ESCALATION_COMMAND",
                      default=None, help="Run this argv (split like a shell would, never run "
                                         "by one) with the escalation JSON on stdin.")(fn)
    return fn


@main.command()
@click.argument("spec_path", metavar="SPEC", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--poll", default=1.0, show_default=True, help="Seconds between ticks.")
@store_option
@json_option
@notify_options
@handle_errors
def run(spec_path: Path, poll: float, store_url: str | None, as_json: bool,
        escalation_webhook: str | None, escalation_command: str | None) -> None:
    """Submit SPEC and supervise it in the foreground until it is finished.

    Exit 0 succeeded, 1 failed, 130 cancelled."""
    backends = BackendCache()
    with _store(store_url) as store:
        job_id = _create(store, spec_path, backends)
        sup = _supervisor(store, backends, escalation_webhook, escalation_command)
        _install_stop(sup)
        if not as_json:
            err.print(f"job {job_id}: supervising (Ctrl-C stops supervising; the job's "
                      f"record stays and `dispatch supervise` resumes it)", markup=False)
        job = _run_live(sup, store, job_id, poll, backends, quiet=as_json)
        sup.notifier.close()
        s, unreachable = statuses(store, [job_id], backends)
        if not as_json:
            from dispatch.core.story import story

            for e, text in story(store.read(job_id)):
                click.echo(f"{e.at:%H:%M:%S}  #{e.seq:<3} {text}")
        _print_status(s[0], as_json, unreachable)
        if job.outcome is None:
            sys.exit(EXIT_CANCELLED)
        sys.exit({State.SUCCEEDED: 0, State.FAILED: EXIT_FAILED,
                  State.CANCELLED: EXIT_CANCELLED}[job.outcome.state])


def _run_live(sup: Supervisor, store: RecordStore, job_id: str, poll: float,
              backends: BackendCache, quiet: bool) -> Job:
    if quiet or not sys.stdout.isatty():
        last: list[str] = []

        def on_tick(_: TickReport) -> None:
            rows, _u = statuses(store, [job_id], backends)
            line = f"{rows[0].state.value} {cause_text(rows[0].cause)}"
            if not quiet and (not last or last[-1] != line):
                click.echo(f"{datetime.now(UTC).strftime('%H:%M:%S')} {job_id} {line}")
                last.append(line)
        return sup.run_until_terminal(job_id, poll, on_tick)
    with Live(console=out, refresh_per_second=4) as live:
        def on_tick_live(_: TickReport) -> None:
            rows, _u = statuses(store, [job_id], backends)
            live.update(render_table(rows, utcnow()))
        return sup.run_until_terminal(job_id, poll, on_tick_live)


def _install_stop(sup: Supervisor) -> None:
    def stop(signum: int, _frame: Any) -> None:
        sup.stopping.set()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


@main.command()
@click.option("--poll", default=2.0, show_default=True, help="Seconds between ticks.")
@click.option("--once", is_flag=True, help="Run one tick and exit.")
@scope_options
@store_option
@notify_options
@handle_errors
def supervise(poll: float, once: bool, scopes: tuple[str, ...], lease_s: float,
              store_url: str | None, escalation_webhook: str | None,
              escalation_command: str | None) -> None:
    """Supervise every non-terminal job of the scopes served until SIGTERM/SIGINT (a clean
    stop hands the scopes over): one active supervisor per scope, the others standbys."""
    import shlex

    backends = BackendCache()
    notifier = Notifier(webhook=escalation_webhook,
                        command=shlex.split(escalation_command) if escalation_command else None)
    with _store(store_url) as store:
        serve_scopes(store, backends, scopes, poll=poll, lease_s=lease_s, notifier=notifier,
                     once=once)
        notifier.close()


def _print_status(s: Status, as_json: bool, unreachable: Sequence[str]) -> None:
    if as_json:
        emit_json(status_json(s, "unreachable" if unreachable else "ok"))
        return
    for u in unreachable:
        err.print(f"warning: {u}; state from the record only", markup=False)
    settled = "" if s.settled or not s.state.terminal else " (not yet committed)"
    out.print(f"[bold]{s.job}[/] {s.name}: [{STATE_STYLE[s.state]}]{s.state.value}[/]{settled}"
              f"  cause: {cause_text(s.cause)}")
    if s.cause is not None:
        out.print(f"  provenance: {s.cause.provenance.value}"
                  + (f"  detail: {s.cause.detail}" if s.cause.detail else ""), markup=False)
    out.print(f"  level: {s.level.value}  submissions: {s.submissions}  objects: "
              f"{', '.join(s.objects) or '-'}", markup=False)
    for x in s.escalations:
        out.print(f"  [red]escalation[/] {x.at:%Y-%m-%d %H:%M:%S} {x.message}")
    for seg in s.segments:
        out.print(f"  segment unavailable: {seg}", markup=False)
    if s.supersedes:
        out.print(f"  supersedes {s.supersedes}", markup=False)
    if s.superseded_by:
        out.print(f"  superseded by {s.superseded_by}", markup=False)


@main.command()
@click.argument("job")
@click.option("--no-record", is_flag=True,
              help="Ask only the scheduler (S12): object-only, never terminal.")
@click.option("--backend", type=click.Choice(["local", "slurm", "kubeflow"]), default=None,
              help="With --no-record: which scheduler to ask.")
@store_option
@json_option
@handle_errors
def status(job: str, no_record: bool, backend: str | None, store_url: str | None,
           as_json: bool) -> None:
    """A job's state and the cause behind it (JOB: id or unique name)."""
    backends = BackendCache()
    if no_record:
        if backend is None:
            _fail(EXIT_BAD_INPUT, "--no-record needs --backend")
        # Without a record nothing says how many submissions there were: ask for the first
        # hundred tokens, in one batched call.
        tokens = [token_for(job, n) for n in range(1, 101)]
        disc = backends(backend).discover(tokens, [])
        _print_status(project_objects(job, job, disc.of_job(job)), as_json, [])
        return
    with _store(store_url) as store:
        job_id = store.resolve(job)
        rows, unreachable = statuses(store, [job_id], backends)
        _print_status(rows[0], as_json, unreachable)


@main.command("ls")
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs.")
@click.option("--name", default=None, help="Only jobs with this name.")
@store_option
@json_option
@handle_errors
def ls(show_all: bool, name: str | None, store_url: str | None, as_json: bool) -> None:
    """Jobs: state, cause, submissions, budget used, age."""
    backends = BackendCache()
    with _store(store_url) as store:
        ids = [r.job_id for r in store.list_jobs(live_only=not show_all, name=name)]
        rows, unreachable = statuses(store, ids, backends)
    if as_json:
        emit_json([status_json(s, "unreachable" if unreachable else "ok") for s in rows])
        return
    for u in unreachable:
        err.print(f"warning: {u}; states from the record only", markup=False)
    out.print(render_table(rows, utcnow()))


@main.command()
@click.option("--interval", default=2.0, show_default=True)
@click.option("--all", "show_all", is_flag=True, help="Include finished jobs.")
@store_option
@handle_errors
def watch(interval: float, show_all: bool, store_url: str | None) -> None:
    """`ls`, refreshed in place until Ctrl-C."""
    backends = BackendCache()
    with _store(store_url) as store, Live(console=out, refresh_per_second=2) as live:
        try:
            while True:
                ids = [r.job_id for r in store.list_jobs(live_only=not show_all)]
                rows, _u = statuses(store, ids, backends)
                live.update(render_table(rows, utcnow()))
                time.sleep(interval)
        except KeyboardInterrupt:
            return


@main.command()
@click.argument("job")
@store_option
@json_option
@handle_errors
def history(job: str, store_url: str | None, as_json: bool) -> None:
    """The job's story: every committed event with its time, cause and the scheduler's words."""
    from dispatch.core.story import story

    with _store(store_url) as store:
        job_id = store.resolve(job)
        record = store.read(job_id)
    lines = story(record)
    if as_json:
        emit_json([{"seq": e.seq, "at": e.at.isoformat(), "type": type(e).__name__,
                    "event": to_builtins(e), "text": text} for e, text in lines])
        return
    for e, text in lines:
        click.echo(f"{e.at:%Y-%m-%d %H:%M:%S}  #{e.seq:<3} {text}")


def _person_request(fn: Callable[[RecordStore, str, datetime, str], Job], job: str,
                    store_url: str | None, as_json: bool, done: str) -> None:
    backends = BackendCache()
    with _store(store_url) as store:
        job_id = store.resolve(job)
        # Commit what the scheduler already shows first (e.g. the hold a status forecast),
        # so the request is judged against the job as it is now.
        Supervisor(store, backends).tick([job_id])
        fn(store, job_id, utcnow(), whoami())
        Supervisor(store, backends).tick([job_id])
        rows, unreachable = statuses(store, [job_id], backends)
        if not as_json:
            click.echo(f"{job_id}: {done}")
        _print_status(rows[0], as_json, unreachable)


@main.command()
@click.argument("job")
@store_option
@json_option
@handle_errors
def cancel(job: str, store_url: str | None, as_json: bool) -> None:
    """Cancel a job: its objects are cancelled and the outcome is cancelled."""
    _person_request(request_cancel, job, store_url, as_json, "cancel requested")


@main.command()
@click.argument("job")
@store_option
@json_option
@handle_errors
def resubmit(job: str, store_url: str | None, as_json: bool) -> None:
    """Resolve a recovery hold by submitting the job again (spends no budget)."""
    _person_request(resubmit_from_hold, job, store_url, as_json, "resubmit requested")


@main.command("give-up")
@click.argument("job")
@store_option
@json_option
@handle_errors
def give_up_cmd(job: str, store_url: str | None, as_json: bool) -> None:
    """Resolve a recovery hold by failing the job (with an escalation)."""
    _person_request(give_up, job, store_url, as_json, "given up")


@main.command("supersede")
@click.argument("job")
@store_option
@json_option
@handle_errors
def supersede_cmd(job: str, store_url: str | None, as_json: bool) -> None:
    """Run a finished job again as a new job that names the old one (S7)."""
    backends = BackendCache()
    with _store(store_url) as store:
        job_id = store.resolve(job)
        old = fold(store.read(job_id), utcnow())
        new_id = supersede(store, job_id, utcnow(), whoami(),
                           backends(old.spec.backend).declarations())
        Supervisor(store, backends).tick([new_id])
        rows, unreachable = statuses(store, [new_id], backends)
        if not as_json:
            click.echo(f"{new_id} supersedes {job_id}")
        _print_status(rows[0], as_json, unreachable)


@main.command()
@click.argument("job")
@click.option("--follow", "-f", is_flag=True)
@store_option
@handle_errors
def logs(job: str, follow: bool, store_url: str | None) -> None:
    """Print the job's logs where the backend keeps them (latest submission)."""
    backends = BackendCache()
    with _store(store_url) as store:
        job_id = store.resolve(job)
        j = fold(store.read(job_id), utcnow())
    cur = j.current
    if cur is None or cur.ref is None:
        _fail(EXIT_NOT_FOUND, f"job {job_id} has no object yet")
    backend = backends(j.spec.backend)
    paths = getattr(backend, "logs", None)
    if paths is None:
        _fail(EXIT_BAD_INPUT, f"the {j.spec.backend} backend keeps no logs dispatch can read")
    files = [Path(p) for p in paths(cur.ref)]
    _cat(files, follow)


def _cat(files: Sequence[Path], follow: bool) -> None:
    offsets = {f: 0 for f in files}
    while True:
        for f in files:
            try:
                with f.open("rb") as fh:
                    fh.seek(offsets[f])
                    chunk = fh.read()
            except OSError:
                continue
            if chunk:
                offsets[f] += len(chunk)
                prefix = f"[{f.name}] " if len(files) > 1 else ""
                for line in chunk.decode(errors="replace").splitlines():
                    click.echo(prefix + line)
        if not follow:
            return
        time.sleep(0.5)


@main.group()
def local() -> None:
    """The local backend."""


@local.command("inject")
@click.argument("job")
@click.argument("what", type=click.Choice(["preempt", "lose-node"]))
@click.argument("node", type=int, required=False)
@store_option
@handle_errors
def local_inject(job: str, what: str, node: int | None, store_url: str | None) -> None:
    """Make the local scheduler preempt the job, or lose one of its nodes."""
    backends = BackendCache()
    with _store(store_url) as store:
        job_id = store.resolve(job)
        j = fold(store.read(job_id), utcnow())
    if j.spec.backend != "local":
        _fail(EXIT_BAD_INPUT, f"job {job_id} runs on {j.spec.backend}, not local")
    cur = j.current
    if cur is None or cur.ref is None:
        _fail(EXIT_STATE, f"job {job_id} has no local object to inject into yet")
    from dispatch.backends.local import LocalBackend

    backend = backends("local")
    assert isinstance(backend, LocalBackend)
    backend.inject(cur.ref, "preempt" if what == "preempt" else "lose-node", node)
    click.echo(f"{job_id}: injected {what}" + (f" on node {node}" if node is not None else "")
               + f" into {cur.ref}")


def _mount_segment() -> None:
    try:
        from dispatch.segment_health.commands import register
    except ImportError:  # pragma: no cover - the segment package always ships
        return
    register(main)


_mount_segment()
register_supervisors(main)


if __name__ == "__main__":  # pragma: no cover
    main()

