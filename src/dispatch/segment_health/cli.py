"""``dispatch segment ...``: the segment health commands.

``segment`` is a module-level click group so the main CLI can mount it
(``main.add_command(segment)``) and add mark / clear / list beside ``check``.

``segment check`` is for sbatch scripts and launchers without a built-in consumer::

    dispatch segment check --dir /shared/job/segment-health || exit 1

Exit status: 0 proceed (including not installed and fail open), 1 excluded, 2 usage error
(e.g. a relative directory). One line on stdout says why; the installation line and any
warning go to stderr as log records.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

import click

from dispatch.segment_health.artifact import DirectoryNotAbsolute
from dispatch.segment_health.consumer import check as run_check

EXIT_PROCEED = 0
EXIT_EXCLUDED = 1
DIR_ENV = "DISPATCH_SEGMENT_DIR"


segment = click.Group(
    "segment",
    help="Segment health decisions: keep an excluded allocation unit out of rendezvous.",
)


class _EchoHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        click.echo(self.format(record), err=True)


@contextmanager
def _stderr_logger(name: str) -> Iterator[logging.Logger]:
    log = logging.getLogger(name)
    handler = _EchoHandler()
    handler.setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    saved = (log.level, log.propagate)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False  # exactly once on stderr, whatever the root logger does
    try:
        yield log
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]


@segment.command("check")
@click.option(
    "--dir",
    "directory",
    envvar=DIR_ENV,
    show_envvar=True,
    default=None,
    metavar="DIR",
    help="Absolute decision directory (default: $DISPATCH_SEGMENT_DIR; unset disables).",
)
def check_command(directory: str | None) -> None:
    """Exit 1 if this allocation unit is excluded, else 0 (one line says why)."""
    with _stderr_logger("dispatch.segment_health") as log:
        try:
            result = run_check(directory, os.environ, log)
        except DirectoryNotAbsolute as exc:
            raise click.BadParameter(str(exc), param_hint="--dir") from exc
    click.echo(result.reason)
    click.get_current_context().exit(EXIT_EXCLUDED if result.excluded else EXIT_PROCEED)
