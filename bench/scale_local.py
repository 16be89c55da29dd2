"""bench_scale.py's local-backend part (issue 49): a supervisor's tick on the real local
backend at many live jobs, with the backend reporting changes (its change journal and its
runners' pidfds, backends/local/looks.py) against the path of before (a full look at every
tick: every object's status and runner read, every job's objects compared), in one process.

    python bench/bench_scale.py --local --no-postgres --live 10000 --live 100000

Thousands of runner processes cannot run on one machine, so each object's files are written
here as its runner writes them (meta.json, runner.json, status.json, then a line in the
journal), and every object's runner is one live ``sleep`` process (each object still gets a
pidfd of its own). A few objects get a runner of their own, SIGKILLed to measure a tick in
which runners died (nothing written). Everything else is dispatch's code: the supervisor,
the store, the local backend's looks, its _look of each object it reads.

The process's open-file soft limit is raised to --nofile, or to the hard limit if that is
lower: each runner's pidfd is a descriptor. Runners past the limit are unwatched (their pids
compared with /proc's listing at each look, SWEEP of them checked whole: deaths.py).
"""

from __future__ import annotations

import os
import resource
import signal
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import msgspec

from dispatch.backends.base import Submission
from dispatch.backends.local import LocalBackend
from dispatch.backends.local.journal import note_change
from dispatch.backends.local.looks import FULL_LOOK_EVERY
from dispatch.backends.local.procs import boot_id, read_proc_stat
from dispatch.backends.local.wire import ObjectMeta, ObjectStatus, RunnerInfo
from dispatch.core.model import Cause, CauseKind, Execution, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def runner_of(proc: subprocess.Popen[bytes]) -> RunnerInfo:
    st = read_proc_stat(proc.pid)
    assert st is not None
    return RunnerInfo(pid=proc.pid, start_ticks=st.start_ticks, boot_id=boot_id())


class BenchLocal(LocalBackend):
    """The local backend, whose submit writes the object's files as a runner would (no
    runner process per object: ``runner`` stands for all of them)."""

    def __init__(self, root: Path, runner: RunnerInfo) -> None:
        super().__init__(root)
        self.runner = runner
        self.own: dict[str, subprocess.Popen[bytes]] = {}  # objects with a runner of their own
        self.root_id = self.disk.claim().id
        self.n = 0

    def declarations(self) -> Declarations:
        return Declarations(backend="local")

    def validate(self, spec: JobSpec, source: str = "<spec>") -> None:
        return None

    def submit(self, submission: Submission) -> str:
        self.n += 1
        ref = f"l-{self.root_id[:8]}-{self.n:08x}"
        objdir = self.objects_dir / ref
        (objdir / "control").mkdir(parents=True)
        meta = ObjectMeta(ref=ref, token=submission.token, job_id=submission.job_id,
                          submission=submission.number, name="n", nodes=1, argv=("x",),
                          workdir="/", created_at=T0, root_id=self.root_id)
        (objdir / "meta.json").write_bytes(msgspec.json.encode(meta))
        runner = self.runner
        if self.n % 1000 == 0:  # a few runners of their own, to be SIGKILLed
            proc = subprocess.Popen(["sleep", "3600"])  # noqa: S603,S607
            self.own[ref] = proc
            runner = runner_of(proc)
        (objdir / "runner.json").write_bytes(msgspec.json.encode(runner))
        self.write(ref, submission.token, State.RUNNING)
        note_change(self.root, ref)
        return ref

    def write(self, ref: str, token: str, state: State) -> None:
        now = datetime.now(UTC)
        cause = Cause(kind=CauseKind.NONE, at=now if state.terminal else None)
        status = ObjectStatus(ref=ref, token=token, state=state, cause=cause, executions=(
            Execution(index=0, started_at=T0, ended_at=now if state.terminal else None,
                      cause=cause if state.terminal else None),),
            updated_at=now, heartbeat_at=now)
        tmp = self.objects_dir / ref / ".status.tmp"
        tmp.write_bytes(msgspec.json.encode(status))
        os.replace(tmp, self.objects_dir / ref / "status.json")

    def end(self, ref: str) -> None:
        """The object's runner writes its final status and names it in the journal."""
        meta = self.disk.load_meta(ref)
        assert isinstance(meta, ObjectMeta)
        self.write(ref, meta.token, State.SUCCEEDED)
        note_change(self.root, ref)

    def stop(self, ref: str) -> None:
        self.end(ref)


