"""The local backend's on-disk formats: what the backend and the runner write for each other.

A root holds ``root.json`` (its marker, written once at first use), ``objects/<ref>/`` (one
directory per object) and ``staging/`` (objects being created). Each object directory holds:

- ``meta.json``   what submit wrote (token, argv, env, limits, gated, the process mark); never
  changes;
- ``runner.json`` the runner process (pid + start time + boot id, so a reused pid is not
  mistaken for it);
- ``status.json`` what the runner sees, rewritten atomically on every change;
- ``gate``, ``control/<request>``  requests to the runner, each file written atomically;
- ``node<i>.log``, ``runner.log``  output;
- ``vanished.json`` the backend's verdict on an object whose runner died without a final
  status (created once, exclusively, by whoever sees it first).

Every format is strict (unknown fields and words are refused, never misread). Pure: no I/O.
"""

from __future__ import annotations

from datetime import UTC, datetime

import msgspec

from dispatch.core.model import Cause, Execution, State

FORMAT = 1
SUPERVISOR_ACTOR = "dispatch"

ROOT_MARKER = "root.json"
OBJECTS = "objects"
STAGING = "staging"
CLAIMS = "claims"  # claims.py
META = "meta.json"
RUNNER = "runner.json"
STATUS = "status.json"
VANISHED = "vanished.json"
GATE = "gate"
CONTROL = "control"
RUNNER_LOG = "runner.log"

# Control requests (file names under control/); lose-node carries its node in the name.
CANCEL = "cancel"
STOP = "stop"
PREEMPT = "preempt"
LOSE_NODE = "lose-node-"

# Every process of an object carries this variable, inherited from its node: the object's
# processes are found by it whatever they do to their session, group or parent.
MARK_VAR = "DISPATCH_LOCAL_MARK"

# How long a freshly started runner waits for submit to publish its object directory.
PUBLISH_WAIT_S = 60.0


class RootMarker(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Says "this directory is a local root" and which one. A root without it is not mounted
    (or not ours): nothing missing from it may be read as ended."""

    format: int = FORMAT
    id: str
    created_at: datetime


class ObjectMeta(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What submit wrote; never changes afterwards."""

    format: int = FORMAT
    ref: str
    token: str
    job_id: str
    submission: int
    name: str
    nodes: int
    argv: tuple[str, ...]
    env: dict[str, str] = {}
    workdir: str
    time_limit: float | None = None  # seconds, from the start of the execution
    memory: int | None = None  # bytes of resident memory per node
    gated: bool = False
    kill_grace: float = 3.0  # seconds between SIGTERM and SIGKILL
    created_at: datetime
    # The value of MARK_VAR in the object's processes ("" in objects from before the mark).
    mark: str = ""
    # The id in the root's marker when the object was created ("" before root markers).
    root_id: str = ""
    # Bytes of output each node may write to its log; the rest is dropped (None: no limit).
    max_output_bytes: int | None = None
    # The spec's progress.checkpoint_pattern (G3; "" when it gives none).
    checkpoint_pattern: str = ""


class RunnerInfo(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """Which process runs the object: a pid is only trusted with its start time and boot."""

    pid: int
    start_ticks: int
    boot_id: str


class ControlRequest(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    actor: str | None = None
    at: datetime
    note: str = ""


class NodeStatus(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True,
                 omit_defaults=True):
    index: int
    name: str
    pid: int | None = None
    start_ticks: int | None = None
    # os.waitstatus_to_exitcode: negative means killed by that signal.
    exit_code: int | None = None
    ended_at: datetime | None = None
    lost_at: datetime | None = None


class ObjectStatus(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the runner (or, for a vanished runner, the backend) says about the object."""

    format: int = FORMAT
    ref: str
    token: str
    state: State
    cause: Cause
    executions: tuple[Execution, ...] = ()
    nodes: tuple[NodeStatus, ...] = ()
    lost_since: datetime | None = None
    gated: bool = False
    master_port: int | None = None
    runner_pid: int | None = None
    # The cause already decided while the runner is still killing processes.
    ending: Cause | None = None
    updated_at: datetime
    heartbeat_at: datetime

    @property
    def final(self) -> bool:
        return self.state.terminal


def node_name(index: int) -> str:
    return f"node{index}"


def utcnow() -> datetime:
    return datetime.now(UTC)
