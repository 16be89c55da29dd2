"""Slurm's node words read for health: a node that cannot be running its share of a job
(lost), or that must not be rendezvoused on (unhealthy: lost or drained), and a node's words
for a cause's detail. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from dispatch.backends.slurm.parse import NodeInfo

LOST_STATES = frozenset({"DOWN", "FUTURE", "UNKNOWN"})
LOST_FLAGS = frozenset({"NOT_RESPONDING", "FAIL", "FAILING", "POWERED_DOWN", "POWER_DOWN"})
DRAIN_FLAGS = frozenset({"DRAIN", "DRAINING", "DRAINED"})


def node_lost(node: NodeInfo) -> bool:
    """The node cannot be running its share of a job: DOWN, NOT_RESPONDING, FAIL."""
    return node.state in LOST_STATES or bool(LOST_FLAGS & set(node.flags))


def node_unhealthy(node: NodeInfo) -> bool:
    """Lost, or drained / draining (for the segment health check: DRAIN evicts nothing)."""
    return node_lost(node) or node.state == "DRAIN" or bool(DRAIN_FLAGS & set(node.flags))


def lost_nodes(job_nodes: Iterable[str], nodes: Mapping[str, NodeInfo]) -> tuple[NodeInfo, ...]:
    return tuple(nodes[n] for n in job_nodes if n in nodes and node_lost(nodes[n]))


def node_words(node: NodeInfo) -> str:
    words = f"{node.name} {node.words}"
    if node.reason:
        words += f" reason={node.reason}"
        if node.reason_by:
            words += f" by {node.reason_by}"
        if node.reason_at is not None:
            words += f" at {node.reason_at.isoformat()}"
    return words
