"""Which allocation units a tick publishes as unavailable (docs/semantics.md#h1). Pure."""

from __future__ import annotations

from collections.abc import Sequence

from dispatch.core.decisions import Decision, PublishSegment
from dispatch.core.model import Cause, ObjectReport, UnitHealth
from dispatch.core.record import Job


def allocation_unit(ref: str) -> tuple[str, str]:
    """Seed 002: an array task is (array job id, task id); a regular job is (id, id)."""
    job, sep, task = ref.partition("_")
    if sep and job.isdigit() and task.isdigit():
        return job, task
    return ref, ref


def segment_decisions(job: Job, objs: Sequence[ObjectReport], fenced: dict[str, Cause],
                       bound: dict[int, str]) -> list[Decision]:
    """H1: a live object of a job that asked for segment health gets one publication per
    allocation unit (the job, or each array task) with an unavailable node, and for the units
    the node-loss fence fired for; once per unit."""
    if job.spec.segment_health is None:
        return []
    published = {(d.unit_job_id, d.task_id) for d in job.segments}
    mine = {s.ref or bound.get(s.number) for s in job.submissions}
    out: list[Decision] = []
    for o in objs:
        if o.ref not in mine or not o.alive:
            continue
        units = o.unhealthy_units
        if o.ref in fenced and not units:  # fenced on words that named no unit: the object
            units = (UnitHealth(unit=o.ref, nodes=o.nodes),)
        for health in units:
            unit = allocation_unit(health.unit)
            if unit in published:
                continue
            if o.ref in fenced:
                fence = fenced[o.ref]
                out.append(PublishSegment(unit_job_id=unit[0], task_id=unit[1],
                                          nodes=health.nodes, reason=fence.note
                                          + _words(fence.detail), cause="node-lost-fence"))
            else:
                out.append(PublishSegment(
                    unit_job_id=unit[0], task_id=unit[1], nodes=health.nodes,
                    cause="node-unavailable",
                    reason=f"node(s) {', '.join(health.nodes)} of {_unit_words(health.unit)} "
                           "unavailable" + _words(health.detail or o.cause.detail)))
            published.add(unit)
    return out


def _words(detail: str) -> str:
    return f": {detail}" if detail else ""


def _unit_words(unit: str) -> str:
    job_id, task_id = allocation_unit(unit)
    # An array task is named by its ref ("1_1"), never by equal ids: array job 1's task 1
    # has job id == task id too.
    return f"array job {job_id} task {task_id}" if "_" in unit else f"object {unit}"
