"""Commands around jobs rather than on one: `policy check`, `supervise`, `local inject`."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from dispatch.backends.registry import declarations_for, names, traits
from dispatch.cli.common import (
    SECONDS,
    emit_json,
    handle_errors,
    json_option,
    notify_options,
    open_service,
    store_option,
)
from dispatch.cli.supervisors import scope_options, serve_scopes
from dispatch.core.policy import Plan, PolicyError, RecoveryPolicy
from dispatch.core.spec import SpecError, parse_policy, parse_spec
from dispatch.errors import EXIT_BAD_INPUT, BadInput, StateConflict
from dispatch.service.specfile import load_yaml_file
from dispatch.supervise.escalations import Notifier, split_command


@click.group()
def policy() -> None:
    """Recovery policies."""


@policy.command("check")
@click.argument("file", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--backend", type=click.Choice(names()), default="local", show_default=True)
@json_option
@handle_errors
def policy_check(file: Path, backend: str, as_json: bool) -> None:
    """Validate a policy file (or a job spec's policy: section)."""
    try:
        pol = _policy_from_file(file)
    except (PolicyError, SpecError) as e:
        if not as_json:
            raise
        problems = e.problems if isinstance(e, PolicyError) else [str(e)]
        emit_json({"valid": False, "problems": problems, "uncovered": [], "unenforced": []})
        sys.exit(EXIT_BAD_INPUT)
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
    """A policy file, or a job spec whose policy: section is checked (the file read once)."""
    data = load_yaml_file(file)
    if isinstance(data, dict) and "command" in data:
        return parse_spec(data, str(file), backends=traits()).policy
    return parse_policy(data, str(file))


@click.command()
@click.option("--poll", type=SECONDS, default=2.0, show_default=True,
              help="Seconds between ticks.")
@click.option("--once", is_flag=True, help="Run one tick and exit, printing what it did (a "
              "summary on a terminal; JSON with --json or on a pipe).")
@scope_options
@store_option
@json_option
@notify_options
@handle_errors
def supervise(poll: float, once: bool, scopes: tuple[str, ...], lease_s: float,
              store_url: str | None, as_json: bool, escalation_webhook: str | None,
              escalation_command: str | None) -> None:
    """Supervise every unfinished job of the scopes served until SIGTERM/SIGINT (a clean
    stop hands the scopes over): one active supervisor per scope, the others standbys."""
    notifier = Notifier(webhook=escalation_webhook,
                        command=split_command(escalation_command) if escalation_command
                        else None)
    with open_service(store_url) as service:
        serve_scopes(service.store, service.backends, scopes, poll=poll, lease_s=lease_s,
                     notifier=notifier, once=once, as_json=True if as_json else None)
        notifier.close()


@click.group()
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
    from dispatch.backends.local import LocalBackend

    with open_service(store_url) as service:
        j = service.job(job)
        if j.spec.backend != "local":
            raise BadInput(f"job {j.id} runs on {j.spec.backend}, not local")
        cur = j.current
        if cur is None or cur.ref is None:
            raise StateConflict(f"job {j.id} has no local object to inject into yet")
        backend = service.backends("local")
        assert isinstance(backend, LocalBackend)
        backend.inject(cur.ref, "preempt" if what == "preempt" else "lose-node", node)
    click.echo(f"{j.id}: injected {what}" + (f" on node {node}" if node is not None else "")
               + f" into {cur.ref}")


COMMANDS = (policy, supervise, local)