def cpu_of(fn: Any) -> float:
    start = time.process_time()
    fn()
    return time.process_time() - start


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def measure_local(url: str, live: int, root: str, nofile: int) -> dict[str, Any]:
    from dispatch.supervise.loop import Supervisor

    if nofile:  # up to the hard limit (raising that needs CAP_SYS_RESOURCE)
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(nofile, hard), hard))
    sleeper = subprocess.Popen(["sleep", "3600"])  # noqa: S603,S607 - every object's runner
    out: dict[str, Any] = {"nofile": resource.getrlimit(resource.RLIMIT_NOFILE)[0]}
    backend = BenchLocal(Path(root), runner_of(sleeper))
    looked: list[float] = []
    real = backend.discover

    def timed(tokens: Any, refs: Any) -> Any:
        start = time.thread_time()
        try:
            return real(tokens, refs)
        finally:
            looked.append(time.thread_time() - start)

    backend.discover = timed  # type: ignore[method-assign]
    try:
        with open_store(url) as store:
            rss_before = rss()
            sup = Supervisor(store, lambda name: backend, name="bench")  # type: ignore[arg-type]
            for _ in range(3):  # submit, bind, see running: then nothing changes
                sup.tick()
            out["held_bytes_per_job"] = (rss() - rss_before) / live
            out["watched"] = backend.looks.watch.watched
            out["unwatched"] = len(backend.looks.watch.unwatched)
            refs = [r for r in sorted(backend.looks.reports) if r not in backend.own]
            changed = max(1, live // 100)
            for mode in ("before_", ""):
                # before: a full look at every tick and no changes said (every job's objects
                # compared), as every local look was before issue 49
                backend.reports_changes = mode == ""
                backend.looks.full_every = timedelta(0) if mode else None
                sup.tick()
                steady, looks = [], []
                for _ in range(5):
                    looked.clear()
                    cpu = cpu_of(sup.tick)
                    steady.append(cpu)
                    looks.append(sum(looked))
                out[f"{mode}steady_ms"] = statistics.median(steady) * 1000
                out[f"{mode}look_ms"] = statistics.median(looks) * 1000
                ending, refs = refs[:changed], refs[changed:]
                for ref in ending:
                    backend.end(ref)
                out[f"{mode}ended_ms"] = cpu_of(sup.tick) * 1000
                out[f"{mode}per_changed_us"] = (out[f"{mode}ended_ms"] / 1000 - statistics.median(
                    steady)) / changed * 1e6
            out["changed"] = changed
            # runners SIGKILLed: nothing written; their pidfds say so at the next look
            killed = list(backend.own.items())
            for _, proc in killed:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            full = backend.looks.full_looks
            out["killed"] = len(killed)
            out["killed_ms"] = cpu_of(sup.tick) * 1000
            out["killed_seen"] = sum(1 for ref, _ in killed if backend.looks.reports[ref].ended)
            out["killed_full_looks"] = backend.looks.full_looks - full
            # the safety net's full look (every FULL_LOOK_EVERY) as one tick
            backend.looks.full_every = FULL_LOOK_EVERY
            backend.looks.last_full = datetime(2000, 1, 1, tzinfo=UTC)
            out["full_look_tick_ms"] = cpu_of(sup.tick) * 1000
    finally:
        sleeper.kill()
        for proc in backend.own.values():
            proc.kill()
        backend.close()
    out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return out
