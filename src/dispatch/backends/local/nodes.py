"""A local object's node processes: what the runner knows of each, their environment, and how
one is started (an argv list, never a shell; each node leads its own session)."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
from datetime import datetime
from pathlib import Path

from dispatch.backends.capture.app_error import ERROR_FILE_VAR, capture
from dispatch.backends.capture.progress import read_progress
from dispatch.backends.local.log_checkpoints import LogCheckpoints
from dispatch.backends.local.output import NodeOutput
from dispatch.backends.local.procs import (
    PAGE_SIZE,
    ProcStat,
    descendants,
    read_proc_stat,
    scan_procs,
)
from dispatch.backends.local.wire import (
    MARK_VAR,
    NodeStatus,
    ObjectMeta,
    node_name,
)
from dispatch.core.app_error import AppError
from dispatch.core.progress import PROGRESS_FILE_VAR, Progress, latest

log = logging.getLogger("dispatch.local")


class Node:
    """One node of the object as the runner sees it."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.name = node_name(index)
        self.pid: int | None = None
        self.start_ticks: int | None = None
        self.exit_code: int | None = None
        self.ended_at: datetime | None = None
        self.lost_at: datetime | None = None
        self.output: NodeOutput | None = None

    @property
    def running(self) -> bool:
        return self.pid is not None and self.exit_code is None

    def status(self) -> NodeStatus:
        return NodeStatus(index=self.index, name=self.name, pid=self.pid,
                          start_ticks=self.start_ticks, exit_code=self.exit_code,
                          ended_at=self.ended_at, lost_at=self.lost_at)

    def tree(self, procs: dict[int, ProcStat]) -> set[int]:
        """The node's processes: its leader, everything under it, and everything of its
        session (children re-parented to the runner keep the session of their node)."""
        if self.pid is None:
            return set()
        tree: set[int] = set()
        leader = procs.get(self.pid)
        if leader is not None and leader.start_ticks == self.start_ticks:
            # Only the node's own leader, not a process that reused its pid.
            tree.add(self.pid)
            tree |= descendants(procs, [self.pid])
        tree |= {st.pid for st in procs.values() if st.sid == self.pid and st.pid != os.getpid()}
        return tree

    def start(self, meta: ObjectMeta, env: dict[str, str], objdir: Path) -> None:
        """Start the node's process (raises OSError or ValueError when it cannot start); its
        output goes through a pipe the runner copies into ``node<i>.log`` (output.py)."""
        node_env = {**env, **per_node_variables(self.index),
                    ERROR_FILE_VAR: str(error_file(objdir, self.index)),
                    PROGRESS_FILE_VAR: str(progress_file(objdir, self.index))}
        checkpoints = (LogCheckpoints(meta.checkpoint_pattern,
                                      log_checkpoint_file(objdir, self.index))
                       if meta.checkpoint_pattern else None)
        output = NodeOutput(objdir / f"{self.name}.log", meta.max_output_bytes, checkpoints)
        try:
            proc = subprocess.Popen(  # noqa: S603 - an argv list, never a shell
                list(meta.argv), cwd=meta.workdir, env=node_env,
                stdin=subprocess.DEVNULL, stdout=output.write_fd, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True)
        except BaseException:
            output.close()
            raise
        output.started()
        self.output = output
        # The runner reaps with waitpid(-1); Popen must never wait for it again.
        proc.returncode = 0
        self.pid = proc.pid
        st = read_proc_stat(proc.pid)
        self.start_ticks = st.start_ticks if st else None


def over_memory(nodes: list[Node], limit: int) -> tuple[Node, int, set[int]] | None:
    """The first node whose processes' resident memory passes ``limit`` bytes, with that
    sum and those processes; None when none does (one pass over /proc)."""
    procs = scan_procs()
    for node in nodes:
        # A node whose leader exited may have left processes behind: they still count.
        if node.lost_at is not None or node.pid is None:
            continue
        tree = node.tree(procs)
        rss = sum(procs[p].rss_pages for p in tree if p in procs) * PAGE_SIZE
        if rss > limit:
            return node, rss, tree
    return None


