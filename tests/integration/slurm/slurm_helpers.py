"""Helpers for the Slurm integration tests: the test acting on the real testbed."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from dispatch.backends.base import Submission
from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.core.model import ObjectReport, token_for
from dispatch.core.spec import JobSpec

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TESTBED = REPO / "scripts" / "slurm-testbed"
SKIP_ENV = "DISPATCH_SKIP_SLURM"
# The testbed's state dir as the tests see it (inside the 24.11 root: /srv/testbed, set by exec).
STATE_DIR = Path(os.environ.get("DISPATCH_SLURM_STATE", "/var/lib/dispatch-slurm-testbed"))


def stop_controller() -> None:
    """Stop slurmctld by its pid file (never by name: two testbeds may run on this host)."""
    pid = int((STATE_DIR / "run" / "slurmctld.pid").read_text().strip())
    subprocess.run(["kill", "-TERM", str(pid)], check=True)
    deadline = time.monotonic() + 30
    while subprocess.run(["scontrol", "ping"], capture_output=True,
                         check=False).returncode == 0 and time.monotonic() < deadline:
        time.sleep(0.2)


def start_controller() -> None:
    """Bring slurmctld back: the testbed's own idempotent ``up`` on the host (22.05); inside the
    24.11 root, where that script cannot run, slurmctld itself (it reads the root's config)."""
    if os.environ.get("DISPATCH_SLURM_VERSION", "22.05") == "22.05":
        subprocess.run([str(TESTBED), "up"], check=True, capture_output=True, timeout=120)
        return
    subprocess.run(["slurmctld"], check=True, capture_output=True, timeout=60)
    deadline = time.monotonic() + 60
    while subprocess.run(["scontrol", "ping"], capture_output=True,
                         check=False).returncode != 0:
        assert time.monotonic() < deadline, "slurmctld did not answer within 60s of its start"
        time.sleep(0.5)


def slurm_release() -> str:
    """What ``sinfo -V`` says: ``22.05.8``, ``24.11.5``; the words themselves if not that."""
    try:
        out = subprocess.run(["sinfo", "-V"], capture_output=True, text=True, timeout=15,
                             check=False).stdout.split()
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"(sinfo -V failed: {err})"
    return out[-1] if out else "(sinfo -V printed nothing)"


def testbed_problem() -> str | None:
    """None when the testbed answers with four nodes; else what is wrong."""
    try:
        ping = subprocess.run(["scontrol", "ping"], capture_output=True, text=True, timeout=15,
                              check=False)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"scontrol ping failed: {err}"
    if ping.returncode != 0 or "UP" not in ping.stdout:
        return f"slurmctld does not answer: {(ping.stdout + ping.stderr).strip()}"
    nodes = subprocess.run(["sinfo", "-h", "-N", "-p", "low", "-o", "%N"], capture_output=True,
                           text=True, timeout=15, check=False).stdout.split()
    if sorted(set(nodes)) != ["n1", "n2", "n3", "n4"]:
        return f"expected nodes n1..n4 in partition low, sinfo shows {nodes}"
    return None


def wait_nodes_idle(nodes: tuple[str, ...] = ("n1", "n2", "n3", "n4"),
                    timeout: float = 60) -> None:
    """Bring back nodes an earlier test set down, and wait until none is down."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(["sinfo", "-h", "-N", "-p", "low", "-o", "%N %T"],
                             capture_output=True, text=True, timeout=15, check=False).stdout
        bad = [ln.split()[0] for ln in out.splitlines()
               if ln.split()[0] in nodes and any(w in ln for w in ("down", "drain", "fail"))]
        if not bad:
            return
        for node in bad:
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                           capture_output=True, timeout=15, check=False)
        time.sleep(0.5)
    raise AssertionError(f"nodes {nodes} still not usable after {timeout}s")


class Cluster:
    """The backend under test plus what a test needs around it: submit by spec, poll
    discover() until a condition holds (bounded), and cancel what the test left behind."""

    def __init__(self, out_dir: Path, name: str) -> None:
        self.out_dir = out_dir
        self.name = name
        self.backend = SlurmBackend(node_loss_window=timedelta(seconds=30), output_dir=out_dir)
        self.refs: list[str] = []
        self._n = 0

    def new_backend(self) -> SlurmBackend:
        return SlurmBackend(node_loss_window=timedelta(seconds=30), output_dir=self.out_dir)

    def submit(self, command: tuple[str, ...], *, gated: bool = False,
               **spec: object) -> tuple[str, str]:
        self._n += 1
        job_id = f"{self.name}-{os.getpid()}-{time.monotonic_ns()}"
        token = token_for(job_id, self._n)
        js = JobSpec(name=self.name[:40], command=command, backend="slurm", **spec)  # type: ignore[arg-type]
        ref = self.backend.submit(Submission(job_id=job_id, number=self._n, token=token,
                                             spec=js, gated=gated))
        self.refs.append(ref)
        return ref, token

    def look(self, token: str, ref: str | None = None,
             backend: SlurmBackend | None = None) -> ObjectReport:
        b = backend or self.backend
        found = [o for o in b.discover({token}, {ref} if ref else set()).objects
                 if o.token == token or o.ref == ref]
        assert len(found) == 1, f"expected one object for {token}, got {found}"
        return found[0]

    def wait(self, token: str, ready: Callable[[ObjectReport], bool], *, ref: str | None = None,
             timeout: float = 60, what: str = "") -> ObjectReport:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            last = self.look(token, ref)
            if ready(last):
                return last
            time.sleep(0.5)
        raise AssertionError(f"{what or 'condition'} not reached in {timeout}s; last: {last}")


def wait_step_started(ref: str, timeout: float = 60) -> None:
    """Until the job's first srun step runs. A batch script shows RUNNING before its srun has
    confirmed the allocation with slurmctld; a test that stops the controller in between makes
    srun fail ("Unable to confirm allocation"), which is the test's race, not the job's."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        steps = subprocess.run(["squeue", "-h", "-s", "-j", ref, "-o", "%i"],
                               capture_output=True, text=True, timeout=30,
                               check=False).stdout.split()
        if f"{ref}.0" in steps:
            return
        time.sleep(0.2)
    raise AssertionError(f"job {ref}: its srun step never started")


