"""What the local backend reports about an object, built from its files: pure except for the
killing of a vanished runner's leftovers (which must happen before "ended" is said) and the
bounded read of the nodes' progress files (G3)."""

from __future__ import annotations

import getpass
import os
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from dispatch.backends.local.nodes import nodes_progress
from dispatch.backends.local.procs import kill_leftovers
from dispatch.backends.local.wire import NodeStatus, ObjectMeta, ObjectStatus, RunnerInfo
from dispatch.core.model import (
    Cause,
    CauseKind,
    Execution,
    ObjectReport,
    Provenance,
    State,
)

NO_SUCH_OBJECT = "no such local object"


def from_status(status: ObjectStatus, objdir: Path | None = None) -> ObjectReport:
    """``objdir``: the object's directory, whose nodes' progress files give the execution's
    latest checkpoint (G3); without it, none is read."""
    executions = status.executions
    if objdir is not None and executions:
        last = executions[-1]
        found = nodes_progress(objdir, len(status.nodes), last.started_at,
                               last.ended_at or datetime.now(UTC))  # never after its end
        if found is not None:
            executions = (*executions[:-1], msgspec.structs.replace(last, progress=found))
    return ObjectReport(ref=status.ref, token=status.token, state=status.state,
                        cause=status.cause, executions=executions,
                        nodes=tuple(n.name for n in status.nodes),
                        lost_since=status.lost_since, gated=status.gated)


def unreadable(ref: str, token: str | None, detail: str) -> ObjectReport:
    # We cannot tell whether it still runs: unknown, and alive (never "ended" on a guess).
    return ObjectReport(ref=ref, token=token, state=State.UNKNOWN,
                        cause=Cause(kind=CauseKind.UNKNOWN, detail=detail))


def missing(ref: str, objects_dir: Path, root_id: str, now: datetime) -> ObjectReport:
    """A ref with no object under a root that is there and is ours (its marker was read):
    nothing of it exists here, so nothing of it can run, and it is reported ended."""
    return ObjectReport(ref=ref, token=None, state=State.FAILED, cause=Cause(
        kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
        detail=f"{NO_SUCH_OBJECT} {ref} under {objects_dir} (root {root_id})", at=now))


def ended_at(report: ObjectReport) -> datetime | None:
    for ex in reversed(report.executions):
        if ex.ended_at is not None:
            return ex.ended_at
    return report.cause.at


def last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line for line in tail.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def vanished(ref: str, meta: ObjectMeta, status: ObjectStatus | str | None,
             info: RunnerInfo | None, runner_log: Path, now: datetime) -> ObjectStatus:
    """The verdict on an object whose runner died without a final status: every process it
    left behind is killed first (by session and by the object's mark), then it ended with an
    unknown cause and the words of what was seen (never a guess at why)."""
    killed = kill_leftovers(status.nodes if isinstance(status, ObjectStatus) else (),
                            meta.mark)
    words = [f"the local runner (pid {info.pid if info else '?'}) vanished without "
             "writing a final status"]
    if isinstance(status, ObjectStatus):
        words.append(f"its last status said {status.state.value}")
        if status.ending is not None:
            words.append(f"while ending with {status.ending.kind.value} "
                         f"({status.ending.detail})")
    elif status is None:
        words.append("it never wrote a status")
    else:
        words.append(f"its status was unreadable: {status}")
    if killed:
        words.append(f"killed left-over processes {sorted(killed)}")
    last = last_line(runner_log)
    if last:
        words.append(f"runner log ends: {last}")
    cause = Cause(kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
                  detail="; ".join(words), at=now)
    executions: tuple[Execution, ...] = ()
    nodes: tuple[NodeStatus, ...] = ()
    lost_since = None
    if isinstance(status, ObjectStatus):
        executions = tuple(
            ex if ex.ended else msgspec.structs.replace(ex, ended_at=now, cause=cause)
            for ex in status.executions)
        nodes = status.nodes
        lost_since = status.lost_since
    return ObjectStatus(ref=ref, token=meta.token, state=State.FAILED, cause=cause,
                        executions=executions, nodes=nodes, lost_since=lost_since,
                        runner_pid=info.pid if info else None, updated_at=now,
                        heartbeat_at=now)


def whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"
