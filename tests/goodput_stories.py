"""Records for goodput tests, driven tick by tick like the supervisor drives a job
(observe() then decide()): one preemption after a checkpoint, then success."""

from __future__ import annotations

from datetime import datetime, timedelta

import msgspec
from tests.strategies_core import T0, Sim, ended, obj, rule

from dispatch.core import events as ev
from dispatch.core.decide import decide, to_events
from dispatch.core.model import CauseKind, Execution, ObjectReport, State
from dispatch.core.observe import observe
from dispatch.core.policy import Action
from dispatch.core.progress import Checkpoint, Progress
from dispatch.core.record import fold


def sim_with(nodes: int, job_id: str = "j", at: datetime = T0, backend: str = "local",
             actor: str | None = None, gpus_per_node: int | None = None) -> Sim:
    sim = Sim([rule([CauseKind.PREEMPTED], Action.RESUBMIT, budget=1)], job_id=job_id, at=at)
    created = sim.record[0]
    assert isinstance(created, ev.JobCreated)
    sim.record[0] = msgspec.structs.replace(
        created, actor=actor, spec=msgspec.structs.replace(
            created.spec, nodes=nodes, backend=backend,
            slurm={"gpus_per_node": gpus_per_node} if gpus_per_node else {}))
    sim.job = fold(sim.record, at)
    return sim


def tick(sim: Sim, seconds: float, objects: list[ObjectReport], at: datetime = T0
         ) -> list[str]:
    """One supervisor tick at ``at`` + seconds: observe() then decide(), appended together."""
    sim.now = at + timedelta(seconds=seconds)
    d = sim.discovery(objects)
    decisions = observe(sim.job, d) + decide(sim.job, d, sim.plan, sim.now)
    sim.append(to_events(decisions, sim.job, sim.now))
    return [type(x).__name__ for x in decisions]


def run(index: int, started: float, nodes: int, checkpoint: tuple[int, float] | None = None,
        at: datetime = T0) -> Execution:
    progress = None if checkpoint is None else Progress(checkpoint=Checkpoint(
        step=checkpoint[0], written=at + timedelta(seconds=checkpoint[1])))
    return Execution(index=index, started_at=at + timedelta(seconds=started),
                     nodes=tuple(f"n{i}" for i in range(nodes)), progress=progress)


def preempted_once(nodes: int, job_id: str = "j", at: datetime = T0, backend: str = "local",
                   actor: str | None = None, gpus_per_node: int | None = None) -> Sim:
    """Queued 5s, runs 95s (checkpoint at 65s), preempted at 100s, recovering 20s, runs 80s,
    succeeds at 200s: running 175s, recovering (preempted) 20s, lost work 35s."""
    sim = sim_with(nodes, job_id, at, backend, actor, gpus_per_node)
    o = {"job": job_id}
    tick(sim, 0, [], at)
    assert tick(sim, 10, [obj(1, State.RUNNING, executions=(run(0, 5, nodes, at=at),), **o)],
                at) == ["RecordStart", "Bind"]
    assert tick(sim, 70, [obj(1, State.RUNNING, executions=(
        run(0, 5, nodes, (3, 65), at),), **o)], at) == ["RecordCheckpoint"]
    assert tick(sim, 80, [obj(1, State.RUNNING, executions=(
        run(0, 5, nodes, (3, 65), at),), **o)], at) == []
    assert "RecordEnd" in tick(sim, 100, [ended(1, CauseKind.PREEMPTED, **o)], at)
    tick(sim, 130, [ended(1, CauseKind.PREEMPTED, **o),
                    obj(2, State.RUNNING, executions=(run(0, 120, nodes, at=at),), **o)], at)
    assert "Commit" in tick(sim, 200, [ended(1, CauseKind.PREEMPTED, **o),
                                       ended(2, CauseKind.NONE, **o)], at)
    return sim
