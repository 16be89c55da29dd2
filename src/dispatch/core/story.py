"""A job's record told as a story, one line per event: `dispatch history`.

Told ``folded`` (the CLI's default), an execution's checkpoints are one line, where its last
checkpoint stands: a training that checkpoints every few seconds would otherwise bury the
story under them (issue 48). Folding only ever replaces checkpoint lines; every other
event keeps its own line, in record order.

Each line says what was known when its event was written (issue 39, docs/semantics.md
"What the record's words claim"): an event written before its act says the act was decided
("intended", "ordered"), never that it happened; what the scheduler later shows (an object
bound, an execution ended, a gate opened) is what says it did."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import assert_never

import msgspec

from dispatch.core import events as ev
from dispatch.core.app_error import one_line
from dispatch.core.model import Cause
from dispatch.core.policy import Rule, rule_name


def _cause(c: Cause | None) -> str:
    if c is None:
        return ""
    parts = [c.kind.value, f"({c.provenance.value}"
             + (f" {c.actor}" if c.actor else "") + ")"]
    if c.exit_code is not None:
        parts.append(f"exit {c.exit_code}")
    if c.detail:
        parts.append(f"— {c.detail!r}")
    if c.note:
        parts.append(f"[dispatch: {c.note}]")
    return " ".join(parts)


def line(e: ev.Event, rules: Sequence[Rule] = ()) -> str:  # noqa: C901 - one case per event type
    if isinstance(e, ev.JobCreated):
        text = (f"created '{e.spec.name}' on {e.spec.backend}, {e.spec.nodes} node(s), "
                f"{len(e.spec.policy.rules)} recovery rule(s)"
                + (f", by {e.actor}" if e.actor else ""))
        return text + (f"; supersedes {e.supersedes}" if e.supersedes else "")
    if isinstance(e, ev.SubmissionIntended):
        why = f" to recover from {_cause(e.cause)}" if e.cause else ""
        gate = " (gated until the old object ends)" if e.gated else ""
        avoid = (f", asking the scheduler to avoid node(s) {', '.join(e.exclude_nodes)}"
                 if e.exclude_nodes else "")
        return f"submission {e.submission} intended{why}{gate}{avoid}"
    if isinstance(e, ev.SubmissionAttempted):
        return f"submission {e.submission}: submit to be retried, claimed by {e.supervisor}"
    if isinstance(e, ev.SubmissionBound):
        return f"submission {e.submission} is scheduler object {e.ref}"
    if isinstance(e, ev.SubmissionRejected):
        return f"submission {e.submission} rejected by the scheduler: {_cause(e.cause)}"
    if isinstance(e, ev.ExecutionEnded):
        tail = "" if e.final else " (the scheduler runs it again)"
        return (f"object {e.ref} (submission {e.submission}) execution {e.execution} ended: "
                f"{_cause(e.cause)}{tail}")
    if isinstance(e, ev.ApplicationErrorRecorded):
        err = e.error
        tail = f" [dispatch: {err.note}]" if err.note else ""
        return (f"application error (submission {e.submission} execution {e.execution}, "
                f"from {err.source.value}): {one_line(err) or '(no words)'}{tail}")
    if isinstance(e, ev.ExecutionStarted):
        when = f" (the scheduler says since {e.started.isoformat()})" if e.started else ""
        return (f"submission {e.submission} execution {e.execution} running on "
                f"{e.nodes} node(s){when}")
    if isinstance(e, ev.CheckpointRecorded):
        return (f"checkpoint at step {e.step} (submission {e.submission} execution "
                f"{e.execution}, written {e.written.isoformat()})")
    if isinstance(e, ev.RecoveryStarted):
        native = " by the backend" if e.native else ""
        return (f"RECOVERING: rule {rule_name(rules, e.rule)}: {e.action.value}{native} on "
                f"{_cause(e.cause)}")
    if isinstance(e, ev.HoldPlaced):
        kind = "recovery hold" if e.recovery else "hold"
        return f"HELD: {kind} on {_cause(e.cause)}; waits for resubmit, cancel or give-up"
    if isinstance(e, ev.HoldReleased):
        return f"hold resolved by {e.actor or 'a person'}: resubmit"
    if isinstance(e, ev.CancelRequested):
        return f"cancel requested by {e.actor or 'a person'}"
    if isinstance(e, ev.CancelSent):
        return f"cancel ordered for object {e.ref} (its end on the scheduler says it landed)"
    if isinstance(e, ev.GiveUpRequested):
        return f"given up by {e.actor or 'a person'}"
    if isinstance(e, ev.GateOpened):
        return f"gate opened for submission {e.submission} (object {e.ref})"
    if isinstance(e, ev.StopRequested):
        return f"stop ordered for object {e.ref}: {_cause(e.cause)}"
    if isinstance(e, ev.DuplicateStopped):
        return (f"duplicate object {e.ref} (token {e.token}): stop ordered: "
                f"{_cause(e.cause)}")
    if isinstance(e, ev.OutcomeCommitted):
        return f"{e.state.value.upper()}: {_cause(e.cause)}"
    if isinstance(e, ev.EscalationRaised):
        return f"ESCALATION: {e.message}"
    if isinstance(e, ev.Superseded):
        return f"superseded by {e.by}" + (f" ({e.actor})" if e.actor else "")
    if isinstance(e, ev.SegmentPublished):
        return (f"segment health: unit {e.unit_job_id}.{e.task_id} decided unavailable by "
                f"{e.actor or 'dispatch'}: {e.reason}"
                + (f" (nodes {', '.join(e.nodes)})" if e.nodes else ""))
    if isinstance(e, ev.SegmentCleared):
        return (f"segment health: unit {e.unit_job_id}.{e.task_id} cleared by "
                f"{e.actor or 'dispatch'}" + (f": {e.reason}" if e.reason else ""))
    assert_never(e)  # mypy: an event type added without its line


def story(record: Sequence[ev.Event], *, folded: bool = False
          ) -> list[tuple[ev.Event, str]]:
    """One line per event; a rule is named as ``Rule.name`` says, from the job's spec (its
    JobCreated); ``folded``: an execution's two or more checkpoints as one line, at the place
    of its last one (``checkpoints_line``)."""
    first = record[0] if record else None
    rules = first.spec.policy.rules if isinstance(first, ev.JobCreated) else ()
    if not folded:
        return [(e, line(e, rules)) for e in record]
    runs: dict[tuple[int, int], list[ev.CheckpointRecorded]] = {}
    for e in record:
        if isinstance(e, ev.CheckpointRecorded):
            runs.setdefault((e.submission, e.execution), []).append(e)
    out: list[tuple[ev.Event, str]] = []
    for e in record:
        if isinstance(e, ev.CheckpointRecorded):
            run = runs[(e.submission, e.execution)]
            if len(run) > 1:
                if e is run[-1]:
                    out.append((e, checkpoints_line(run)))
                continue
        out.append((e, line(e, rules)))
    return out


def checkpoints_line(run: Sequence[ev.CheckpointRecorded]) -> str:
    """``checkpoints at steps 3–117 (40, every ~3 s) ...``: one execution's checkpoints, the
    line standing at (and timed by) the last of them."""
    first, last = run[0], run[-1]
    steps = sorted(c.step for c in run)
    span = (f"step {steps[0]}" if steps[0] == steps[-1]
            else f"steps {steps[0]}–{steps[-1]}")
    every = ""
    if last.written > first.written:
        every = f", every ~{span_text((last.written - first.written) / (len(run) - 1))}"
    return (f"checkpoints at {span} ({len(run)}{every}; submission {last.submission} "
            f"execution {last.execution}), the last at step {last.step}")


def span_text(d: timedelta) -> str:
    """A span as a person says it roughly: ``0.5 s``, ``3 s``, ``2 min``, ``1.5 h``, ``2 d``."""
    secs = d.total_seconds()
    if secs < 0.1:
        return "<0.1 s"
    if secs < 1:
        return f"{secs:.1f} s"
    if secs < 120:
        return f"{secs:.0f} s"
    if secs < 7200:
        return f"{secs / 60:.0f} min"
    if secs < 2 * 86400:
        return f"{secs / 3600:.1f} h"
    return f"{secs / 86400:.0f} d"


class Running(msgspec.Struct, frozen=True, kw_only=True):
    """The execution running now, as the record says (``dispatch status``): when it started
    (the scheduler's word when it gave one, else when dispatch saw it), and its latest
    checkpoint (None when it reported none)."""

    submission: int
    execution: int
    started: datetime
    checkpoint_step: int | None = None
    checkpoint_written: datetime | None = None


def running(record: Sequence[ev.Event]) -> Running | None:
    """The latest execution that started and whose end the record does not hold (None when
    none: not started yet, ended, or the job's outcome is committed)."""
    found: Running | None = None
    for e in record:
        if isinstance(e, ev.ExecutionStarted):
            found = Running(submission=e.submission, execution=e.execution,
                            started=e.started or e.at)
        elif isinstance(e, ev.ExecutionEnded | ev.OutcomeCommitted) and found is not None \
                and (isinstance(e, ev.OutcomeCommitted)
                     or (e.submission, e.execution) == (found.submission, found.execution)):
            found = None
        elif isinstance(e, ev.CheckpointRecorded) and found is not None \
                and (e.submission, e.execution) == (found.submission, found.execution) \
                and (found.checkpoint_step is None or e.step >= found.checkpoint_step):
            found = msgspec.structs.replace(found, checkpoint_step=e.step,
                                            checkpoint_written=e.written)
    return found
