"""H1 in decide: a live object of a job that asked for segment health gets one publication
per allocation unit, when a node of the unit is unavailable or the node-loss fence fired."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from tests.specs import parse_spec

from dispatch.core import decide as dc
from dispatch.core import events as ev
from dispatch.core import segment_decisions
from dispatch.core.model import Cause, CauseKind, Discovery, ObjectReport, State, UnitHealth
from dispatch.core.policy import Action, Declarations
from dispatch.core.record import advance, fold
from dispatch.core.spec import SpecError
from dispatch.core.status import plan_of

T0 = datetime(2026, 11, 30, 12, tzinfo=UTC)
DECL = Declarations(backend="slurm", native_actions=frozenset({Action.REQUEUE}),
                    node_loss_window=timedelta(seconds=60))


def job_with(segment: bool = True):  # type: ignore[no-untyped-def]
    data = {"name": "t", "backend": "slurm", "command": ["train"], "nodes": 2,
            "policy": {"rules": [{"on": ["node-lost"], "action": "resubmit", "budget": 1}]}}
    if segment:
        data["segment_health"] = {"dir": "/shared/seg"}
    spec = parse_spec(data)
    job = fold([ev.JobCreated(seq=1, at=T0, job_id="j", spec=spec, declarations=DECL),
                ev.SubmissionIntended(seq=2, at=T0, submission=1, token="j.1"),
                ev.SubmissionBound(seq=3, at=T0, submission=1, ref="4242")], T0)
    return job


def running(**kw: object) -> ObjectReport:
    base = {"ref": "4242", "token": "j.1", "state": State.RUNNING,
            "cause": Cause(kind=CauseKind.NONE), "nodes": ("n1", "n2")}
    base.update(kw)
    return ObjectReport(**base)  # type: ignore[arg-type]


def decide_now(job, obj, now=T0):  # type: ignore[no-untyped-def]
    return dc.decide(job, Discovery(at=now, objects=(obj,)), plan_of(job), now)


def test_unavailable_node_publishes_the_unit_once() -> None:
    job = job_with()
    out = decide_now(job, running(unhealthy_units=(UnitHealth(unit="4242", nodes=("n2",)),),
                                  cause=Cause(kind=CauseKind.NONE, detail="n2 DRAIN")))
    pubs = [d for d in out if isinstance(d, dc.PublishSegment)]
    assert pubs == [dc.PublishSegment(unit_job_id="4242", task_id="4242", nodes=("n2",),
                                      reason=pubs[0].reason, cause="node-unavailable")]
    assert "n2" in pubs[0].reason
    job2 = advance(job, dc.to_events(out, job, T0))
    assert [(d.unit_job_id, d.task_id) for d in job2.segments] == [("4242", "4242")]
    again = decide_now(job2, running(unhealthy_units=(UnitHealth(unit="4242", nodes=("n2",)),)))
    assert not [d for d in again if isinstance(d, dc.PublishSegment)]


def test_array_task_unit_is_array_job_and_task() -> None:
    assert dc.allocation_unit("1080_7") == ("1080", "7")
    assert dc.allocation_unit("1080") == ("1080", "1080")


def test_fence_publishes_the_unit() -> None:
    job = job_with()
    lost = running(cause=Cause(kind=CauseKind.NODE_LOST, detail="n2 DOWN"),
                   lost_since=T0)
    inside = decide_now(job, lost, T0 + timedelta(seconds=10))
    assert not [d for d in inside if isinstance(d, dc.PublishSegment)]
    past = decide_now(job, lost, T0 + timedelta(seconds=61))
    pubs = [d for d in past if isinstance(d, dc.PublishSegment)]
    assert len(pubs) == 1 and pubs[0].cause == "node-lost-fence"
    assert any(isinstance(d, dc.Stop) for d in past)


def test_no_publication_without_segment_health_in_the_spec() -> None:
    out = decide_now(job_with(segment=False),
                     running(unhealthy_units=(UnitHealth(unit="4242", nodes=("n2",)),)))
    assert not [d for d in out if isinstance(d, dc.PublishSegment)]


def test_segment_health_is_refused_on_other_backends() -> None:
    with pytest.raises(SpecError, match="only the slurm backend"):
        parse_spec({"name": "t", "backend": "local", "command": ["x"],
                    "segment_health": {"dir": "/shared/seg"}})


def unit(name: str, *nodes: str) -> UnitHealth:
    return UnitHealth(unit=name, nodes=nodes)


def pubs_of(out):  # type: ignore[no-untyped-def]
    return [(d.unit_job_id, d.task_id, d.nodes, d.cause) for d in out
            if isinstance(d, dc.PublishSegment)]


# An array is one object (ref = array job id); its unhealthy units are its tasks.
@pytest.mark.parametrize(("units", "already", "want"), [
    ((), (), []),
    ((unit("4242_1", "n3"),), (), [("4242", "1", ("n3",), "node-unavailable")]),
    ((unit("4242_0", "n1"), unit("4242_1", "n3", "n4")), (),
     [("4242", "0", ("n1",), "node-unavailable"),
      ("4242", "1", ("n3", "n4"), "node-unavailable")]),
    ((unit("4242_0", "n1"), unit("4242_1", "n3")), (("4242", "0"),),
     [("4242", "1", ("n3",), "node-unavailable")]),
    ((unit("4242_1", "n3"),), (("4242", "1"),), []),
    ((unit("4242", "n2"),), (), [("4242", "4242", ("n2",), "node-unavailable")]),
])
def test_one_publication_per_unhealthy_unit(units, already, want) -> None:  # type: ignore[no-untyped-def]
    job = job_with()
    if already:
        job = advance(job, [ev.SegmentPublished(seq=job.version + 1 + i, at=T0, unit_job_id=j,
                                                task_id=t, reason="earlier", actor="x")
                            for i, (j, t) in enumerate(already)])
    out = decide_now(job, running(unhealthy_units=units))
    assert pubs_of(out) == want


def test_array_task_publication_names_the_task_and_is_made_once() -> None:
    job = job_with()
    obj = running(unhealthy_units=(unit("4242_1", "n3"),),
                  cause=Cause(kind=CauseKind.NONE, detail="task 1: RUNNING"))
    out = decide_now(job, obj)
    (pub,) = [d for d in out if isinstance(d, dc.PublishSegment)]
    assert "array job 4242 task 1" in pub.reason and "n3" in pub.reason
    assert pub.reason.endswith(": task 1: RUNNING")  # no words of its own: the object's
    worded = running(unhealthy_units=(UnitHealth(unit="4242_1", nodes=("n3",),
                                                 detail="n3 MIXED+DRAIN reason=e2e"),),
                     cause=Cause(kind=CauseKind.NONE, detail="task 0: RUNNING"))
    (pub2,) = [d for d in decide_now(job, worded) if isinstance(d, dc.PublishSegment)]
    assert pub2.reason == ("node(s) n3 of array job 4242 task 1 unavailable: "
                           "n3 MIXED+DRAIN reason=e2e")
    job2 = advance(job, dc.to_events(out, job, T0))
    assert not pubs_of(decide_now(job2, obj))
    # A second task going bad later still gets its own decision.
    later = running(unhealthy_units=(unit("4242_1", "n3"), unit("4242_0", "n1")))
    assert pubs_of(decide_now(job2, later)) == [("4242", "0", ("n1",), "node-unavailable")]


def test_ended_object_publishes_nothing() -> None:
    obj = running(state=State.FAILED, unhealthy_units=(unit("4242_1", "n3"),))
    assert not pubs_of(decide_now(job_with(), obj))


def test_fence_on_an_array_publishes_the_tasks_with_lost_nodes() -> None:
    job = job_with()
    lost = running(cause=Cause(kind=CauseKind.NODE_LOST, detail="task 1: n3 DOWN"),
                   lost_since=T0, unhealthy_units=(unit("4242_1", "n3"),))
    past = decide_now(job, lost, T0 + timedelta(seconds=61))
    assert pubs_of(past) == [("4242", "1", ("n3",), "node-lost-fence")]


def test_array_task_words_even_when_the_array_job_id_equals_the_task_id() -> None:
    assert segment_decisions._unit_words("1_1") == "array job 1 task 1"
    assert segment_decisions._unit_words("1") == "object 1"