def slurm(*argv: str) -> str:
    """Run a Slurm tool as a person would (the test acting on the cluster)."""
    res = subprocess.run(list(argv), capture_output=True, text=True, timeout=30, check=False)
    assert res.returncode == 0, f"{' '.join(argv)}: {res.stderr.strip()}"
    return res.stdout


# The RPCs a tick's queries make (sdiag's own, node registrations and the like are left out:
# slurmd and the daemons send those whatever dispatch does).
QUERY_RPCS = frozenset({"REQUEST_JOB_INFO", "REQUEST_JOB_USER_INFO", "REQUEST_JOB_INFO_SINGLE",
                        "REQUEST_FED_INFO", "REQUEST_PARTITION_INFO", "REQUEST_NODE_INFO",
                        "REQUEST_NODE_INFO_SINGLE"})


def query_rpcs() -> dict[str, int]:
    """slurmctld's query RPCs by type since the last ``sdiag -r`` (needs root, as CI runs)."""
    import re

    out = slurm("sdiag")
    section = out.split("Remote Procedure Call statistics by message type", 1)[1]
    section = section.split("Remote Procedure Call statistics by user", 1)[0]
    return {m.group(1): int(m.group(2))
            for m in re.finditer(r"^\s+(\S+)\s+\(\s*\d+\) count:(\d+)", section, re.M)
            if m.group(1) in QUERY_RPCS}


def hostnames(nodelist: str) -> list[str]:
    """The node names of a Slurm node list (``n[1-2]``), as scontrol expands them."""
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                          text=True, timeout=30, check=True).stdout.split()


def job_nodes(ref: str) -> list[str]:
    """The nodes a job runs on now (none while it is pending or once it is gone)."""
    nodelist = subprocess.run(["squeue", "-h", "-j", ref, "-o", "%N"], capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()
    return hostnames(nodelist) if nodelist else []
