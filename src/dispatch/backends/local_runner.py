"""The local runner: one detached process per local object, the "scheduler" of that object.

``python -m dispatch.backends.local_runner OBJDIR`` runs the object described by
``OBJDIR/meta.json``: it waits for the gate when the object is gated, starts N node processes
of the job's argv (never through a shell) with torchrun-like environment variables, watches
them, enforces the time limit and the per-node memory limit, obeys control requests
(``OBJDIR/control/<request>``) and writes what it sees to ``OBJDIR/status.json`` atomically.
It ends when every process it started, and every descendant of them, is gone.

The runner is a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so processes that a node
leaves behind are re-parented to it: they are killed with the node and reaped here, and
"no child left" means the object has truly ended.

The memory limit is enforced like a cgroup would report it, by resident memory: every
sampling tick (0.1 s) the runner sums the RSS of each node's process tree from /proc and
kills the node's tree when the sum passes the limit. It is a sampled limit, not a hard one:
a process can overshoot between two samples. RLIMIT_AS is not used: it limits address space,
not memory, and makes allocators fail in ways that look like application errors.

This module also holds the on-disk formats the backend (local.py) reads, and the /proc
helpers both sides share. It imports nothing heavy: it starts once per object.
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from dispatch.core.model import Cause, CauseKind, Execution, Provenance, State

FORMAT = 1
SUPERVISOR_ACTOR = "dispatch"
# The environment variable that carries the submitter's own PYTHONPATH through the runner,
# whose PYTHONPATH was extended so that it can import dispatch; nodes get the original back.
ORIGINAL_PYTHONPATH = "DISPATCH_LOCAL_ORIGINAL_PYTHONPATH"
# Its value is "set:<the original>" or "unset" (an environment cannot carry a NUL marker).
UNSET = "unset"
SET_PREFIX = "set:"
# How long a freshly started runner waits for submit to publish its object directory.
PUBLISH_WAIT_S = 60.0
HEARTBEAT_S = 30.0
MEMORY_SAMPLE_S = 0.1
IDLE_POLL_S = 0.5

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


# ---------------------------------------------------------------- on-disk formats


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


# ---------------------------------------------------------------- files


def _write_synced(tmp: Path, data: bytes) -> None:
    """The whole of ``data`` in a fresh temp file, on disk before it is published."""
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``path`` so that a reader sees the old file or the whole new one, never a part."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    _write_synced(tmp, data)
    os.replace(tmp, path)


def create_exclusive(path: Path, data: bytes) -> bool:
    """Publish ``path`` whole, only if it does not exist yet. False when another won."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{time.monotonic_ns()}")
    _write_synced(tmp, data)
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---------------------------------------------------------------- /proc


class ProcStat(msgspec.Struct, frozen=True):
    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    start_ticks: int
    rss_pages: int


def read_proc_stat(pid: int) -> ProcStat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read()
    except OSError:
        return None
    return parse_proc_stat(pid, raw)


def parse_proc_stat(pid: int, raw: bytes) -> ProcStat | None:
    """One /proc/<pid>/stat line; None when it is not one (proc(5) field numbers)."""
    # The command name is in parentheses and may itself hold spaces and parentheses.
    close = raw.rfind(b")")
    if close < 0:
        return None
    fields = raw[close + 2:].split()
    try:
        return ProcStat(pid=pid, state=fields[0].decode(), ppid=int(fields[1]),
                        pgid=int(fields[2]), sid=int(fields[3]), start_ticks=int(fields[19]),
                        rss_pages=int(fields[21]))
    except (IndexError, ValueError):
        return None


def scan_procs() -> dict[int, ProcStat]:
    """Every process on the machine (one pass over /proc)."""
    out: dict[int, ProcStat] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    for name in names:
        if name.isdigit():
            st = read_proc_stat(int(name))
            if st is not None:
                out[st.pid] = st
    return out


