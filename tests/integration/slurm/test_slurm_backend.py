"""SlurmBackend against the real four-node testbed: submit -> discover -> state and cause.

Node use: n4 carries the time-limit job for most of the run (Slurm's smallest limit is a
minute, so it is submitted first and checked last); exclusive and node-down tests use n1..n3.
Nothing here waits for a requeued job to run again (Slurm delays it about two minutes).
"""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from slurm_helpers import (
    Cluster,
    query_rpcs,
    slurm,
    start_controller,
    stop_controller,
    wait_nodes_idle,
    wait_step_started,
)

from dispatch.backends.base import SubmitRejected
from dispatch.core.model import CauseKind as K
from dispatch.core.model import ObjectReport, SchedulerUnreachable
from dispatch.core.model import Provenance as P
from dispatch.core.model import State as S
from dispatch.core.policy import Action, RecoveryPolicy, Rule

pytestmark = pytest.mark.slurm

SLEEP = ("sleep", "300")
REQUEUE_POLICY = RecoveryPolicy(rules=(
    Rule(on=(K.PREEMPTED, K.NODE_LOST, K.REQUEUED), action=Action.REQUEUE, budget=3),))


def ended(o: ObjectReport) -> bool:
    return o.ended


def running(o: ObjectReport) -> bool:
    return o.state is S.RUNNING


_timeout_job: dict[str, str] = {}


def test_succeeded(cluster: Cluster) -> None:
    # Start the time-limit job now; test_time_limit (last) checks it.
    ref, token = cluster.submit(SLEEP, time_limit=60, slurm={"nodelist": "n4"})
    _timeout_job.update(ref=ref, token=token)
    cluster.refs.remove(ref)  # not cancelled at this test's end
    ref, token = cluster.submit(("bash", "-c", "echo hello from $SLURM_JOB_ID"))
    o = cluster.wait(token, ended, what="job end")
    assert (o.state, o.cause.kind) == (S.SUCCEEDED, K.NONE)
    assert o.ref == ref and o.token == token
    assert [e.cause.kind for e in o.executions if e.cause] == [K.NONE]
    (log,) = cluster.backend.logs(ref)
    assert log.read_text().strip() == f"hello from {ref}"


def test_non_zero_exit_with_its_code(cluster: Cluster) -> None:
    _, token = cluster.submit(("bash", "-c", "exit 3"))
    o = cluster.wait(token, ended, what="job end")
    assert (o.state, o.cause.kind, o.cause.provenance) == (S.FAILED, K.NON_ZERO_EXIT,
                                                           P.APPLICATION)
    assert o.cause.exit_code == 3
    assert "FAILED" in o.cause.detail


def test_out_of_memory(cluster: Cluster) -> None:
    _, token = cluster.submit(
        ("python3", "-c", "x = bytearray(400 * 1024 * 1024); import time; time.sleep(5)"),
        memory=100 * 1024 * 1024)
    o = cluster.wait(token, ended, what="job end")
    assert (o.state, o.cause.kind) == (S.FAILED, K.OUT_OF_MEMORY)
    assert "OUT_OF_MEMORY" in o.cause.detail


def test_multi_node_srun_across_nodes(cluster: Cluster) -> None:
    say = 'echo "$SLURM_NODEID/$SLURM_NNODES $SLURMD_NODENAME"'
    ref, token = cluster.submit(("bash", "-c", say), nodes=2, slurm={"nodelist": "n2,n3"})
    o = cluster.wait(token, ended, what="job end")
    assert (o.state, o.cause.kind) == (S.SUCCEEDED, K.NONE)
    assert o.nodes == ("n2", "n3")
    (log,) = cluster.backend.logs(ref)
    assert sorted(log.read_text().split("\n")[:2]) == ["0/2 n2", "1/2 n3"]


# What sbatch says to five nodes on a four-node partition on 24.11 (22.05 and 26.05 accept the
# job, and it pends).
REFUSED_24 = "Requested node configuration is not available"


def test_no_capacity_for_a_job_that_cannot_fit(cluster: Cluster, slurm_version: str) -> None:
    if slurm_version == "24.11":  # 24.11 refuses it at submission (seen there, and captured)
        with pytest.raises(SubmitRejected) as err:
            cluster.submit(SLEEP, nodes=5)
        assert REFUSED_24 in err.value.detail
        return
    _, token = cluster.submit(SLEEP, nodes=5)
    o = cluster.wait(token, lambda o: o.cause.kind is not K.NONE, what="a pending reason")
    assert (o.state, o.cause.kind) == (S.PENDING, K.NO_CAPACITY)
    # 22.05 and 26.05 say PartitionConfig first, PartitionNodeLimit once the scheduler looked
    # again (26.05: tests/fixtures/slurm/26.05/pending-reasons.*).
    assert "can never start" in o.cause.note
    assert "PartitionNodeLimit" in o.cause.detail or "PartitionConfig" in o.cause.detail


