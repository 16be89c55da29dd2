"""Helpers for the supervision tests: supervisor processes, jobs, and reading the record."""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.specs import parse_spec

from dispatch.backends.local import LocalBackend
from dispatch.backends.registry import declarations_for
from dispatch.core.events import SubmissionBound, SubmissionIntended
from dispatch.core.model import token_for
from dispatch.core.record import Job, fold
from dispatch.service.requests import create_job
from dispatch.stores.fence import Lease
from dispatch.stores.select import open_store
from dispatch.supervise.leases import local_scope
from dispatch.supervise.loop import utcnow

ROOT = Path(__file__).resolve().parents[3]
CHILD = Path(__file__).with_name("sup_child.py")


def child_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "src"), str(ROOT)])
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


class Proc:
    """A child process whose stdout lines are collected by a thread (never blocks a test)."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.argv = argv
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True, env=env, cwd=ROOT)
        self.lines: list[str] = []
        self._q: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.p.stdout is not None
        for line in self.p.stdout:
            self.lines.append(line.rstrip("\n"))
            self._q.put(line.rstrip("\n"))

    @property
    def pid(self) -> int:
        return self.p.pid

    def wait_line(self, pred: Callable[[str], bool], timeout: float = 60) -> str:
        deadline = time.monotonic() + timeout
        seen = 0
        while time.monotonic() < deadline:
            for line in self.lines[seen:]:
                seen += 1
                if pred(line):
                    return line
            time.sleep(0.05)
        raise AssertionError(f"no such line from {self.argv[:3]}... in {timeout}s; "
                             f"got:\n" + "\n".join(self.lines[-40:]))

    def signal(self, sig: int) -> None:
        if self.p.poll() is None:
            os.kill(self.p.pid, sig)


class Procs:
    def __init__(self) -> None:
        self.all: list[Proc] = []

    def child(self, url: str, root: Path, log: Path, holder: str, scopes: list[str], *,
              lease: float = 1.0, poll: float = 0.1, pause_go: Path | None = None,
              no_lease: bool = False) -> Proc:
        argv = [sys.executable, str(CHILD), url, str(root), str(log), holder, str(lease),
                str(poll), *scopes]
        if no_lease:
            argv.append("--no-lease")
        if pause_go is not None:
            argv += ["--pause-before-append", str(pause_go)]
        return self.add(Proc(argv, child_env()))

    def cli(self, *args: str, env: dict[str, str]) -> Proc:
        return self.add(Proc([sys.executable, "-m", "dispatch.cli", *args], env))

    def add(self, p: Proc) -> Proc:
        self.all.append(p)
        return p

    def reap(self) -> None:
        for p in self.all:
            if p.p.poll() is None:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                    p.p.kill()
                except ProcessLookupError:
                    pass
            p.p.wait(10)


def spec(name: str, command: list[str], budget: int = 50) -> dict[str, Any]:
    return {"name": name, "backend": "local", "command": command,
            "policy": {"rules": [{"on": ["preempted", "node-lost"], "action": "resubmit",
                                  "budget": budget}]}}


def create_jobs(url: str, root: Path, specs: list[dict[str, Any]],
                scope: str | None = None) -> list[str]:
    backend = LocalBackend(root)
    with open_store(url) as store:
        return [create_job(store, parse_spec(s, f"<{s['name']}>"), backend.declarations(),
                           utcnow(), scope=scope or local_scope(root)) for s in specs]


def jobs(url: str) -> dict[str, Job]:
    with open_store(url) as store:
        ids = [r.job_id for r in store.list_jobs()]
        records = store.read_many(ids)
    now = utcnow()
    return {j: fold(records[j], now) for j in ids}


def versions(url: str) -> dict[str, int]:
    with open_store(url) as store:
        return {r.job_id: r.version for r in store.list_jobs()}


def lease_of(url: str, scope: str) -> Lease | None:
    with open_store(url) as store:
        return store.leases().get(scope)


def wait_for(pred: Callable[[], Any], timeout: float = 120, every: float = 0.1,
             what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def objects_per_token(root: Path) -> Counter[str]:
    counts: Counter[str] = Counter()
    for meta in (root / "objects").glob("*/meta.json"):
        counts[json.loads(meta.read_text())["token"]] += 1
    return counts


def log_lines(log: Path) -> list[list[str]]:
    return [line.split() for line in log.read_text().splitlines()] if log.exists() else []


# -- Slurm's tools hanging (a controller outage seen from a login node) ------------------------
# Small scripts in a directory put first on PATH (the real Slurm testbed is never touched).
# ``scontrol``, ``squeue``, ``sacct``, ``sinfo`` and ``scancel`` sleep HANG_S; ``sbatch`` fails
# at once with the words of an unreachable controller. Each writes "TOOL PID START" to a log
# before it hangs, so a test waits for the exact hang it means and kills what is left.

HANG_S = 40  # far past the lease period and any bound a test sets
HANG = 'exec sleep {hang}\n'
UNREACHABLE = ('echo "sbatch: error: Batch job submission failed: Unable to contact slurm '
               'controller (connect failure)" >&2\nexit 1\n')


def slurm_tool(path: Path, log: Path, body: str) -> None:
    path.write_text(f'#!/bin/sh\necho "$(basename "$0") $$ $(date +%s.%N)" >> "{log}"\n'
                    + body)
    path.chmod(0o755)


def hung_slurm_tools(where: Path, cluster: str | None = None) -> tuple[Path, Path]:
    """A directory of hanging Slurm tools (for PATH) and the log of their calls. With
    ``cluster``, ``scontrol show config`` answers at once with that ClusterName (unlogged: it
    does not hang), so a supervisor can tell which cluster this machine's tools reach."""
    bin_dir, log = where / "fake-slurm-bin", where / "slurm-calls.log"
    bin_dir.mkdir()
    for name in ("scontrol", "squeue", "sacct", "sinfo", "scancel"):
        slurm_tool(bin_dir / name, log, HANG.format(hang=HANG_S))
    if cluster is not None:
        scontrol = bin_dir / "scontrol"
        scontrol.write_text(f'#!/bin/sh\nif [ "$1 $2" = "show config" ]; then\n'
                            f'  echo "ClusterName = {cluster}"; exit 0\nfi\n'
                            + scontrol.read_text().removeprefix("#!/bin/sh\n"))
    slurm_tool(bin_dir / "sbatch", log, UNREACHABLE)
    return bin_dir, log