def descendants(procs: dict[int, ProcStat], roots: Iterable[int]) -> set[int]:
    """The processes under ``roots`` (not the roots themselves), by parent links."""
    children: dict[int, list[int]] = {}
    for st in procs.values():
        children.setdefault(st.ppid, []).append(st.pid)
    out: set[int] = set()
    todo = list(roots)
    while todo:
        for child in children.get(todo.pop(), ()):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return ""


def process_alive(pid: int, start_ticks: int) -> bool:
    """True when ``pid`` is still the very process that had ``start_ticks`` (not a zombie,
    not a reused pid). Compare boot ids first: start times only order one boot."""
    st = read_proc_stat(pid)
    return st is not None and st.start_ticks == start_ticks and st.state not in ("Z", "X")


PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")
PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def mib(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"


# ---------------------------------------------------------------- the runner


class ObjectRemoved(Exception):
    """Someone removed the directory of a live object: nothing of it may keep running."""


class _Node:
    def __init__(self, index: int) -> None:
        self.index = index
        self.name = node_name(index)
        self.pid: int | None = None
        self.start_ticks: int | None = None
        self.exit_code: int | None = None
        self.ended_at: datetime | None = None
        self.lost_at: datetime | None = None

    @property
    def running(self) -> bool:
        return self.pid is not None and self.exit_code is None

    def status(self) -> NodeStatus:
        return NodeStatus(index=self.index, name=self.name, pid=self.pid,
                          start_ticks=self.start_ticks, exit_code=self.exit_code,
                          ended_at=self.ended_at, lost_at=self.lost_at)


class Runner:
    def __init__(self, objdir: Path, meta: ObjectMeta, wake_fd: int) -> None:
        self.objdir = objdir
        self.meta = meta
        self.wake_fd = wake_fd
        self.nodes = [_Node(i) for i in range(meta.nodes)]
        self.by_pid: dict[int, _Node] = {}
        self.gated = meta.gated
        self.started_at: datetime | None = None
        self.started_mono: float | None = None
        self.master_port: int | None = None
        self.lost_since: datetime | None = None
        self.lost_cause: Cause | None = None
        self.seen_requests: set[str] = set()
        # Ending: the state and cause are decided; the runner kills and waits for the rest.
        self.ending: tuple[State, Cause] | None = None
        self.kill_deadline: float | None = None
        self.children_left = False
        self.terminated_by: int | None = None
        self.last_written: bytes | None = None
        self.last_heartbeat = 0.0
        self.final: ObjectStatus | None = None

    # -- logging

    def log(self, message: str) -> None:
        print(f"{utcnow().isoformat()} {self.meta.ref}: {message}", flush=True)

    # -- status

    def build_status(self, now: datetime) -> ObjectStatus:
        executions: tuple[Execution, ...] = ()
        if self.final is not None:
            return self.final
        if self.started_at is not None:
            executions = (Execution(index=0, started_at=self.started_at,
                                    nodes=tuple(n.name for n in self.nodes)),)
        if self.gated:
            state, cause = State.PENDING, Cause(kind=CauseKind.NONE)
        elif self.started_at is None:
            state, cause = State.PENDING, Cause(kind=CauseKind.NONE)
        else:
            state = State.RUNNING
            cause = self.lost_cause or Cause(kind=CauseKind.NONE)
        return ObjectStatus(
            ref=self.meta.ref, token=self.meta.token, state=state, cause=cause,
            executions=executions, nodes=tuple(n.status() for n in self.nodes),
            lost_since=self.lost_since, gated=self.gated, master_port=self.master_port,
            runner_pid=os.getpid(), ending=self.ending[1] if self.ending else None,
            updated_at=now, heartbeat_at=now)

    def write_status(self, force_heartbeat: bool = False) -> None:
        now = utcnow()
        status = self.build_status(now)
        # Compare without the times so that only a change (or a heartbeat) is written.
        key = msgspec.json.encode(msgspec.structs.replace(
            status, updated_at=datetime.min.replace(tzinfo=UTC),
            heartbeat_at=datetime.min.replace(tzinfo=UTC)))
        beat_due = time.monotonic() - self.last_heartbeat >= HEARTBEAT_S
        if key == self.last_written and not beat_due and not force_heartbeat:
            return
        write_atomic(self.objdir / STATUS, msgspec.json.encode(status))
        self.last_written = key
        self.last_heartbeat = time.monotonic()

    # -- processes

    def reap(self) -> None:
        while True:
            try:
                pid, wait_status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.children_left = False
                return
            if pid == 0:
                self.children_left = True
                return
            node = self.by_pid.get(pid)
            if node is not None and node.exit_code is None:
                node.exit_code = os.waitstatus_to_exitcode(wait_status)
                node.ended_at = utcnow()
                self.log(f"{node.name} (pid {pid}) ended: {describe_exit(node.exit_code)}")

    def node_tree(self, procs: dict[int, ProcStat], node: _Node) -> set[int]:
        """A node's processes: its leader, everything under it, and everything of its
        session (children re-parented to the runner keep the session of their node)."""
        if node.pid is None:
            return set()
        tree: set[int] = set()
        leader = procs.get(node.pid)
        if leader is not None and leader.start_ticks == node.start_ticks:
            # Only the node's own leader, not a process that reused its pid.
            tree.add(node.pid)
            tree |= descendants(procs, [node.pid])
        tree |= {st.pid for st in procs.values() if st.sid == node.pid and st.pid != os.getpid()}
        return tree

    def kill(self, pids: Iterable[int], signum: int) -> None:
        for pid in pids:
            if pid == os.getpid():
                continue
            try:
                os.kill(pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def kill_everything(self, signum: int) -> None:
        procs = scan_procs()
        self.kill(descendants(procs, [os.getpid()]), signum)

    def start_nodes(self) -> None:
        self.gated = False
        self.master_port = free_port()
        self.started_at = utcnow()
        self.started_mono = time.monotonic()
        env = node_environment(self.meta, self.master_port)
        for node in self.nodes:
            node_env = dict(env)
            node_env.update({"RANK": str(node.index), "NODE_RANK": str(node.index),
                             "GROUP_RANK": str(node.index), "DISPATCH_NODE": node.name})
            try:
                with open(self.objdir / f"{node.name}.log", "ab") as out:
                    proc = subprocess.Popen(  # noqa: S603 - an argv list, never a shell
                        list(self.meta.argv), cwd=self.meta.workdir, env=node_env,
                        stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                        start_new_session=True, close_fds=True)
            except (OSError, ValueError) as err:
                self.log(f"{node.name} could not start: {err}")
                self.begin_end(State.FAILED, Cause(
                    kind=CauseKind.LAUNCH_FAILED, provenance=Provenance.SCHEDULER,
                    detail=f"{node.name} could not start {self.meta.argv[0]!r}: {err}",
                    at=utcnow()), signal.SIGTERM)
                return
            # The runner reaps with waitpid(-1); Popen must never wait for it again.
            proc.returncode = 0
            node.pid = proc.pid
            st = read_proc_stat(proc.pid)
            node.start_ticks = st.start_ticks if st else None
            self.by_pid[proc.pid] = node
            self.log(f"{node.name} started: pid {proc.pid}")
        self.children_left = True

    # -- decisions

    def begin_end(self, state: State, cause: Cause, signum: int) -> None:
        """Decide how the object ends, then kill what still runs of it."""
        if self.ending is not None:
            return
        self.ending = (state, cause)
        self.log(f"ending {state.value}: {cause.kind.value} ({cause.detail})")
        self.kill_everything(signum)
        if signum == signal.SIGKILL:
            self.kill_deadline = time.monotonic()
        else:
            self.kill_deadline = time.monotonic() + self.meta.kill_grace

    def handle_requests(self) -> None:
        try:
            names = sorted(os.listdir(self.objdir / CONTROL))
        except OSError:
            return
        fresh = [n for n in names if not n.startswith(".") and n not in self.seen_requests]
        # A person's cancel comes before the supervisor's stop, and both before injections.
        order = {CANCEL: 0, STOP: 1, PREEMPT: 2}
        for name in sorted(fresh, key=lambda n: (order.get(n, 3), n)):
            self.seen_requests.add(name)
            request = self.read_request(name)
            self.log(f"request {name}")
            if self.ending is not None:
                continue
            self.apply_request(name, request)

    def read_request(self, name: str) -> ControlRequest:
        try:
            raw = (self.objdir / CONTROL / name).read_bytes()
            return msgspec.json.decode(raw, type=ControlRequest)
        except (OSError, msgspec.DecodeError):
            return ControlRequest(at=utcnow(), note="unreadable request")

    def apply_request(self, name: str, request: ControlRequest) -> None:
        at = request.at
        lost = self.lost_note()
        if name == CANCEL:
            actor = request.actor or "unknown"
            self.begin_end(State.CANCELLED, Cause(
                kind=CauseKind.CANCELLED, provenance=Provenance.ACTOR, actor=actor,
                detail=f"cancelled by {actor}{lost}", at=at), signal.SIGTERM)
        elif name == STOP:
            actor = request.actor or SUPERVISOR_ACTOR
            self.begin_end(State.CANCELLED, Cause(
                kind=CauseKind.CANCELLED, provenance=Provenance.ACTOR, actor=actor,
                detail=f"stopped by the supervisor ({actor}){lost}", at=at), signal.SIGTERM)
        elif name == PREEMPT:
            self.begin_end(State.FAILED, Cause(
                kind=CauseKind.PREEMPTED, provenance=Provenance.SCHEDULER,
                detail="injected preemption", at=at), signal.SIGTERM)
        elif name.startswith(LOSE_NODE):
            self.lose_node(name, request)
        else:
            self.log(f"ignored unknown request {name!r}")

    def lose_node(self, name: str, request: ControlRequest) -> None:
        suffix = name[len(LOSE_NODE):]
        if not suffix.isdigit() or int(suffix) >= len(self.nodes):
            self.log(f"ignored {name!r}: no such node")
            return
        node = self.nodes[int(suffix)]
        if self.started_at is None or node.lost_at is not None:
            self.log(f"ignored {name!r}: {node.name} is not running")
            return
        now = utcnow()
        self.kill(self.node_tree(scan_procs(), node), signal.SIGKILL)
        node.lost_at = now
        if self.lost_since is None:
            self.lost_since = now
        lost = [n.name for n in self.nodes if n.lost_at is not None]
        self.lost_cause = Cause(
            kind=CauseKind.NODE_LOST, provenance=Provenance.SCHEDULER,
            detail=f"{', '.join(lost)} lost (injected): its processes were killed; the object "
                   "keeps running until it is stopped",
            at=self.lost_since)

    def lost_note(self) -> str:
        lost = [n.name for n in self.nodes if n.lost_at is not None]
        return f"; {', '.join(lost)} had been lost" if lost else ""

    def judge_nodes(self) -> None:
        """What the nodes' exits say: the first bad exit ends the object (srun's
        --kill-on-bad-exit); all zero is success. After a node loss nothing the other nodes
        do ends it: the object stays running until it is stopped (S11)."""
        if self.lost_since is not None or self.ending is not None:
            return
        for node in sorted((n for n in self.nodes if n.exit_code not in (None, 0)),
                           key=lambda n: (n.ended_at or utcnow(), n.index)):
            code = node.exit_code
            assert code is not None
            if code > 0:
                cause = Cause(kind=CauseKind.NON_ZERO_EXIT, provenance=Provenance.APPLICATION,
                              detail=f"{node.name} exited {code}; the other nodes were killed",
                              exit_code=code, at=node.ended_at)
            else:
                cause = Cause(kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
                              detail=f"{node.name} (pid {node.pid}) killed by signal {-code} "
                                     f"({signal_name(-code)}), not by dispatch; the other "
                                     "nodes were killed", at=node.ended_at)
            self.begin_end(State.FAILED, cause, signal.SIGTERM)
            return
        if self.nodes and all(n.exit_code == 0 for n in self.nodes):
            self.begin_end(State.SUCCEEDED, Cause(
                kind=CauseKind.NONE, provenance=Provenance.APPLICATION, exit_code=0,
                detail=f"all {len(self.nodes)} nodes exited 0", at=utcnow()), signal.SIGTERM)

    def check_time_limit(self) -> None:
        limit = self.meta.time_limit
        if limit is None or self.started_mono is None or self.ending is not None:
            return
        if time.monotonic() - self.started_mono >= limit:
            self.begin_end(State.FAILED, Cause(
                kind=CauseKind.TIME_LIMIT, provenance=Provenance.SCHEDULER,
                detail=f"time limit {limit:g}s reached; the nodes were killed (SIGTERM, then "
                       f"SIGKILL after {self.meta.kill_grace:g}s)", at=utcnow()),
                signal.SIGTERM)

    def check_memory(self) -> None:
        limit = self.meta.memory
        if limit is None or self.ending is not None or self.started_at is None:
            return
        procs = scan_procs()
        for node in self.nodes:
            # A node whose leader exited may have left processes behind: they still count.
            if node.lost_at is not None or node.pid is None:
                continue
            tree = self.node_tree(procs, node)
            rss = sum(procs[p].rss_pages for p in tree if p in procs) * PAGE_SIZE
            if rss > limit:
                self.kill(tree, signal.SIGKILL)
                self.begin_end(State.FAILED, Cause(
                    kind=CauseKind.OUT_OF_MEMORY, provenance=Provenance.SCHEDULER,
                    detail=f"{node.name}: resident memory of its processes {rss} bytes "
                           f"({mib(rss)}) passed the limit {limit} bytes ({mib(limit)}), "
                           "sampled from /proc; the nodes were killed", at=utcnow()),
                    signal.SIGTERM)
                return

    def finish(self) -> None:
        assert self.ending is not None
        state, cause = self.ending
        now = utcnow()
        executions: tuple[Execution, ...] = ()
        if self.started_at is not None:
            executions = (Execution(index=0, started_at=self.started_at, ended_at=now,
                                    cause=cause, nodes=tuple(n.name for n in self.nodes)),)
        self.final = ObjectStatus(
            ref=self.meta.ref, token=self.meta.token, state=state, cause=cause,
            executions=executions, nodes=tuple(n.status() for n in self.nodes),
            lost_since=self.lost_since, gated=False, master_port=self.master_port,
            runner_pid=os.getpid(), ending=None, updated_at=now, heartbeat_at=now)
        write_atomic(self.objdir / STATUS, msgspec.json.encode(self.final))
        self.log(f"ended {state.value}: {cause.kind.value}")

    def crash(self, err: BaseException) -> None:
        """The runner itself failed: kill everything it started, then say so if it can
        (an unknown cause with the error's words; never left running without a runner)."""
        self.log(f"runner failed: {err!r}; killing every process of the object")
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            self.kill_everything(signal.SIGKILL)
            self.reap()
            if not self.children_left:
                break
            time.sleep(0.02)
        if self.final is not None:
            return
        self.ending = (State.FAILED, Cause(
            kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
            detail=f"the local runner failed: {err!r}; the nodes were killed", at=utcnow()))
        try:
            self.finish()
        except OSError as write_err:
            self.log(f"cannot write the final status: {write_err}")

    # -- the loop

    def wait(self, timeout: float) -> None:
        if timeout > 0:
            select.select([self.wake_fd], [], [], timeout)
        try:
            while os.read(self.wake_fd, 4096):
                pass
        except BlockingIOError:
            pass

    def step(self) -> bool:
        """One look at everything; True once the object has ended."""
        if not (self.objdir / META).exists():
            raise ObjectRemoved(f"{self.objdir} was removed while the object ran")
        self.reap()
        if self.terminated_by is not None and self.ending is None:
            signum = self.terminated_by
            self.begin_end(State.FAILED, Cause(
                kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
                detail=f"the local runner received {signal_name(signum)}; the nodes were "
                       "killed", at=utcnow()), signal.SIGTERM)
        self.handle_requests()
        if self.ending is None and self.gated and (self.objdir / GATE).exists():
            self.log("gate opened")
            self.start_nodes()
            self.reap()
        if self.ending is None and not self.gated and self.started_at is None:
            self.start_nodes()
            self.reap()
        self.judge_nodes()
        self.check_time_limit()
        self.check_memory()
        if self.ending is not None:
            self.reap()
            if not self.children_left:
                self.finish()
                return True
            if self.kill_deadline is not None and time.monotonic() >= self.kill_deadline:
                self.kill_everything(signal.SIGKILL)
                self.kill_deadline = time.monotonic() + 1.0
        self.write_status()
        return False

    def timeout(self) -> float:
        interval = MEMORY_SAMPLE_S if self.meta.memory is not None else IDLE_POLL_S
        if self.ending is not None:
            interval = min(interval, 0.05)
        if self.meta.time_limit is not None and self.started_mono is not None:
            left = self.started_mono + self.meta.time_limit - time.monotonic()
            interval = min(interval, max(left, 0.0))
        if self.kill_deadline is not None:
            interval = min(interval, max(self.kill_deadline - time.monotonic(), 0.0))
        return interval

    def run(self) -> None:
        while not self.step():
            self.wait(self.timeout())


def describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code} ({signal_name(-code)})"
    return f"exit {code}"


def node_environment(meta: ObjectMeta, master_port: int) -> dict[str, str]:
    """The nodes' environment: the submitter's, the spec's, then the torchrun-like variables
    (which win: a spec cannot give a node a wrong rank)."""
    env = dict(os.environ)
    original = env.pop(ORIGINAL_PYTHONPATH, None)
    if original == UNSET:
        env.pop("PYTHONPATH", None)
    elif original is not None and original.startswith(SET_PREFIX):
        env["PYTHONPATH"] = original[len(SET_PREFIX):]
    env.update(meta.env)
    env.update({
        "WORLD_SIZE": str(meta.nodes),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port),
        "DISPATCH_JOB_ID": meta.job_id,
        "DISPATCH_SUBMISSION": str(meta.submission),
        "DISPATCH_OBJECT": meta.ref,
    })
    return env


