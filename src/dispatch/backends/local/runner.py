"""The local runner: one detached process per local object, the "scheduler" of that object.

``python -m dispatch.backends.local.runner OBJDIR`` runs the object described by
``OBJDIR/meta.json``: it waits for the gate when the object is gated, starts N node processes
of the job's argv (never through a shell) with torchrun-like environment variables, watches
them, enforces the time limit and the per-node memory limit, obeys control requests
(``OBJDIR/control/<request>``) and writes what it sees to ``OBJDIR/status.json`` atomically.
It ends when every process it started, and every descendant of them, is gone.

The runner is a child subreaper (prctl PR_SET_CHILD_SUBREAPER), so processes that a node
leaves behind are re-parented to it: they are killed with the node and reaped here. Before the
object may end, every process carrying the object's mark (procs.py) is killed too, whatever it
did to its session, group or parent.

The memory limit is enforced like a cgroup would report it, by resident memory: every
sampling tick (0.1 s) the runner sums the RSS of each node's process tree from /proc and
kills the node's tree when the sum passes the limit. It is a sampled limit, not a hard one:
a process can overshoot between two samples. RLIMIT_AS is not used: it limits address space,
not memory, and makes allocators fail in ways that look like application errors.

A root that goes away (unmounted, renamed, replaced) is not the object's removal: the runner
keeps the nodes running and writes nothing until the root is back. Only the object directory
gone from a root that is still there (its marker with the same id) ends the object. A status
the runner cannot write (a full disk) never ends the object: the nodes keep running and the
status is written again once it can be (S16). Each new status, and each change of a node's
progress file, is named in the root's change journal (journal.py). The nodes' output goes
through the runner (output.py): a full disk or ``max_output_bytes`` drops output, not the job.

SIGTERM, SIGINT and SIGHUP end the object as a stop does (the nodes are killed, SIGTERM then
SIGKILL after the grace), also while the runner still waits for its object to be published.
It imports nothing heavy: it starts once per object.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import msgspec

from dispatch.backends.local.endings import (
    first_failed,
    launch_failed_ending,
    memory_ending,
    node_exit_ending,
    node_lost_cause,
    request_ending,
    runner_failed_ending,
    terminated_ending,
    time_limit_ending,
)
from dispatch.backends.local.journal import RunnerNotes
from dispatch.backends.local.nodes import (
    Node,
    describe_exit,
    free_port,
    node_environment,
    node_error,
    over_memory,
    progress_files,
)
from dispatch.backends.local.output import NodeOutput
from dispatch.backends.local.procs import (
    become_subreaper,
    descendants,
    kill_marked,
    kill_pids,
    marked,
    scan_procs,
)
from dispatch.backends.local.root import marker_id, wait_published
from dispatch.backends.local.signals import Wakeup
from dispatch.backends.local.wire import (
    CANCEL,
    CONTROL,
    GATE,
    LOSE_NODE,
    META,
    PREEMPT,
    PUBLISH_WAIT_S,
    STATUS,
    STOP,
    ControlRequest,
    ObjectMeta,
    ObjectStatus,
    utcnow,
)
from dispatch.core.model import Cause, CauseKind, Execution, State
from dispatch.errors import NotFound
from dispatch.support.files import write_atomic

HEARTBEAT_S = 30.0
MEMORY_SAMPLE_S = 0.1
IDLE_POLL_S = 0.5


class ObjectRemoved(NotFound):
    """Someone removed the directory of a live object: nothing of it may keep running."""


class Runner:
    def __init__(self, objdir: Path, meta: ObjectMeta, wakeup: Wakeup) -> None:
        self.objdir = objdir
        self.meta = meta
        self.wakeup = wakeup
        self.nodes = [Node(i) for i in range(meta.nodes)]
        self.by_pid: dict[int, Node] = {}
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
        self.cannot_write: str | None = None  # why the status cannot be written now
        self.last_written: bytes | None = None
        self.last_heartbeat = 0.0
        self.final: ObjectStatus | None = None
        self.away = False  # the root is away (see here())
        self.marked_deadline: float | None = None
        self.failing: Node | None = None  # its bad exit or memory ended the object
        self.notes = RunnerNotes(objdir, progress_files(objdir, meta.nodes))

    def log(self, message: str) -> None:
        # Straight to the file: a full disk loses the line, never the runner.
        line = f"{utcnow().isoformat()} {self.meta.ref}: {message}\n".encode(errors="replace")
        try:
            os.write(sys.stdout.fileno(), line)
        except (OSError, ValueError):
            pass

    # -- status

    def build_status(self, now: datetime) -> ObjectStatus:
        executions: tuple[Execution, ...] = ()
        if self.final is not None:
            return self.final
        if self.started_at is not None:
            executions = (Execution(index=0, started_at=self.started_at,
                                    nodes=tuple(n.name for n in self.nodes)),)
        if self.gated or self.started_at is None:
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
        if not self.write(status, note=key != self.last_written):
            return
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

    def kill_everything(self, signum: int) -> None:
        """Every process under the runner (parent links) and every one carrying the mark."""
        kill_pids(descendants(scan_procs(), [os.getpid()]), signum)
        kill_marked(self.meta.mark, signum)

    def start_nodes(self) -> None:
        self.gated = False
        self.master_port = free_port()
        self.started_at = utcnow()
        self.started_mono = time.monotonic()
        env = node_environment(self.meta, self.master_port)
        for node in self.nodes:
            try:
                node.start(self.meta, env, self.objdir)
            except (OSError, ValueError) as err:
                self.log(f"{node.name} could not start: {err}")
                self.begin_end(*launch_failed_ending(node.name, self.meta.argv[0], err,
                                                     utcnow()), signal.SIGTERM)
                return
            assert node.pid is not None
            self.by_pid[node.pid] = node
            self.log(f"{node.name} started: pid {node.pid}")
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
            # An empty one was made on a full disk: the request without its details.
            return ControlRequest(at=utcnow(), note="unreadable request")

    def apply_request(self, name: str, request: ControlRequest) -> None:
        if name.startswith(LOSE_NODE):
            self.lose_node(name, request)
            return
        ending = request_ending(name, request, self.lost())
        if ending is None:
            self.log(f"ignored unknown request {name!r}")
        else:
            self.begin_end(*ending, signal.SIGTERM)

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
        kill_pids(node.tree(scan_procs()), signal.SIGKILL)
        node.lost_at = now
        if self.lost_since is None:
            self.lost_since = now
        self.lost_cause = node_lost_cause(self.lost(), self.lost_since)

    def lost(self) -> list[str]:
        return [n.name for n in self.nodes if n.lost_at is not None]

    def judge_nodes(self) -> None:
        """After a node loss nothing the other nodes do ends the object: it stays running
        until it is stopped (S11)."""
        if self.lost_since is not None or self.ending is not None:
            return
        ending = node_exit_ending(self.nodes, now := utcnow())
        if ending is not None:
            self.failing = first_failed(self.nodes, now)
            self.begin_end(*ending, signal.SIGTERM)

    def check_time_limit(self) -> None:
        limit = self.meta.time_limit
        if limit is None or self.started_mono is None or self.ending is not None:
            return
        if time.monotonic() - self.started_mono >= limit:
            self.begin_end(*time_limit_ending(limit, self.meta.kill_grace, utcnow()),
                           signal.SIGTERM)

    def check_memory(self) -> None:
        limit = self.meta.memory
        if limit is None or self.ending is not None or self.started_at is None:
            return
        over = over_memory(self.nodes, limit)
        if over is not None:
            self.failing, rss, tree = over
            kill_pids(tree, signal.SIGKILL)
            self.begin_end(*memory_ending(self.failing.name, rss, limit, utcnow()),
                           signal.SIGTERM)

    def finish(self) -> bool:
        """Write the final status; False while the root is away (written once it is back)."""
        assert self.ending is not None
        state, cause = self.ending
        if self.final is not None:
            return self.publish_final()
        now = utcnow()
        executions: tuple[Execution, ...] = ()
        if self.started_at is not None:  # the failed node's own words go with the end
            failed = self.failing if state is State.FAILED else None
            executions = (Execution(index=0, started_at=self.started_at, ended_at=now,
                                    cause=cause, nodes=tuple(n.name for n in self.nodes),
                                    error=node_error(self.objdir, failed, self.started_at, now)),)
        self.final = ObjectStatus(
            ref=self.meta.ref, token=self.meta.token, state=state, cause=cause,
            executions=executions, nodes=tuple(n.status() for n in self.nodes),
            lost_since=self.lost_since, gated=False, master_port=self.master_port,
            runner_pid=os.getpid(), ending=None, updated_at=now, heartbeat_at=now)
        self.log(f"ended {state.value}: {cause.kind.value}")
        return self.publish_final()

    def publish_final(self) -> bool:
        assert self.final is not None
        return self.write(self.final)

    def write(self, status: ObjectStatus, note: bool = True) -> bool:
        """Write ``status`` (``note``: and name it in the journal); False when it cannot be
        written now (the root away, a full disk): the object goes on, the next step retries."""
        try:
            write_atomic(self.objdir / STATUS, msgspec.json.encode(status))
        except OSError as err:
            if self.cannot_write is None and (self.objdir / META).exists():
                self.log(f"cannot write {STATUS}: {err}; the object goes on, and the status "
                         "is written once it can be")
            self.cannot_write = str(err)
            return False
        if self.cannot_write is not None:
            self.log(f"{STATUS} written again")
            self.cannot_write = None
        if note:
            self.notes.changed()
        return True

    def outputs(self) -> list[NodeOutput]:
        return [n.output for n in self.nodes if n.output is not None]

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
        self.ending = runner_failed_ending(err, utcnow())
        try:
            if not self.finish():
                self.log("cannot write the final status: the root is away")
        except OSError as write_err:
            self.log(f"cannot write the final status: {write_err}")

    # -- the loop

    def step(self) -> bool:
        """One look at everything; True once the object has ended."""
        here = self.here()
        self.reap()
        if self.wakeup.received and self.ending is None:
            self.begin_end(*terminated_ending(self.wakeup.received[0], utcnow()),
                           signal.SIGTERM)
        if here:
            self.handle_requests()
        if self.ending is None and self.gated and (self.objdir / GATE).exists():
            self.log("gate opened")
            self.start_nodes()
            self.reap()
        if here and self.ending is None and not self.gated and self.started_at is None:
            self.start_nodes()
            self.reap()
        self.judge_nodes()
        self.check_time_limit()
        self.check_memory()
        if self.ending is not None:
            self.reap()
            if not self.children_left and self.marked_gone():
                for output in self.outputs():  # the last words, then the files let go
                    output.drain()  # (a log removed to make room frees it now)
                    output.close()
                if self.finish():
                    self.notes.step()
                    return True
            if self.kill_deadline is not None and time.monotonic() >= self.kill_deadline:
                self.kill_everything(signal.SIGKILL)
                self.kill_deadline = time.monotonic() + 1.0
        if here:
            self.write_status()
            self.notes.step()
        return False

    def here(self) -> bool:
        """True while the object directory is there. False while the whole root is away
        (unmounted, renamed, replaced): the nodes keep running and nothing is written until
        it is back. Raises ObjectRemoved when the root is there without the object."""
        if (self.objdir / META).exists():
            if self.away:
                self.log("the root is back")
                self.away = False
            return True
        root_id = marker_id(self.objdir.parent.parent)
        if not self.meta.root_id or root_id == self.meta.root_id:
            raise ObjectRemoved(f"{self.objdir} was removed while the object ran")
        if root_id is not None:  # nobody will look for the object in another root
            raise ObjectRemoved(f"the root is another one now (marker {root_id}, not "
                                f"{self.meta.root_id}): {self.objdir} is gone")
        if not self.away:
            self.log(f"the root is away (no marker {self.meta.root_id}); the nodes keep "
                     "running and nothing is written until it is back")
            self.away = True
        return False

    def marked_gone(self) -> bool:
        """Kill what still carries the object's mark once every child is gone (a process that
        left the runner's tree); True when none is left, or when those left could not be
        killed within the grace (another user's process: the object must still end)."""
        left = [p.pid for p in marked(self.meta.mark) if p.pid != os.getpid()]
        if not left:
            return True
        now = time.monotonic()
        if self.marked_deadline is None:
            self.marked_deadline = now + self.meta.kill_grace + 5.0
        elif now >= self.marked_deadline:
            self.log(f"could not kill processes of the object {left}; ending without them")
            return True
        self.log(f"killing processes of the object outside the runner's tree: {left}")
        kill_pids(left, signal.SIGKILL)
        return False

    def timeout(self) -> float:
        interval = MEMORY_SAMPLE_S if self.meta.memory is not None else IDLE_POLL_S
        if self.ending is not None and not self.away:
            interval = min(interval, 0.05)
        if self.meta.time_limit is not None and self.started_mono is not None:
            left = self.started_mono + self.meta.time_limit - time.monotonic()
            interval = min(interval, max(left, 0.0))
        if self.kill_deadline is not None:
            interval = min(interval, max(self.kill_deadline - time.monotonic(), 0.0))
        return interval

    def run(self) -> None:
        while not self.step():
            self.wakeup.wait(self.outputs(), self.timeout())


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m dispatch.backends.local.runner OBJDIR", file=sys.stderr)
        return 2
    objdir = Path(args[0]).absolute()
    wakeup = Wakeup()
    if not wait_published(objdir, PUBLISH_WAIT_S, stop=lambda: bool(wakeup.received)):
        why = "a signal came first" if wakeup.received else "the submit did not finish"
        print(f"{objdir} was never published ({why}); leaving: nothing was started",
              file=sys.stderr)
        return 0
    meta = msgspec.json.decode((objdir / META).read_bytes(), type=ObjectMeta)
    if not become_subreaper():
        print("warning: cannot become a child subreaper; processes a node leaves behind "
              "may outlive the object", file=sys.stderr, flush=True)
    runner = Runner(objdir, meta, wakeup)
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