def error_file(objdir: Path, index: int) -> Path:
    """Where torchelastic writes the node's error (TORCHELASTIC_ERROR_FILE): a file of
    dispatch's own in the object's directory, one per submission and node."""
    return objdir / f"{node_name(index)}.error.json"


def progress_file(objdir: Path, index: int) -> Path:
    """Where the node's training appends its progress (DISPATCH_PROGRESS_FILE, G3): a file
    of dispatch's own in the object's directory, one per submission and node."""
    return objdir / f"{node_name(index)}.progress.jsonl"


def log_checkpoint_file(objdir: Path, index: int) -> Path:
    """Where the runner writes, as progress lines, the node's output lines that match the
    spec's checkpoint pattern (log_checkpoints.py)."""
    return objdir / f"{node_name(index)}.logcheckpoints.jsonl"


def progress_files(objdir: Path, count: int) -> list[Path]:
    """Every file a node's progress is read from (G3), for ``count`` nodes."""
    return [path(objdir, i) for i in range(count) for path in (progress_file,
                                                               log_checkpoint_file)]


def nodes_progress(objdir: Path, count: int, started_at: datetime | None,
                   now: datetime) -> Progress | None:
    """The execution's latest checkpoint over its ``count`` nodes' progress files (G3); None
    when none holds one. A file that is ignored is logged once, with dispatch's note."""
    found = latest([read_progress(p, started=started_at, now=now)
                    for p in progress_files(objdir, count)])
    if found.note and found.note not in _SAID:
        if len(_SAID) > 1000:
            _SAID.clear()
        _SAID.add(found.note)
        log.warning("%s", found.note)
    return found if found.checkpoint is not None or found.note else None


_SAID: set[str] = set()  # notes already logged (bounded)


def node_error(objdir: Path, node: Node | None, started_at: datetime | None,
               now: datetime) -> AppError | None:
    """The failed node's own words: its torchelastic error file, else the end of its log
    (capture/app_error.py); its rank is its index, as RANK says. None without a failed node, or
    when they cannot be read (a courtesy: the end is written regardless)."""
    if node is None:
        return None
    code = node.exit_code
    try:
        return capture(node=node.name, error_file=error_file(objdir, node.index),
                       output=objdir / f"{node.name}.log", started_at=started_at,
                       rank=node.index,
                       exit_code=code if code is not None and code > 0 else None,
                       signum=-code if code is not None and code < 0 else None,
                       at=node.ended_at or now)
    except (OSError, ValueError):
        return None


def per_node_variables(index: int) -> dict[str, str]:
    """What differs from node to node (it wins over everything else)."""
    return {"RANK": str(index), "NODE_RANK": str(index), "GROUP_RANK": str(index),
            "DISPATCH_NODE": node_name(index)}


def dispatch_variables(meta: ObjectMeta, master_port: int | None) -> dict[str, str]:
    """The variables dispatch sets on every node (torchrun-like, and the mark); they win over
    the spec's (a spec cannot give a node a wrong rank)."""
    out = {
        "WORLD_SIZE": str(meta.nodes),
        "LOCAL_RANK": "0",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(master_port) if master_port is not None else "",
        "DISPATCH_JOB_ID": meta.job_id,
        "DISPATCH_SUBMISSION": str(meta.submission),
        "DISPATCH_OBJECT": meta.ref,
    }
    if meta.mark:
        out[MARK_VAR] = meta.mark
    return out


def node_environment(meta: ObjectMeta, master_port: int) -> dict[str, str]:
    """The nodes' environment: the submitter's, the spec's, then dispatch's variables."""
    env = dict(os.environ)
    env.update(meta.env)
    env.update(dispatch_variables(meta, master_port))
    return env


def runner_environment() -> dict[str, str]:
    """The runner's: the submitter's environment as it is, for the nodes. The runner itself
    runs isolated (``python -I``, dispatch/support/isolated.py): no PYTHON* variable of it reaches
    the runner's own imports."""
    return dict(os.environ)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def describe_exit(code: int) -> str:
    if code < 0:
        return f"killed by signal {-code} ({signal_name(-code)})"
    return f"exit {code}"


def mib(n: int) -> str:
    return f"{n / 1024 / 1024:.1f} MiB"