def _wait_published(objdir: Path) -> bool:
    """submit starts the runner, then publishes the object directory; a submit that crashed
    in between never publishes it, and the runner leaves."""
    deadline = time.monotonic() + PUBLISH_WAIT_S
    while time.monotonic() < deadline:
        if (objdir / META).exists() and (objdir / RUNNER).exists():
            return True
        time.sleep(0.005)
    return False


def _install_signals(runner_box: list[Runner]) -> int:
    rfd, wfd = os.pipe()
    for fd in (rfd, wfd):
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags | os.O_NONBLOCK)
    signal.set_wakeup_fd(wfd, warn_on_full_buffer=False)

    def wake(signum: int, frame: object) -> None:
        return None

    def terminate(signum: int, frame: object) -> None:
        if runner_box and runner_box[0].terminated_by is None:
            runner_box[0].terminated_by = signum

    signal.signal(signal.SIGUSR1, wake)
    signal.signal(signal.SIGCHLD, wake)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, terminate)
    return rfd


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dispatch.backends.local_runner OBJDIR", file=sys.stderr)
        return 2
    objdir = Path(args[0])
    box: list[Runner] = []
    wake_fd = _install_signals(box)
    if not _wait_published(objdir):
        print(f"{objdir} was never published (the submit did not finish); leaving",
              file=sys.stderr)
        return 0
    meta = msgspec.json.decode((objdir / META).read_bytes(), type=ObjectMeta)
    if not become_subreaper():
        print("warning: cannot become a child subreaper; processes a node leaves behind "
              "may outlive the object", file=sys.stderr, flush=True)
    runner = Runner(objdir, meta, wake_fd)
    box.append(runner)
    # The first status says the runner is ready for signals (control requests, the gate).
    try:
        runner.write_status(force_heartbeat=True)
        runner.run()
    except BaseException as err:
        runner.crash(err)
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main())
