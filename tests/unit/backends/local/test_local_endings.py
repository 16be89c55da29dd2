"""What the local runner says about its nodes' exits: "the other nodes were killed" only
where there were other nodes (issue 36)."""

from __future__ import annotations

from datetime import UTC, datetime

from dispatch.backends.local.endings import node_exit_ending
from dispatch.backends.local.nodes import Node
from dispatch.core.model import CauseKind, State

T0 = datetime(2026, 12, 3, tzinfo=UTC)


def nodes(*codes: int | None) -> list[Node]:
    out = []
    for i, code in enumerate(codes):
        n = Node(i)
        n.pid, n.exit_code, n.ended_at = 100 + i, code, T0 if code is not None else None
        out.append(n)
    return out


def test_a_one_node_job_has_no_other_nodes() -> None:
    ending = node_exit_ending(nodes(3), T0)
    assert ending is not None
    state, cause = ending
    assert state is State.FAILED and cause.kind is CauseKind.NON_ZERO_EXIT
    assert cause.detail == "node0 exited 3"
    ending = node_exit_ending(nodes(-11), T0)
    assert ending is not None and "other nodes" not in ending[1].detail
    assert ending[1].detail.endswith("not by dispatch")
    ending = node_exit_ending(nodes(0), T0)
    assert ending is not None and ending[1].detail == "the node exited 0"


def test_a_two_node_job_says_the_others_were_killed() -> None:
    ending = node_exit_ending(nodes(None, 3), T0)
    assert ending is not None
    assert ending[1].detail == "node1 exited 3; the other nodes were killed"
    ending = node_exit_ending(nodes(0, 0), T0)
    assert ending is not None and ending[1].detail == "all 2 nodes exited 0"