def test_cancelled_by_a_person(cluster: Cluster) -> None:
    ref, token = cluster.submit(SLEEP, slurm={"nodelist": "n3"})
    cluster.wait(token, running, what="running")
    slurm("scancel", ref)
    o = cluster.wait(token, lambda o: o.ended and o.cause.actor is not None, what="cancel")
    assert (o.state, o.cause.kind, o.cause.provenance, o.cause.actor) == (
        S.CANCELLED, K.CANCELLED, P.ACTOR, "0")
    assert "CANCELLED by 0" in o.cause.detail
    cluster.backend.cancel(ref)  # cancelling an ended job again is not an error


def test_held_and_released_by_a_person(cluster: Cluster) -> None:
    ref, token = cluster.submit(SLEEP, slurm={"extra": ["--begin=now+3600"]})
    cluster.wait(token, lambda o: o.state is S.PENDING, what="pending")
    slurm("scontrol", "hold", ref)
    o = cluster.wait(token, lambda o: o.state is S.HELD, what="held")
    assert (o.cause.kind, o.cause.provenance) == (K.HELD, P.ACTOR)
    assert "JobHeldAdmin" in o.cause.detail and not o.gated
    slurm("scontrol", "release", ref)
    o = cluster.wait(token, lambda o: o.state is not S.HELD, what="released")
    assert (o.state, o.cause.kind, o.cause.provenance) == (S.PENDING, K.RELEASED, P.ACTOR)


def test_gate_held_until_opened(cluster: Cluster) -> None:
    ref, token = cluster.submit(("sleep", "2"), gated=True)
    o = cluster.wait(token, lambda o: o.state is S.HELD, what="held at submission")
    assert o.gated and o.cause.kind is K.HELD
    time.sleep(1)
    assert cluster.look(token).state is S.HELD  # nothing opens it but us
    cluster.backend.open_gate(ref)
    o = cluster.wait(token, ended, what="job end after the gate opened")
    assert o.state is S.SUCCEEDED


def test_requeued_by_a_person_is_an_execution(cluster: Cluster) -> None:
    ref, token = cluster.submit(SLEEP, policy=REQUEUE_POLICY, slurm={"nodelist": "n3"})
    cluster.wait(token, running, what="running")
    slurm("scontrol", "requeue", ref)
    o = cluster.wait(token, lambda o: o.state is S.RECOVERING
                     and any(e.ended for e in o.executions), what="requeued")
    assert o.cause.kind is K.REQUEUED and "restarts=1" in o.cause.detail
    assert [e.cause.kind for e in o.executions if e.cause] == [K.REQUEUED]
    assert o.executions[0].nodes == ("n3",)


def test_preempted_by_a_high_job(cluster: Cluster) -> None:
    low = {"exclusive": True}
    ref_a, tok_a = cluster.submit(SLEEP, slurm={**low, "nodelist": "n1"})
    ref_b, tok_b = cluster.submit(SLEEP, policy=REQUEUE_POLICY, slurm={**low, "nodelist": "n2"})
    cluster.wait(tok_a, running, what="low job running")
    cluster.wait(tok_b, running, what="low requeueable job running")
    _, tok_h = cluster.submit(("sleep", "2"), nodes=2,
                              slurm={"partition": "high", "exclusive": True,
                                     "nodelist": "n1,n2"})
    a = cluster.wait(tok_a, ended, what="preemption")
    assert (a.state, a.cause.kind) == (S.FAILED, K.PREEMPTED)
    # RECOVERING comes from squeue, the ended execution's cause from accounting, which may
    # lag it: wait for both, the things asserted on next.
    b = cluster.wait(tok_b, lambda o: o.state is S.RECOVERING
                     and any(e.ended for e in o.executions), what="requeue after preemption")
    assert b.cause.kind is K.PREEMPTED
    assert [e.cause.kind for e in b.executions if e.cause] == [K.PREEMPTED]
    h = cluster.wait(tok_h, ended, what="high job end")
    assert h.state is S.SUCCEEDED


def test_node_lost(cluster: Cluster) -> None:
    ref, token = cluster.submit(SLEEP, slurm={"nodelist": "n2"})
    cluster.wait(token, running, what="running")
    try:
        slurm("scontrol", "update", "nodename=n2", "state=down", "reason=dispatch test")
        o = cluster.wait(token, ended, what="NODE_FAIL")
        assert (o.state, o.cause.kind) == (S.FAILED, K.NODE_LOST)
        assert "NODE_FAIL" in o.cause.detail and "n2" in o.cause.detail
    finally:
        wait_nodes_idle(("n2",))


