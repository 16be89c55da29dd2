"""``dispatch segment mark|clear|list``: operator decisions, recorded in the job's record.

Mounted on the main CLI beside ``segment check`` (which needs no store: it runs inside the
allocation). Each publication and clearing is appended to the job's record first (who,
why, when), then the artifact is written, so `dispatch history` tells every decision.
"""

from __future__ import annotations

import json
from datetime import datetime

import click

from dispatch import events as ev
from dispatch.decide import allocation_unit
from dispatch.record import Job, fold
from dispatch.segment_health.cli import segment
from dispatch.segment_health.publisher import clear, list_decisions, make_decision, publish
from dispatch.stores.base import RecordStore, append_fact


class SegmentCommandError(ValueError):
    pass


def _unit(job: Job, task: str | None) -> tuple[str, str]:
    cur = job.current
    if cur is None or cur.ref is None:
        raise SegmentCommandError(f"job {job.id} has no scheduler object yet: no allocation "
                                  "unit to mark")
    unit_job, unit_task = allocation_unit(cur.ref)
    if task is not None:
        return unit_job, task
    return unit_job, unit_task


def _directory(job: Job) -> str:
    if job.spec.segment_health is None:
        raise SegmentCommandError(f"job {job.id} has no segment_health.dir in its spec")
    return job.spec.segment_health.dir


def mark(store: RecordStore, job_id: str, task: str | None, reason: str, actor: str,
         now: datetime) -> str:
    job = fold(store.read(job_id), now)
    directory = _directory(job)
    unit_job, unit_task = _unit(job, task)
    nodes = ()
    append_fact(store, job_id, lambda seq: ev.SegmentPublished(
        seq=seq, at=now, unit_job_id=unit_job, task_id=unit_task, reason=reason, actor=actor,
        nodes=nodes, source="operator"))
    decision = make_decision(job_id=unit_job, task_id=unit_task, nodes=list(nodes),
                             cause="operator", who=actor, why=reason, when=now,
                             extra={"dispatch_job": job.id, "dispatch_name": job.name})
    return str(publish(directory, unit_job, unit_task, decision=decision))


def unmark(store: RecordStore, job_id: str, task: str | None, reason: str, actor: str,
           now: datetime) -> bool:
    job = fold(store.read(job_id), now)
    directory = _directory(job)
    unit_job, unit_task = _unit(job, task)
    append_fact(store, job_id, lambda seq: ev.SegmentCleared(
        seq=seq, at=now, unit_job_id=unit_job, task_id=unit_task, reason=reason, actor=actor))
    return clear(directory, unit_job, unit_task)


def register(main: click.Group) -> None:
    """Mount ``segment`` (check, mark, clear, list) on the main CLI."""
    from dispatch.cli import (
        EXIT_BAD_INPUT,
        _fail,
        _store,
        handle_errors,
        json_option,
        store_option,
    )
    from dispatch.jobs import whoami
    from dispatch.supervisor import utcnow

    @segment.command("mark")
    @click.argument("job")
    @click.option("--task", default=None, help="Array task id (default: the job's own unit).")
    @click.option("--reason", required=True, help="Why the unit is unavailable.")
    @store_option
    @handle_errors
    def mark_cmd(job: str, task: str | None, reason: str, store_url: str | None) -> None:
        """Mark the job's allocation unit unavailable for the next rendezvous."""
        with _store(store_url) as store:
            job_id = store.resolve(job)
            try:
                path = mark(store, job_id, task, reason, whoami(), utcnow())
            except SegmentCommandError as e:
                _fail(EXIT_BAD_INPUT, str(e))
        click.echo(f"{job_id}: published {path}")

    @segment.command("clear")
    @click.argument("job")
    @click.option("--task", default=None, help="Array task id (default: the job's own unit).")
    @click.option("--reason", default="", help="Why the unit may be used again.")
    @store_option
    @handle_errors
    def clear_cmd(job: str, task: str | None, reason: str, store_url: str | None) -> None:
        """Remove the decision: the unit may join rendezvous again."""
        with _store(store_url) as store:
            job_id = store.resolve(job)
            try:
                removed = unmark(store, job_id, task, reason, whoami(), utcnow())
            except SegmentCommandError as e:
                _fail(EXIT_BAD_INPUT, str(e))
        click.echo(f"{job_id}: " + ("cleared" if removed else "nothing was published"))

    @segment.command("list")
    @click.argument("job", required=False)
    @store_option
    @json_option
    @handle_errors
    def list_cmd(job: str | None, store_url: str | None, as_json: bool) -> None:
        """Decisions published for a job (or for every job with a decision directory)."""
        rows = []
        with _store(store_url) as store:
            ids = [store.resolve(job)] if job else [r.job_id for r in store.list_jobs()]
            records = store.read_many(ids)
        now = utcnow()
        for job_id in ids:
            j = fold(records[job_id], now)
            if j.spec.segment_health is None:
                if job:
                    _fail(EXIT_BAD_INPUT, f"job {job_id} has no segment_health.dir")
                continue
            recorded = {(d.unit_job_id, d.task_id): d for d in j.segments}
            units = {allocation_unit(s.ref)[0] for s in j.submissions if s.ref}
            for unit_job in sorted(units | {u for u, _ in recorded}):
                for found in list_decisions(j.spec.segment_health.dir, unit_job):
                    rec = recorded.get((found.job_id, found.task_id))
                    rows.append({"job": job_id, "unit_job_id": found.job_id,
                                 "task_id": found.task_id, "path": str(found.path),
                                 "recorded": rec is not None,
                                 "reason": rec.reason if rec else None,
                                 "by": rec.actor if rec else None,
                                 "at": rec.at.isoformat() if rec else None})
        if as_json:
            click.echo(json.dumps(rows, indent=2))
            return
        if not rows:
            click.echo("no segment health decisions")
        for r in rows:
            click.echo(f"{r['job']}  unit {r['unit_job_id']}.{r['task_id']}  {r['path']}  "
                       f"{r['reason'] or '(not in the record)'}")

    main.add_command(segment)
