"""What the record learns from a look that decides nothing (G1, G3): which executions ran and
the training's latest durable checkpoint. Pure; kept beside decide() (not in it) because no
rule of S6-S15 depends on these events: they only feed goodput (core/goodput.py)."""

from __future__ import annotations

from dispatch.core.decisions import Decision, RecordCheckpoint, RecordStart
from dispatch.core.held_runs import renumbered
from dispatch.core.model import CauseKind, Discovery, ObjectReport, State, parse_token
from dispatch.core.record import Job, Submission


def _object_of(s: Submission, mine: dict[int, ObjectReport],
               discovery: Discovery) -> ObjectReport | None:
    if s.ref is not None:
        found = discovery.get(s.ref)
        if found is not None:
            return found
        obj = mine.get(s.number)
        return obj if obj is not None and obj.ref == s.ref else None
    return mine.get(s.number)


def observe(job: Job, discovery: Discovery | None) -> list[Decision]:
    """The starts and checkpoints the scheduler's look shows that the record lacks."""
    if discovery is None or job.outcome is not None:
        return []
    mine: dict[int, ObjectReport] = {}
    for o in discovery.of_job(job.id):
        parsed = parse_token(o.token or "")
        if parsed is not None and o.cause.kind is not CauseKind.DUPLICATE:
            mine.setdefault(parsed[1], o)
    out: list[Decision] = []
    for s in job.submissions:
        found = _object_of(s, mine, discovery)
        if found is not None:
            out += _runs(job, s, renumbered(found, s.held_ends))
    return out


def _runs(job: Job, s: Submission, o: ObjectReport) -> list[Decision]:
    out: list[Decision] = []
    started = set(s.executions_started)
    last = o.executions[-1] if o.executions else None
    runs = [(ex.index, ex.started_at, len(ex.nodes)) for ex in o.executions
            if ex.started_at is not None or (ex is last and o.state is State.RUNNING)]
    if last is None and o.state is State.RUNNING and not o.gated:
        runs.append((0, None, len(o.nodes)))
    for index, at, nodes in runs:
        if index not in started:
            started.add(index)
            out.append(RecordStart(submission=s.number, execution=index, started=at,
                                   nodes=nodes or job.spec.nodes))
    newest = s.checkpoint
    for ex in o.executions:
        c = ex.progress.checkpoint if ex.progress is not None else None
        if c is not None and (newest is None or (ex.index, c.step) > newest):
            newest = (ex.index, c.step)
            out.append(RecordCheckpoint(submission=s.number, execution=ex.index,
                                        step=c.step, written=c.written))
    return out