def slurm_calls(log: Path) -> list[tuple[str, int]]:
    if not log.exists():
        return []
    return [(w[0], int(w[1])) for w in (line.split() for line in log.read_text().splitlines())]


def hung_tools_alive(log: Path) -> list[tuple[str, int]]:
    """The tools of ``log`` still hanging (their ``sleep`` still runs)."""
    alive: list[tuple[str, int]] = []
    for name, pid in slurm_calls(log):
        try:
            if b"sleep" in Path(f"/proc/{pid}/cmdline").read_bytes():
                alive.append((name, pid))
        except (FileNotFoundError, ProcessLookupError):
            pass
    return alive


def kill_hung_tools(log: Path) -> None:
    """Kill the hung tools of ``log``, and only those."""
    for _name, pid in hung_tools_alive(log):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def slurm_job(url: str, scope: str = "slurm") -> str:
    """A Slurm job recorded while the controller could not say its cluster (the bare name
    as its scope, unless ``scope`` names one); nothing submitted yet."""
    job = parse_spec({"name": "on-slurm", "backend": "slurm", "command": ["true"]}, "<slurm>")
    with open_store(url) as store:
        return create_job(store, job, declarations_for("slurm"), utcnow(), scope=scope)


def bound_slurm_job(url: str, scope: str = "slurm") -> str:
    """A Slurm job whose first submission is bound to an object: a read asks squeue."""
    job = slurm_job(url, scope)
    with open_store(url) as store:
        now, version = utcnow(), store.version(job)
        store.append(job, [
            SubmissionIntended(seq=version + 1, at=now, submission=1, token=token_for(job, 1)),
            SubmissionBound(seq=version + 2, at=now, submission=1, ref="4242")],
            expected_version=version)
    return job
