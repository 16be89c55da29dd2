"""The job commands: submit, run, status, resubmit, give-up, supersede (cancel and prune:
cli/bulk.py; ls, watch, history, logs: cli/reading.py). Each parses its input, calls the
service, renders the result."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from dispatch.cli import render
from dispatch.cli.common import (
    SECONDS,
    emit_json,
    error_text,
    handle_errors,
    json_option,
    notify_options,
    open_service,
    store_option,
)
from dispatch.core.model import State
from dispatch.errors import (
    EXIT_CANCELLED,
    EXIT_DETACHED,
    EXIT_FAILED,
    EXIT_UNREACHABLE,
    BadInput,
    DispatchError,
)
from dispatch.service.views import (
    SCHEDULER_UNREACHABLE,
    JobView,
    cause_text,
    status_json,
)
from dispatch.support.clock import utcnow

# Imported where used: the read commands (status, ls, history) load no backend, supervisor,
# notifier or spec-file code.
if TYPE_CHECKING:
    from dispatch.core.record import Job
    from dispatch.core.spec import JobSpec
    from dispatch.service import Service
    from dispatch.supervise.escalations import Notifier
    from dispatch.supervise.leases import Supervision
    from dispatch.supervise.loop import TickReport

EXIT_BY_OUTCOME = {State.SUCCEEDED: 0, State.FAILED: EXIT_FAILED, State.CANCELLED: EXIT_CANCELLED}
SPEC = click.Path(dir_okay=False, path_type=Path)


def load_spec(path: Path) -> JobSpec:
    # Imported here: YAML is only for the commands that read a spec, not for status or ls.
    from dispatch.service.specfile import load_spec as load

    return load(path)


def show(view: JobView, as_json: bool, service: Service | None = None,
         verbose: bool = False) -> None:
    """The status (``verbose``: the application's traceback tail too); with ``service``, a
    job held for a person also gets the commands that resolve its hold, and every job its
    running execution (started, elapsed, last checkpoint) and goodput, from its record."""
    s = view.status
    facts = None
    if service is not None and s is not None and view.error is None:
        from dispatch.service.running import running_and_goodput, running_json

        facts = running_and_goodput(service.store, s.job, utcnow())
    if as_json:
        doc = status_json(view)
        if facts is not None:
            doc["running"] = running_json(facts[0])
        emit_json(doc)
        return
    extra: list[render.Line] = []
    if service is not None and s is not None and s.state is State.HELD \
            and service.job(s.job).hold is not None:
        extra = render.next_steps(s.job)
    if facts is not None:
        extra = [*extra, *render.running_lines(facts[0], utcnow()),
                 *([render.line(render.visible(f"  {facts[1]}"))] if facts[1] else [])]
    if verbose and s is not None and s.backend == "kubeflow":
        extra = [*extra, *render.kubernetes_lines()]
    render.print_status(view, extra, verbose)


def _warn_unenforced(service: Service, spec: JobSpec, source: Path) -> None:
    from dispatch.service import prepare

    # Only the plan: the cluster is asked once, by the submit itself (an unreachable one
    # would cost its deadline twice).
    _, plan = prepare(spec, service.backends, ready=False, source=str(source))
    for line in plan.unenforced():
        render.err().print(f"warning: {line} (an execution ending with it fails the job)")


@click.command()
@click.argument("spec_path", metavar="SPEC", type=SPEC)
@click.option("--dry-run", is_flag=True, help="Print what would reach the scheduler; submit "
              "nothing.")
@store_option
@json_option
@notify_options
@handle_errors
def submit(spec_path: Path, dry_run: bool, store_url: str | None, as_json: bool,
           escalation_webhook: str | None, escalation_command: str | None) -> None:
    """Record a job and make its first submission (a running `supervise` takes it on).

    Exits 4 when the scheduler could not be reached: the job is recorded all the same, and
    a running `dispatch supervise` submits it once the scheduler answers."""
    spec = load_spec(spec_path)
    if dry_run:  # needs no record store
        from dispatch.backends.registry import Backends
        from dispatch.service import dry_run_of

        backends = Backends()
        try:
            click.echo(dry_run_of(spec, backends, str(spec_path)).render(), nl=False)
        finally:
            backends.close()
        return
    with open_service(store_url) as service:
        _warn_unenforced(service, spec, spec_path)
        notifier = _notifier(escalation_webhook, escalation_command)
        job_id, unreachable = service.submit_reporting(spec, str(spec_path),
                                                       notifier=notifier)
        notifier.close()
        view = service.view(job_id)
        show(view, as_json)
        if not as_json:
            _say_unsupervised(service, view)
    # A root that could not be made reads as an empty one afterwards: the submission's own
    # word counts too, not only what the view shows now.
    problem = view.problem if view.scheduler == SCHEDULER_UNREACHABLE else (
        unreachable[0] if unreachable else None)
    if problem is not None:
        # Exit 4, as `status` does: the job is recorded (nothing is lost) and a supervisor
        # submits it, or carries it on, once its scheduler answers.
        click.echo(f"error: job {job_id} is recorded, but its scheduler could not be reached "
                   f"({problem}); a running `dispatch supervise` submits it (or carries "
                   "it on) once the scheduler answers", err=True)
        sys.exit(EXIT_UNREACHABLE)


def _say_unsupervised(service: Service, view: JobView) -> None:
    """On stderr: no live supervisor serves this unfinished job's scope, and what to run."""
    from dispatch.cli.notes import unsupervised_notes

    for note in unsupervised_notes(service, [view]):
        click.echo(note, err=True)


def _notifier(webhook: str | None, command: str | None) -> Notifier:
    from dispatch.supervise.escalations import Notifier, split_command

    return Notifier(webhook=webhook, command=split_command(command) if command else None)


def install_stop(sup: Supervision) -> None:
    import signal

    def stop(signum: int, _frame: Any) -> None:
        sup.stop()
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


@click.command()
@click.argument("spec_path", metavar="SPEC", type=SPEC)
@click.option("--poll", type=SECONDS, default=1.0, show_default=True,
              help="Seconds between ticks.")
@click.option("--logs", "with_logs", is_flag=True,
              help="Print the job's output on stdout as it runs (across submissions, a "
                   "`== dispatch: submission N after CAUSE` line at each); states, history "
                   "and the final status go to stderr. Not with --json.")
@store_option
@json_option
@notify_options
@handle_errors
def run(spec_path: Path, poll: float, with_logs: bool, store_url: str | None, as_json: bool,
        escalation_webhook: str | None, escalation_command: str | None) -> None:
    """Submit SPEC and supervise it in the foreground until it is finished.

    Exit 0 succeeded, 1 failed, 130 cancelled; 75 when supervising stopped first (Ctrl-C,
    SIGTERM): the job keeps running (`dispatch cancel JOB` stops it)."""
    if with_logs and as_json:
        raise BadInput("--logs and --json both want stdout (the job's output, the status "
                       "document): use one; `dispatch logs JOB -f` follows the output apart")
    spec = load_spec(spec_path)
    with open_service(store_url) as service:
        _warn_unenforced(service, spec, spec_path)
        job_id = service.create(spec, str(spec_path))
        notifier = _notifier(escalation_webhook, escalation_command)
        code = _foreground(service, job_id, store_url, poll=poll, with_logs=with_logs,
                           as_json=as_json, notifier=notifier)
    sys.exit(code)


def _foreground(service: Service, job_id: str, store_url: str | None, *, poll: float,
                with_logs: bool, as_json: bool, notifier: Notifier) -> int:
    """Supervise a recorded job in the foreground until its outcome (``run``, ``supersede
    --run``): its story and status printed at the end; the exit code to end with."""
    sup, scope = service.supervision_of(job_id, poll=poll, notifier=notifier)
    install_stop(sup)
    if not as_json:
        render.err().print(f"job {job_id}: supervising (Ctrl-C stops supervising; the job "
                           "keeps running and `dispatch supervise` resumes it)")
    pump = LogPump(store_url, job_id) if with_logs else None
    job: Job | None = None
    try:
        with escalations_said():
            job = _run_live(sup, scope, service, job_id, quiet=as_json, to_err=with_logs)
    finally:
        if pump is not None:  # after the outcome is committed: the output to its end
            pump.finish(ended=job is not None and job.outcome is not None)
    notifier.close()
    if not as_json:
        for e, text in service.history(job_id, folded=True):
            click.echo(render.history_line(e, text, "%H:%M:%S"), err=with_logs)
    if with_logs:
        for line in render.status_lines(service.view(job_id)):
            render.err().print(line.text())
    else:
        show(service.view(job_id), as_json)
    if job is None or job.outcome is None:
        # Supervising stopped (Ctrl-C, SIGTERM); the job did not: say so, with its own code.
        click.echo(f"stopped supervising; the job keeps running (`dispatch cancel {job_id}` "
                   "stops it)", err=True)
        return EXIT_DETACHED
    return EXIT_BY_OUTCOME[job.outcome.state]


@contextlib.contextmanager
def escalations_said() -> Iterator[None]:
    """While a person watches the job (``run``): an escalation, or a notifier's warning, is
    a line for them on stderr (``14:02:07 escalation: job ...``), not the log's raw record
    (``<time> dispatch.escalation ERROR ...``). The record and the notifiers are unchanged."""
    import logging

    class Said(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            text = record.getMessage().removeprefix("ESCALATION ")
            word = "escalation" if record.levelno >= logging.ERROR else "warning"
            render.err().print(render.Line((
                f"{render.when(utcnow(), '%H:%M:%S')} ", (word, "red"),
                f": {render.visible(text)}")).text())

    logger = logging.getLogger("dispatch.escalation")
    handler = Said()
    propagate = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = propagate


class LogPump:
    """``run --logs``: the job's output printed on stdout from a thread of its own, with the
    follower of ``dispatch logs -f`` (api.follow_log_text), while the supervisor ticks in the main
    thread (never stalled by a read). ``finish`` waits for the follower: once the outcome is
    committed it reads every stream to its end and stops by itself; if supervising stopped
    first (Ctrl-C) it is told to stop after one more read."""

    def __init__(self, store_url: str | None, job_id: str) -> None:
        self.store_url = store_url
        self.job_id = job_id
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._pump, name="dispatch-run-logs",
                                       daemon=True)
        self.thread.start()

    def _pump(self) -> None:
        from dispatch.api import follow_log_text

        out = click.get_binary_stream("stdout")
        try:
            for text in follow_log_text(self.store_url, self.job_id, follow=True,
                                        stop=self.stop, from_first=True):
                out.write(text.encode())
                out.flush()
        except DispatchError as e:  # the job goes on being supervised; its output stops here
            render.err().print(f"warning: logs: {error_text(e)}")
        except OSError:  # stdout closed (a pipe whose reader left)
            pass

    def finish(self, *, ended: bool) -> None:
        if not ended:
            self.stop.set()
        self.thread.join()


def _run_live(sup: Supervision, scope: str, service: Service, job_id: str,
              quiet: bool, to_err: bool = False) -> Job:
    """Supervise the job's scope under its lease until the job's outcome is committed; while
    another supervisor is active there, watch it act (said once, on stderr)."""
    job = service.job(job_id)
    standby_said: list[bool] = []

    def done() -> bool:
        nonlocal job
        job = service.job(job_id)
        return job.terminal

    def say_standby(reports: dict[str, TickReport]) -> None:
        if scope in reports or standby_said:
            return
        lease = sup.book.get(scope)
        if lease is not None and lease.active and not quiet:
            render.err().print(f"job {job_id}: {lease.holder} is the active supervisor of "
                               f"{scope}; watching it act (this takes over if it stops)")
        standby_said.append(True)

    if quiet or to_err or not sys.stdout.isatty():
        last: list[str] = []

        def on_tick(reports: dict[str, TickReport]) -> None:
            say_standby(reports)
            s = service.view(job_id).status
            line = (f"{s.state.value} {render.visible(cause_text(s.cause))}" if s
                    else "record unusable")
            if not quiet and (not last or last[-1] != line):
                click.echo(f"{render.when(utcnow(), '%H:%M:%S')} {job_id} {line}", err=to_err)
                last.append(line)
        sup.serve_until(done, on_tick)
        return job
    from rich.live import Live

    with Live(console=render.out(), refresh_per_second=4) as live:
        def on_tick_live(reports: dict[str, TickReport]) -> None:
            say_standby(reports)
            live.update(render.table([service.view(job_id)], utcnow()))
        sup.serve_until(done, on_tick_live)
    return job


@click.command()
@click.argument("job")
@click.option("--no-record", is_flag=True,
              help="Ask only the scheduler: object-only, never terminal.")
@click.option("--backend", default=None, help="With --no-record: which scheduler to ask.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also the application error's traceback tail, and for a kubeflow job "
              "the kubeconfig file(s), context, cluster and user asked through.")
@store_option
@json_option
@handle_errors
def status(job: str, no_record: bool, backend: str | None, store_url: str | None,
           as_json: bool, verbose: bool) -> None:
    """A job's state and the cause behind it (JOB: id or unique name).

    Exits 4 when its scheduler cannot be asked (the record's last committed state is shown)."""
    if no_record:
        if backend is None:
            raise BadInput("--no-record needs --backend")
        from dispatch.backends.registry import Backends
        from dispatch.core.model import token_for
        from dispatch.core.status import project_objects
        from dispatch.support.deadline import read_deadline, tools_within

        backends = Backends()
        try:
            # Without a record nothing says how many submissions there were: ask for the
            # first hundred tokens, in one batched call, its tools killed at the read's
            # deadline (R5: exit 4, as a scheduler that cannot be asked).
            tokens = [token_for(job, n) for n in range(1, 101)]
            with tools_within(read_deadline()):
                disc = backends(backend).discover(tokens, [])
            show(JobView(project_objects(job, job, disc.of_job(job))), as_json)
        finally:
            backends.close()
        return
    with open_service(store_url) as service:
        view = service.view(job)
        show(view, as_json, service, verbose)
        if not as_json:
            _say_unsupervised(service, view)
        try:
            view.checked()  # an unreachable scheduler or an untrusted record: its exit code
        except DispatchError as e:
            if not as_json:
                raise
            sys.exit(e.exit_code)  # one JSON document: the status already says why


def _request(what: str, job: str, store_url: str | None, as_json: bool) -> None:
    with open_service(store_url) as service:
        view = getattr(service, what)(job)
        if not as_json:
            click.echo(f"{view.job}: {what.replace('_', '-')} requested; the supervisor "
                       "carries it out")
        show(view, as_json)


@click.command()
@click.argument("job")
@store_option
@json_option
@handle_errors
def resubmit(job: str, store_url: str | None, as_json: bool) -> None:
    """Resolve a recovery hold by submitting the job again (spends no budget)."""
    _request("resubmit", job, store_url, as_json)


@click.command("give-up")
@click.argument("job")
@store_option
@json_option
@handle_errors
def give_up(job: str, store_url: str | None, as_json: bool) -> None:
    """Resolve a recovery hold by failing the job (with an escalation)."""
    _request("give_up", job, store_url, as_json)


@click.command()
@click.argument("job")
@click.option("--run", "foreground", is_flag=True,
              help="Supervise the new job in the foreground as `dispatch run` does (its exit "
                   "codes, its Ctrl-C).")
@click.option("--poll", type=SECONDS, default=1.0, show_default=True,
              help="With --run: seconds between ticks.")
@click.option("--logs", "with_logs", is_flag=True,
              help="With --run: print the job's output on stdout as it runs (as `run --logs`).")
@store_option
@json_option
@notify_options
@handle_errors
def supersede(job: str, foreground: bool, poll: float, with_logs: bool, store_url: str | None,
              as_json: bool, escalation_webhook: str | None,
              escalation_command: str | None) -> None:
    """Run a finished job again as a new job that names the old one (JOB: an id, a unique
    id prefix, or a name: the newest job of its supersede chain). Prints the new job."""
    if with_logs and (as_json or not foreground):
        raise BadInput("--logs goes with --run, and not with --json")
    with open_service(store_url) as service:
        old_id = service.resolve(job)  # before: once superseded, the name means the new job
        notifier = _notifier(escalation_webhook, escalation_command)
        new_id = service.supersede(old_id, notifier=notifier)
        if foreground or not as_json:  # with --run, on stderr: stdout is the job's
            click.echo(f"{new_id} supersedes {old_id}", err=foreground)
        if foreground:
            sys.exit(_foreground(service, new_id, store_url, poll=poll, with_logs=with_logs,
                                 as_json=as_json, notifier=notifier))
        notifier.close()
        show(service.view(new_id), as_json)


COMMANDS = (submit, run, status, resubmit, give_up, supersede)
