"""Shared pieces of the Slurm benchmarks (bench_slurm_load, bench_classification,
bench_reaction): RPC counters read from the daemons, dispatch jobs on the testbed, the two
peers (TorchX, submitit) driven the way their users drive them, and cleanup.

Benchmarks, not tests: nothing here asserts a time. Every job a benchmark submits is named
``bench-...`` and is cancelled at the end (``cleanup``), also after an error.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT / "src") not in sys.path:
    sys.path.insert(0, str(ROOT / "src"))

from dispatch.backends.registry import traits  # noqa: E402
from dispatch.backends.slurm.backend import SlurmBackend  # noqa: E402
from dispatch.core.model import Discovery  # noqa: E402
from dispatch.core.record import fold  # noqa: E402
from dispatch.core.spec import parse_spec  # noqa: E402
from dispatch.core.status import project  # noqa: E402
from dispatch.service.requests import create_job  # noqa: E402
from dispatch.stores.select import open_store  # noqa: E402
from dispatch.supervise.loop import Supervisor  # noqa: E402

PREFIX = "bench-"
_LINE = re.compile(r"^\s+([A-Z][A-Z0-9_]+)\s+\(\s*\d+\)\s+count:(\d+)\s+ave_time:\d+\s+"
                   r"total_time:(\d+)")


def sh(*argv: str, check: bool = True, timeout: float = 60) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout,
                          check=False)
    if check and proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}: "
                           f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


# ---------------------------------------------------------------- RPC counters

@dataclass
class RpcCounts:
    """Per message type: calls and server time (microseconds) as the daemon counted them."""

    count: Counter[str] = field(default_factory=Counter)
    usec: Counter[str] = field(default_factory=Counter)

    def __sub__(self, other: RpcCounts) -> RpcCounts:
        return RpcCounts(Counter({k: v for k, v in (self.count - other.count).items()}),
                         Counter({k: v for k, v in (self.usec - other.usec).items()}))

    def __add__(self, other: RpcCounts) -> RpcCounts:
        return RpcCounts(self.count + other.count, self.usec + other.usec)


def _parse_by_type(text: str) -> RpcCounts:
    out = RpcCounts()
    inside = False
    for line in text.splitlines():
        if line.startswith("Remote Procedure Call statistics by message type"):
            inside = True
            continue
        if line.startswith("Remote Procedure Call statistics by user"):
            break
        m = _LINE.match(line) if inside else None
        if m:
            out.count[m.group(1)] += int(m.group(2))
            out.usec[m.group(1)] += int(m.group(3))
    return out


def ctld_counts() -> RpcCounts:
    """slurmctld RPCs by message type (sdiag; sdiag's own REQUEST_STATS_INFO is not listed)."""
    return _parse_by_type(sh("sdiag"))


def dbd_counts() -> RpcCounts:
    """slurmdbd RPCs by message type (sacctmgr show stats)."""
    return _parse_by_type(sh("sacctmgr", "show", "stats"))


def reset_counters() -> None:
    sh("sdiag", "-r")
    sh("sacctmgr", "-i", "clear", "stats")


def is_ctld_query(kind: str) -> bool:
    """Client reads of slurmctld state: REQUEST_*INFO* (job, node, partition, ...), not an
    srun's allocation lookups (REQUEST_*ALLOC*_INFO) nor sdiag's own REQUEST_STATS_INFO."""
    return kind.startswith("REQUEST_") and "INFO" in kind and "ALLOC" not in kind \
        and kind != "REQUEST_STATS_INFO"


def ctld_queries(c: RpcCounts) -> int:
    return sum(v for k, v in c.count.items() if is_ctld_query(k))


def ctld_all(c: RpcCounts) -> int:
    """Every slurmctld RPC but the measurement's own (sdiag: REQUEST_STATS_INFO)."""
    return sum(v for k, v in c.count.items() if k != "REQUEST_STATS_INFO")


# One `sacctmgr show stats` opens its own connection (SLURM_PERSIST_INIT, DBD_GET_STATS?,
# DBD_FINI): those are the measurement, not the tool. Queries are DBD_GET_* but stats.
DBD_MEASUREMENT = {"DBD_GET_STATS", "DBD_CLEAR_STATS"}


def dbd_queries(c: RpcCounts) -> int:
    return sum(v for k, v in c.count.items()
               if k.startswith("DBD_GET_") and k not in DBD_MEASUREMENT)


def dbd_connections(c: RpcCounts) -> int:
    return c.count.get("SLURM_PERSIST_INIT", 0)


# ---------------------------------------------------------------- jobs and cleanup

def my_jobs(prefix: str = PREFIX) -> list[str]:
    ids = []
    for line in sh("squeue", "-h", "-o", "%i|%j").splitlines():
        jid, _, name = line.partition("|")
        if name.startswith(prefix):
            ids.append(jid.strip())
    return ids


def cleanup(prefix: str = PREFIX) -> int:
    """scancel every job whose name starts with the prefix (only ours: bench-...)."""
    ids = my_jobs(prefix)
    for i in range(0, len(ids), 200):
        sh("scancel", *ids[i:i + 200], check=False)
    return len(ids)


def wait_gone(prefix: str = PREFIX, timeout: float = 120) -> None:
    """Until no job of ours is pending or running any more."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [ln for ln in sh("squeue", "-h", "-o", "%j|%T").splitlines()
                 if ln.startswith(prefix) and ln.split("|")[1] not in
                 ("COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL",
                  "OUT_OF_MEMORY")]
        if not alive:
            return
        time.sleep(1)


def slurm_version() -> str:
    return sh("sinfo", "--version").strip()


def sacct_rows(ref: str, steps: bool = False) -> list[dict[str, str]]:
    """Every execution of a job (sacct -D): the job rows, and its step rows if asked."""
    fields = "JobID,State,ExitCode,Submit,Start,End"
    text = sh("sacct", "-P", "-D", "-n", "-j", ref, "-o", fields, check=False)
    rows = []
    for line in text.splitlines():
        parts = line.split("|")
        if len(parts) == 6 and (steps or "." not in parts[0]):
            rows.append(dict(zip(fields.split(","), parts, strict=True)))
    return rows


def parse_slurm_time(text: str) -> datetime | None:
    if not text or text in ("Unknown", "None"):
        return None
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S").astimezone(UTC)


# ---------------------------------------------------------------- dispatch

class RecordingBackend:
    """The real SlurmBackend; keeps the last Discovery so the bench can project statuses
    from what the supervisor's own tick saw (no extra scheduler call)."""

    def __init__(self, backend: SlurmBackend) -> None:
        self.inner = backend
        self.last: Discovery | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        self.last = self.inner.discover(tokens, refs)
        return self.last


@dataclass
class DispatchRig:
    store: Any
    backend: RecordingBackend
    supervisor: Supervisor
    out_dir: Path

    def add_job(self, name: str, command: Sequence[str], **spec: Any) -> str:
        data: dict[str, Any] = {"name": name, "backend": "slurm", "command": list(command)}
        data.update(spec)
        slurm = dict(data.get("slurm", {}))
        slurm.setdefault("output_dir", str(self.out_dir))
        data["slurm"] = slurm
        return create_job(self.store, parse_spec(data, f"<{name}>", backends=traits()),
                          self.backend.inner.declarations(), datetime.now(UTC), actor="bench")

    def refs(self, job_id: str) -> list[str]:
        job = fold(self.store.read(job_id), datetime.now(UTC))
        return [s.ref for s in job.submissions if s.ref is not None]

    def status(self, job_id: str) -> Any:
        now = datetime.now(UTC)
        return project(fold(self.store.read(job_id), now), self.backend.last, now)


def dispatch_rig(work: Path, *, node_loss_window: float = 60.0) -> DispatchRig:
    from datetime import timedelta

    work.mkdir(parents=True, exist_ok=True)
    out = work / "out"
    out.mkdir(exist_ok=True)
    out.chmod(0o777)
    store = open_store(f"sqlite:///{work / 'record.sqlite'}")
    backend = RecordingBackend(SlurmBackend(node_loss_window=timedelta(seconds=node_loss_window),
                                            output_dir=out))
    sup = Supervisor(store, lambda _name: backend, name="bench")  # type: ignore[arg-type,return-value]
    return DispatchRig(store, backend, sup, out)


# ---------------------------------------------------------------- peers

class CallCounter:
    """Counts the subprocesses a peer starts (subprocess.run; check_output goes through it)."""

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._orig: Callable[..., Any] | None = None

    def __enter__(self) -> CallCounter:
        self._orig = subprocess.run

        def counting(*args: Any, **kwargs: Any) -> Any:
            argv = args[0] if args else kwargs.get("args")
            if isinstance(argv, (list, tuple)) and argv:
                self.calls[Path(str(argv[0])).name] += 1
            assert self._orig is not None
            return self._orig(*args, **kwargs)

        subprocess.run = counting  # type: ignore[assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        subprocess.run = self._orig  # type: ignore[assignment]


def peer_versions() -> dict[str, str]:
    out = {}
    for name in ("torchx", "submitit"):
        try:
            mod = __import__(name)
            out[name] = getattr(mod, "__version__", "?")
        except ImportError as err:
            out[name] = f"not importable: {err}"
    return out


class TorchXStatus:
    """TorchX's Slurm scheduler, asked for the status of each app (describe(app_id)), the
    way `torchx status` and a torchx-based supervisor do it."""

    name = "TorchX"

    def __init__(self) -> None:
        from torchx.schedulers.slurm_scheduler import create_scheduler

        self.sched = create_scheduler("bench")

    def refresh(self, refs: Sequence[str]) -> dict[str, str]:
        out = {}
        for ref in refs:
            try:
                resp = self.sched.describe(ref)
            except Exception as err:  # noqa: BLE001 - what the user would see
                out[ref] = f"error: {type(err).__name__}: {err}"
                continue
            out[ref] = "None (app not found)" if resp is None else \
                f"{resp.state.name} msg={resp.msg!r}"
        return out


class SubmititStatus:
    """submitit's SlurmJob states, refreshed through its shared watcher (one forced update per
    refresh, then every job's state read from the watcher's cache)."""

    name = "submitit"

    def __init__(self, folder: Path) -> None:
        from submitit.slurm.slurm import SlurmJob

        self._cls = SlurmJob
        self.folder = folder
        self.jobs: dict[str, Any] = {}

    def refresh(self, refs: Sequence[str]) -> dict[str, str]:
        for ref in refs:
            if ref not in self.jobs:
                self.jobs[ref] = self._cls(self.folder, ref)
        self._cls.watcher.update()
        return {ref: self._cls.watcher.get_state(ref, mode="cache") for ref in refs}
