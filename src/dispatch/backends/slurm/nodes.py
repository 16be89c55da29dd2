"""Node views: ``scontrol show node -o`` (the tick's: only the nodes our jobs hold) and
``sinfo --json`` (every node; the whole-cluster tick kept for recorded-output tests). Pure
functions of text; malformed output raises ``SlurmOutputError`` naming the tool and place.

``scontrol show node`` costs REQUEST_NODE_INFO + REQUEST_PARTITION_INFO (it fills in each
node's partitions), the same two RPCs as ``sinfo`` on 22.05 and 24.11 (seen with sdiag): no
Slurm client asks for nodes without partitions. So the tick does not read nodes every time:
``node_read_due`` says when it must (pure: the nodes held, the last read, ``now``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Set
from datetime import datetime, timedelta
from typing import Any

from dispatch.backends.slurm.node_health import node_unhealthy
from dispatch.backends.slurm.parse import (
    NodeInfo,
    SlurmOutputError,
    _document_list,
    _field,
    _number,
    _str,
    epoch,
    parse_sacct_time,
)

_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


# ---------------------------------------------------------------------------------- sinfo --json


def parse_sinfo_json(text: str | bytes) -> tuple[NodeInfo, ...]:
    tool = "sinfo --json"
    _doc, nodes_raw = _document_list(tool, text, "nodes")
    return tuple(_node(tool, n, f"nodes[{i}]") for i, n in enumerate(nodes_raw))


def _node(tool: str, raw: Any, where: str) -> NodeInfo:
    if not isinstance(raw, dict):
        raise SlurmOutputError(tool, where, "expected a JSON object")
    name = _str(tool, _field(tool, raw, "name", where), where + ".name")
    if not name:
        raise SlurmOutputError(tool, where + ".name", "empty node name")
    state_raw = _field(tool, raw, "state", where)
    flags_raw = raw.get("state_flags", [])
    if isinstance(state_raw, list):  # 23.11+: one list of base state and flags
        words = [w for w in state_raw if isinstance(w, str)]
        if not words or len(words) != len(state_raw):
            raise SlurmOutputError(tool, where + ".state", f"bad state {state_raw!r}")
        state, flags = words[0].upper(), tuple(w.upper() for w in words[1:])
    elif isinstance(state_raw, str) and state_raw:
        state = state_raw.upper()
        if not isinstance(flags_raw, list) or not all(isinstance(f, str) for f in flags_raw):
            raise SlurmOutputError(tool, where + ".state_flags", f"bad flags {flags_raw!r}")
        flags = tuple(f.upper() for f in flags_raw)
    else:
        raise SlurmOutputError(tool, where + ".state", f"bad state {state_raw!r}")
    by = raw.get("reason_set_by_user")
    return NodeInfo(
        name=name, state=state, flags=flags,
        reason=_str(tool, raw.get("reason"), where + ".reason"),
        reason_at=epoch(_number(tool, raw.get("reason_changed_at"), where + ".reason_changed_at")),
        reason_by=by if isinstance(by, str) and by else None,
    )


# ---------------------------------------------------------------------------------- cadence


def node_read_due(held: Set[str], last: Mapping[str, NodeInfo], read_at: datetime | None,
                  now: datetime, interval: timedelta) -> bool:
    """Must this tick ask Slurm about the nodes our live jobs hold (``held``)?

    Not when none is held. Yes when nodes were never read, a held node is not in the last
    read (a job got new nodes), a held node was unhealthy there (watch it every tick until it
    is back), the clock went back, or ``interval`` has passed. Otherwise the last read stands:
    a node that went bad since is seen at most ``interval`` late, never one that came back.
    """
    if not held:
        return False
    if read_at is None or now < read_at or now - read_at >= interval:
        return True
    return any(name not in last or node_unhealthy(last[name]) for name in held)


# ---------------------------------------------------------------------------------- nodes

# ``Reason=<text> [<user>@<time>]``: the last field of a node line when set.
_NODE_REASON = re.compile(r" Reason=(?P<text>.*?)(?: \[(?P<by>[^@\]]+)@(?P<at>[^\]]+)\])?\s*$")


def scontrol_node_argv(nodes: list[str]) -> list[str]:
    return ["scontrol", "show", "node", "-o", ",".join(nodes)]


def parse_scontrol_nodes(text: str) -> tuple[NodeInfo, ...]:
    """``scontrol show node -o``: one line per node, ``Key=value`` words; ``State=`` is the
    base state and its flags joined by ``+`` (``DOWN+NOT_RESPONDING``); ``Reason=`` (with
    spaces, then ``[user@time]``) comes last."""
    tool = "scontrol show node"
    out = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"line {n}"
        head = line
        reason, by, at = "", None, None
        m = _NODE_REASON.search(line)
        if m:
            head = line[:m.start()]
            reason, by = m.group("text"), m.group("by")
            if m.group("at"):
                try:
                    at = parse_sacct_time(m.group("at"))
                except ValueError:
                    raise SlurmOutputError(tool, where,
                                           f"Reason time: not a time: {m.group('at')!r}") from None
        words = dict(w.split("=", 1) for w in head.split() if "=" in w)
        name = words.get("NodeName", "")
        if not line.startswith("NodeName=") or not name:
            raise SlurmOutputError(tool, where, f"not a node line: {line[:80]!r}")
        state_text = words.get("State", "")
        states = state_text.upper().split("+")
        if not state_text or not all(_WORD.fullmatch(w) for w in states):
            raise SlurmOutputError(tool, where, f"State: not a node state: {state_text!r}")
        out.append(NodeInfo(name=name, state=states[0], flags=tuple(states[1:]),
                            reason=reason, reason_at=at, reason_by=by))
    return tuple(out)
