"""How a local object ends, in words: the state and cause the runner reports for each reason
an object can end. Pure (``now`` passed in); the runner decides when, this says what."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from dispatch.backends.local.nodes import Node, mib, signal_name
from dispatch.backends.local.wire import CANCEL, PREEMPT, STOP, SUPERVISOR_ACTOR, ControlRequest
from dispatch.core.model import Cause, CauseKind, Provenance, State

Ending = tuple[State, Cause]


def lost_note(lost: Sequence[str]) -> str:
    return f"; {', '.join(lost)} had been lost" if lost else ""


def request_ending(name: str, request: ControlRequest, lost: Sequence[str]) -> Ending | None:
    """The ending a control request asks for (None for a request that is no ending)."""
    at = request.at
    if name == CANCEL:
        actor = request.actor or "unknown"
        return State.CANCELLED, Cause(
            kind=CauseKind.CANCELLED, provenance=Provenance.ACTOR, actor=actor,
            detail=f"cancelled by {actor}{lost_note(lost)}", at=at)
    if name == STOP:
        actor = request.actor or SUPERVISOR_ACTOR
        return State.CANCELLED, Cause(
            kind=CauseKind.CANCELLED, provenance=Provenance.ACTOR, actor=actor,
            detail=f"stopped by the supervisor ({actor}){lost_note(lost)}", at=at)
    if name == PREEMPT:
        return State.FAILED, Cause(kind=CauseKind.PREEMPTED, provenance=Provenance.SCHEDULER,
                                   detail="injected preemption", at=at)
    return None


def first_failed(nodes: Sequence[Node], now: datetime) -> Node | None:
    """The node whose bad exit came first (by its end, then its index)."""
    bad = sorted((n for n in nodes if n.exit_code not in (None, 0)),
                 key=lambda n: (n.ended_at or now, n.index))
    return bad[0] if bad else None


def node_exit_ending(nodes: Sequence[Node], now: datetime) -> Ending | None:
    """What the nodes' exits say: the first bad exit ends the object (srun's
    --kill-on-bad-exit); all zero is success; None while nothing ends it."""
    first = first_failed(nodes, now)
    # "the other nodes were killed" only where there were other nodes (issue 36)
    others = "; the other nodes were killed" if len(nodes) > 1 else ""
    for node in [first] if first is not None else []:
        code = node.exit_code
        assert code is not None
        if code > 0:
            return State.FAILED, Cause(
                kind=CauseKind.NON_ZERO_EXIT, provenance=Provenance.APPLICATION,
                detail=f"{node.name} exited {code}{others}",
                exit_code=code, at=node.ended_at)
        return State.FAILED, Cause(
            kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
            detail=f"{node.name} (pid {node.pid}) killed by signal {-code} "
                   f"({signal_name(-code)}), not by dispatch{others}",
            at=node.ended_at)
    if nodes and all(n.exit_code == 0 for n in nodes):
        return State.SUCCEEDED, Cause(
            kind=CauseKind.NONE, provenance=Provenance.APPLICATION, exit_code=0,
            detail=("the node exited 0" if len(nodes) == 1
                    else f"all {len(nodes)} nodes exited 0"), at=now)
    return None


def time_limit_ending(limit: float, kill_grace: float, now: datetime) -> Ending:
    return State.FAILED, Cause(
        kind=CauseKind.TIME_LIMIT, provenance=Provenance.SCHEDULER,
        detail=f"time limit {limit:g}s reached; the nodes were killed (SIGTERM, then "
               f"SIGKILL after {kill_grace:g}s)", at=now)


def memory_ending(node: str, rss: int, limit: int, now: datetime) -> Ending:
    return State.FAILED, Cause(
        kind=CauseKind.OUT_OF_MEMORY, provenance=Provenance.SCHEDULER,
        detail=f"{node}: resident memory of its processes {rss} bytes ({mib(rss)}) passed the "
               f"limit {limit} bytes ({mib(limit)}), sampled from /proc; the nodes were killed",
        at=now)


def terminated_ending(signum: int, now: datetime) -> Ending:
    return State.FAILED, Cause(
        kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
        detail=f"the local runner received {signal_name(signum)}; the nodes were killed",
        at=now)


def runner_failed_ending(err: BaseException, now: datetime) -> Ending:
    return State.FAILED, Cause(
        kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
        detail=f"the local runner failed: {err!r}; the nodes were killed", at=now)


def launch_failed_ending(node: str, program: str, err: BaseException, now: datetime) -> Ending:
    return State.FAILED, Cause(kind=CauseKind.LAUNCH_FAILED, provenance=Provenance.SCHEDULER,
                               detail=f"{node} could not start {program!r}: {err}", at=now)


def node_lost_cause(lost: Sequence[str], since: datetime) -> Cause:
    """A node loss does not end the object: it keeps running until it is stopped (S11)."""
    return Cause(kind=CauseKind.NODE_LOST, provenance=Provenance.SCHEDULER,
                 detail=f"{', '.join(lost)} lost (injected): its processes were killed; the "
                        "object keeps running until it is stopped", at=since)
