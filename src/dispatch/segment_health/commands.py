"""Operator segment-health decisions (``dispatch segment mark|clear|list``), recorded in the
job's record; the commands themselves live in ``dispatch.cli.segment``. Each publication and
clearing is appended to the job's record (who, why, when) and the artifact is written, so
`dispatch history` tells every decision.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from dispatch.core import events as ev
from dispatch.core.decide import allocation_unit
from dispatch.core.record import Job, fold
from dispatch.errors import BadInput
from dispatch.segment_health.publisher import clear, list_decisions, make_decision, publish
from dispatch.stores.base import RecordStore, append_fact


class SegmentCommandError(BadInput, ValueError):
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
        nodes=nodes))
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


def listing(store: RecordStore, job_id: str | None, now: datetime) -> list[dict[str, Any]]:
    """Every decision published for ``job_id`` (or every job with a decision directory), with
    what the record says of it."""
    ids = [job_id] if job_id else [r.job_id for r in store.list_jobs()]
    records = store.read_many(ids)
    rows: list[dict[str, Any]] = []
    for jid in ids:
        j = fold(records[jid], now)
        if j.spec.segment_health is None:
            if job_id:
                raise SegmentCommandError(f"job {jid} has no segment_health.dir")
            continue
        recorded = {(d.unit_job_id, d.task_id): d for d in j.segments}
        units = {allocation_unit(s.ref)[0] for s in j.submissions if s.ref}
        for unit_job in sorted(units | {u for u, _ in recorded}):
            for found in list_decisions(j.spec.segment_health.dir, unit_job):
                rec = recorded.get((found.job_id, found.task_id))
                rows.append({"job": jid, "unit_job_id": found.job_id,
                             "task_id": found.task_id, "path": str(found.path),
                             "recorded": rec is not None,
                             "reason": rec.reason if rec else None,
                             "by": rec.actor if rec else None,
                             "at": rec.at.isoformat() if rec else None})
    return rows