def test_token_found_by_a_new_backend_after_a_crash(cluster: Cluster) -> None:
    ref, token = cluster.submit(SLEEP, slurm={"nodelist": "n3"})
    cluster.wait(token, running, what="running")
    fresh = cluster.new_backend()  # knows nothing: no ref, only the token
    (o,) = [o for o in fresh.discover({token}, ()).objects]
    assert (o.ref, o.token, o.state) == (ref, token, S.RUNNING)
    assert fresh.calls["squeue"] == 1 and fresh.calls["scontrol"] == 1
    assert fresh.calls["sacct"] == 0  # found in squeue: accounting not needed


def test_a_steady_tick_costs_two_slurmctld_rpcs_and_a_node_read_two_more(
        cluster: Cluster) -> None:
    """P2 counted by slurmctld itself (sdiag; the suite runs as root): with a job of ours
    running, a tick whose node read is not due asks squeue only (the jobs, and the partitions
    squeue loads to print); one whose read is due adds scontrol's node and partition info. As
    root squeue reads every job (REQUEST_JOB_INFO); a plain user's is REQUEST_JOB_USER_INFO
    (bench_busy_cluster). Nothing else queries slurmctld meanwhile, but a count is taken
    again (at most 3 times) if something did: a regression shows in every count."""
    ref, token = cluster.submit(SLEEP, slurm={"nodelist": "n3"})
    cluster.wait(token, running, what="running")
    wait_step_started(ref)  # srun's own RPCs are over
    b = cluster.new_backend()
    b.discover({token}, {ref})  # the first look reads the job's node

    def count(interval: timedelta, ticks: int) -> dict[str, int]:
        b.node_interval = interval
        slurm("sdiag", "-r")
        for _ in range(ticks):
            (o,) = b.discover({token}, {ref}).objects
            assert o.state is S.RUNNING
        return query_rpcs()

    expected = ({"REQUEST_JOB_INFO": 3, "REQUEST_PARTITION_INFO": 3},
                {"REQUEST_JOB_INFO": 1, "REQUEST_NODE_INFO": 1, "REQUEST_PARTITION_INFO": 2})
    for _ in range(3):
        seen = (count(timedelta(days=1), 3), count(timedelta(0), 1))
        if seen == expected:
            break
    assert seen == expected


def test_unreachable_while_slurmctld_is_stopped(cluster: Cluster) -> None:
    ref, token = cluster.submit(SLEEP, slurm={"nodelist": "n3"})
    cluster.wait(token, running, what="running")
    wait_step_started(ref)
    stop_controller()
    try:
        with pytest.raises(SchedulerUnreachable) as err:
            cluster.backend.discover({token}, {ref})
        assert err.value.backend == "slurm"
    finally:
        start_controller()
    o = cluster.look(token, ref)
    assert (o.ref, o.state) == (ref, S.RUNNING)  # the job survived; discovery resumes


def test_time_limit(cluster: Cluster) -> None:
    """Submitted by test_succeeded with a one-minute limit (Slurm's smallest)."""
    assert _timeout_job, "test_succeeded must run first (it submits the time-limit job)"
    cluster.refs.append(_timeout_job["ref"])
    o = cluster.wait(_timeout_job["token"], ended, ref=_timeout_job["ref"], timeout=180,
                     what="TIMEOUT")
    assert (o.state, o.cause.kind) == (S.FAILED, K.TIME_LIMIT)
    assert "TIMEOUT" in o.cause.detail


def test_calls_per_discover_for_many_jobs(cluster: Cluster) -> None:
    """P2 on the real cluster: one squeue per look for N jobs, one node query only while some of
    them hold nodes, sacct only in a tick where jobs ended."""
    n = 20
    subs = [cluster.submit(("true",), gated=True) for _ in range(n)]
    tokens = {t for _, t in subs}
    b = cluster.new_backend()
    d = b.discover(tokens, ())
    assert len(d.objects) == n and all(o.state is S.HELD for o in d.objects)
    assert dict(b.calls) == {"squeue": 1}  # held jobs hold no nodes: no node query
    slurm("scontrol", "release", *[r for r, _ in subs])
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        d = b.discover(tokens, [r for r, _ in subs])
        if all(o.state is S.SUCCEEDED for o in d.objects):
            break
        time.sleep(1)
    assert all(o.state is S.SUCCEEDED for o in d.objects), d.objects
    looks = b.calls["squeue"]
    assert b.calls["scontrol"] <= looks and b.calls["sacct"] <= looks
    # Once accounting has confirmed every end, a look costs no sacct (bounded: slurmdbd may
    # lag squeue by a moment).
    steady = 0
    for _ in range(20):
        before = b.calls["sacct"]
        b.discover(tokens, [r for r, _ in subs])
        steady = steady + 1 if b.calls["sacct"] == before else 0
        if steady == 2:
            break
        time.sleep(0.5)
    assert steady == 2, f"sacct still called every look: {dict(b.calls)}"
