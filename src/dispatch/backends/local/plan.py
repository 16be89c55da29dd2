"""What a local submit would do, decided before it is done: the spec checks the local backend
adds (called before anything is recorded) and the dry run. Pure except for looking at the
workdir, which must be a directory on this machine."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import msgspec

from dispatch.backends.base import DryRun, Submission
from dispatch.backends.local.nodes import dispatch_variables, per_node_variables
from dispatch.backends.local.wire import MARK_VAR, ObjectMeta, utcnow
from dispatch.core.spec import JobSpec, path_problem


def spec_problems(spec: JobSpec, pid_max: int | None = None) -> list[tuple[str, str]]:
    """Every reason the local backend cannot run ``spec``, as (key, message), in key order.
    ``pid_max``: this machine's /proc/sys/kernel/pid_max (None: not known), read by the
    caller: every node is a process at once, beside the runner."""
    out: list[tuple[str, str]] = []
    if pid_max is not None and spec.nodes + 1 >= pid_max:
        out.append(("nodes", f"{spec.nodes} processes at once are more than this machine "
                             f"can start (kernel.pid_max is {pid_max}: at most "
                             f"{max(pid_max - 2, 0)} nodes beside the runner)"))
    for key in sorted(spec.local):
        out.append((f"local.{key}", "unknown key: the local backend takes no options"))
    if not spec.command:
        out.append(("command", "empty: there is nothing to run"))
    for i, arg in enumerate(spec.command):
        if "\0" in arg:
            out.append((f"command[{i}]", "contains a NUL byte"))
    for key, value in sorted(spec.env.items()):
        if not key or "=" in key or "\0" in key:
            out.append((f"env.{key!r}", "a variable name must be non-empty, without '=' or NUL"))
        if "\0" in value:
            out.append((f"env.{key}", "the value contains a NUL byte"))
    if spec.workdir is not None:
        if "\0" in spec.workdir:
            out.append(("workdir", "contains a NUL byte"))
        elif why := path_problem(spec.workdir):
            out.append(("workdir", why))
        else:
            out += _workdir_problems(spec.workdir)
    return out


def _workdir_problems(workdir: str) -> list[tuple[str, str]]:
    # os.stat, not Path.is_dir: from Python 3.14 is_dir swallows every OSError, and the
    # system's own reason (ENAMETOOLONG through a link, EACCES, ...) is what the user needs.
    try:
        st = os.stat(workdir)
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as err:
        return [("workdir", f"{workdir!r} cannot be used on this machine: "
                            f"{err.strerror or err}")]
    if st is not None and stat.S_ISDIR(st.st_mode):
        return []
    return [("workdir", f"{workdir!r} is not a directory on this machine")]


class LocalDryRun(msgspec.Struct, frozen=True, kw_only=True):
    """What submit would start: one runner, and through it ``nodes`` processes of ``argv``."""

    root: str
    runner_argv: tuple[str, ...]
    argv: tuple[str, ...]
    nodes: int
    workdir: str
    # The spec's env then dispatch's variables, as every node gets them on top of the
    # submitter's environment; node_env holds what differs per node.
    env: dict[str, str]
    node_env: tuple[dict[str, str], ...]
    time_limit: float | None
    memory: int | None
    gated: bool
    kill_grace: float
    max_output_bytes: int | None = None
    # The backend that would run it: local, or one that reuses LocalBackend under its own name.
    backend: str = "local"

    def as_dry_run(self) -> DryRun:
        return DryRun(backend=self.backend, argv=self.runner_argv,
                      documents=((f"the {self.backend} runner's plan", self.text()),))

    def text(self) -> str:
        lines = [f"{self.backend} root: {self.root}",
                 f"runner: {' '.join(self.runner_argv)}",
                 f"nodes: {self.nodes} x {list(self.argv)} in {self.workdir}",
                 f"time limit: {f'{self.time_limit:g}s' if self.time_limit else 'none'}",
                 f"memory per node: {f'{self.memory} bytes' if self.memory else 'no limit'}",
                 "output per node: " + (f"{self.max_output_bytes} bytes, the rest dropped"
                                        if self.max_output_bytes else "no limit"),
                 f"gated: {'yes (starts when the gate opens)' if self.gated else 'no'}",
                 f"kill grace: {self.kill_grace:g}s"]
        lines += [f"env {k}={v}" for k, v in sorted(self.env.items())]
        for per_node in self.node_env:
            lines.append(" ".join(f"{k}={v}" for k, v in sorted(per_node.items())))
        return "\n".join(lines)


def dry_run(submission: Submission, *, root: Path, kill_grace: float,
            runner_argv: tuple[str, ...], backend: str = "local") -> LocalDryRun:
    spec = submission.spec
    workdir = str(Path(spec.workdir).resolve()) if spec.workdir else os.getcwd()
    meta = ObjectMeta(ref="<ref>", token=submission.token, job_id=submission.job_id,
                      submission=submission.number, name=spec.name, nodes=spec.nodes,
                      argv=tuple(spec.command), workdir=workdir, created_at=utcnow(),
                      mark="<ref>:<nonce>")
    env = dict(spec.env)
    variables = dispatch_variables(meta, None)
    variables["MASTER_PORT"] = "<a free port, chosen when the nodes start>"
    variables[MARK_VAR] = "<ref>:<nonce>"
    env.update(variables)
    node_env = tuple(per_node_variables(i) for i in range(spec.nodes))
    for per_node in node_env[:1]:
        for key in per_node:
            env.pop(key, None)  # each node's own value wins over the spec's
    return LocalDryRun(
        root=str(root), runner_argv=runner_argv,
        argv=tuple(spec.command), nodes=spec.nodes, workdir=workdir, env=env,
        node_env=node_env,
        time_limit=float(spec.time_limit) if spec.time_limit is not None else None,
        memory=spec.memory, gated=submission.gated, kill_grace=kill_grace,
        max_output_bytes=spec.max_output_bytes, backend=backend)
