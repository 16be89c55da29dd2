"""Issue 17: the real NVRx consumer (nvidia-resiliency-ext 0.7.0, its ``ft_launcher``) reads
dispatch's segment-health decisions on the Slurm testbed, and an exclusion is not blamed on
the application.

The NVRx venv is built by ``scripts/nvrx-venv`` (``scripts/test`` runs it and exports
``DISPATCH_NVRX_VENV``); without it these tests FAIL. Every job goes through ``dispatch run``
with ``segment_health: {launcher: ft_launcher}``; the testbed's nodes share one host, so the
job sets ``NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE=1`` (ft_launcher's own simulation switch) and
``rdzv_host: 127.0.0.1``. The training program is tests/fixtures/slurm/segment_train.py (CPU,
gloo). Every wait is bounded and generous (other helpers' jobs may hold the nodes); nothing
asserts a duration. Drained nodes are resumed and jobs cancelled, whatever happens.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.e2e.conftest import Dispatch
from tests.integration.slurm.test_segment_e2e import (
    TRAIN,
    free_port_pair,
    hostnames,
    tasks_of,
    wait_until,
)

from dispatch.service.requests import whoami

pytestmark = pytest.mark.slurm

VENV_ENV = "DISPATCH_NVRX_VENV"
DEFAULT_VENV = Path("/var/cache/dispatch-nvrx/venv")
INSTALLED = "Segment health check installed"
FAILED_CHECK = "Segment health check failed"
ENDED = ("FAILED", "COMPLETED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY")


@pytest.fixture(scope="session")
def ft_launcher() -> str:
    venv = Path(os.environ.get(VENV_ENV) or DEFAULT_VENV)
    exe = venv / "bin" / "ft_launcher"
    if not os.access(exe, os.X_OK):
        pytest.fail(f"no ft_launcher at {exe}: build the NVRx venv with scripts/nvrx-venv "
                    f"(scripts/test does, and exports {VENV_ENV})", pytrace=False)
    return str(exe)


class Run:
    """One `dispatch run` of an ft_launcher job, and what the test left to clean up."""

    def __init__(self, cli: Dispatch, tmp: Path, ft: str, name: str, **over: Any) -> None:
        self.cli, self.tmp, self.name = cli, tmp, name
        self.segdir, self.control = tmp / "segment-health", tmp / "control"
        self.segdir.mkdir(exist_ok=True)
        self.control.mkdir(exist_ok=True)
        slurm: dict[str, Any] = {"rdzv_host": "127.0.0.1"}
        slurm.update(over.pop("slurm", {}))
        slurm.setdefault("rdzv_port", free_port_pair())
        spec: dict[str, Any] = {
            "name": name, "backend": "slurm", "nodes": 2,
            "command": [ft, "--max-restarts=1", "--monitor-interval=0.5", str(TRAIN),
                        str(self.control)],
            "segment_health": {"dir": str(self.segdir), "launcher": "ft_launcher"},
            "slurm": slurm,
            "env": {"NVRX_ENABLE_MULTI_LAUNCHERS_PER_NODE": "1", "OMP_NUM_THREADS": "1",
                    "TRAIN_MAX_SECONDS": "900"},
        }
        spec.update(over)
        self.spec_path = tmp / f"{name}.yaml"
        self.spec_path.write_text(yaml.safe_dump(spec))
        self.proc = cli.spawn("run", str(self.spec_path), "--json", "--poll", "1")
        self.objects: list[str] = []
        self.drained: list[str] = []

    def first_object(self) -> str:
        status = self.cli.wait_for(self.name, lambda s: bool(s.get("objects")), timeout=300)
        self.objects = list(status["objects"])
        return self.objects[0]

    def log(self, ids: str) -> Path | None:
        """The job's output file (``ids``: the job id, or ``<array>_<task>``)."""
        out_dir = self.tmp / "state" / "dispatch" / "slurm"
        return next(out_dir.glob(f"*.{ids}.out"), None)

    def text(self, ids: str) -> str:
        path = self.log(ids)
        return path.read_text() if path is not None and path.exists() else ""

    def finish(self, timeout: float = 900) -> dict[str, Any]:
        out, err = self.proc.communicate(timeout=timeout)
        try:
            result: dict[str, Any] = json.loads(out)
        except json.JSONDecodeError as e:
            raise AssertionError(f"dispatch run printed no JSON:\n{out}\n{err}") from e
        return result

    def cleanup(self) -> None:
        for node in self.drained:
            subprocess.run(["scontrol", "update", f"nodename={node}", "state=resume"],
                           capture_output=True, timeout=30, check=False)
        status = self.cli("status", self.name, "--json")
        refs = set(self.objects)
        if status.returncode == 0:
            refs |= set(json.loads(status.stdout).get("objects", []))
        if refs:
            subprocess.run(["scancel", *sorted(refs)], capture_output=True, timeout=30,
                           check=False)
        (self.control / "finish").touch()


def job_state(ref: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", ref, "-o", "%T"], capture_output=True,
                         text=True, timeout=30, check=False).stdout.split()
    if out:
        return out[0]
    acct = subprocess.run(["sacct", "-P", "-n", "-X", "-j", ref, "-o", "State"],
                          capture_output=True, text=True, timeout=30, check=False).stdout
    return (acct.split() or [""])[0]


def assert_exclusion_cause(cause: dict[str, Any], *, provenance: str,
                           actor: str | None = None) -> None:
    """The end after an exclusion is the decision's: node-lost, never the application's."""
    assert cause["kind"] == "node-lost", cause
    # (a recorded event omits the default provenance, scheduler; status JSON lists it)
    assert cause.get("provenance", "scheduler") == provenance, cause
    if actor is not None:
        assert cause.get("actor") == actor, cause
    assert "FAILED" in cause["detail"], cause  # the scheduler's own words, verbatim
    assert "segment-health decision" in cause.get("note", ""), cause


def test_clean_two_node_run(cli: Dispatch, tmp_path: Path, ft_launcher: str) -> None:
    run = Run(cli, tmp_path, ft_launcher, "nvrx-clean")
    try:
        dry = cli("submit", "--dry-run", str(run.spec_path), check=True).stdout
        assert "--ft-segment-health-check-dir" in dry and "--kill-on-bad-exit=1" in dry
        ref = run.first_object()
        wait_until("both ranks training", lambda: run.text(ref).count(": started") == 2,
                   timeout=900)
        (run.control / "finish").touch()
        st = run.finish()
        log = run.text(ref)
        assert st["state"] == "succeeded", (st, log[-4000:])
        assert run.proc.returncode == 0
        assert log.count("TRAINED") == 2, log[-4000:]
        assert f"{INSTALLED} directory={run.segdir} job_id={ref} task_id={ref}" in log
        assert FAILED_CHECK not in log
        assert not list(run.segdir.glob("segment_health_check.*"))
    finally:
        run.cleanup()


def test_unit_marked_before_start_is_excluded(cli: Dispatch, tmp_path: Path,
                                              ft_launcher: str) -> None:
    # --begin keeps the job pending long enough to mark it before it starts.
    run = Run(cli, tmp_path, ft_launcher, "nvrx-marked",
              slurm={"extra": ["--begin=now+40"]})
    try:
        ref = run.first_object()
        assert job_state(ref) == "PENDING", "the job started before it could be marked"
        mark = cli("segment", "mark", "nvrx-marked", "--reason", "e2e: bad NIC", check=True)
        assert f"segment_health_check.{ref}.{ref}" in mark.stdout
        assert job_state(ref) == "PENDING", "the job started while it was being marked"
        st = run.finish()
        log = run.text(ref)
        assert f"{INSTALLED} directory={run.segdir} job_id={ref} task_id={ref}" in log, log
        assert FAILED_CHECK in log and "excluded by scheduler state" in log, log[-4000:]
        assert ": started" not in log and "TRAINED" not in log, log[-4000:]  # no step ran
        # The end is the operator's decision, not the application's exit.
        assert st["state"] == "failed" and run.proc.returncode == 1, st
        assert_exclusion_cause(st["cause"], provenance="actor", actor=whoami())
        assert "e2e: bad NIC" in st["cause"]["note"]
        history = cli("history", "nvrx-marked", check=True).stdout
        assert "ended: non-zero-exit" not in history, history  # (the note may quote it)
        ended = [ln for ln in history.splitlines() if "execution 0 ended" in ln]
        assert len(ended) == 1 and "node-lost (actor" in ended[0], history
    finally:
        run.cleanup()


def test_array_task_excluded_other_trains_and_resubmission_avoids_node(
        cli: Dispatch, tmp_path: Path, ft_launcher: str) -> None:
    policy = {"rules": [{"on": ["node-lost"], "action": "resubmit", "budget": 1}]}
    run = Run(cli, tmp_path, ft_launcher, "nvrx-array", policy=policy,
              slurm={"array": "0-1", "exclusive": True})
    try:
        array = run.first_object()

        def both_running() -> dict[str, tuple[str, str]] | None:
            t = tasks_of(array)
            return t if {k: v[0] for k, v in t.items()} == {"0": "RUNNING", "1": "RUNNING"} \
                else None

        tasks = wait_until("both array tasks running", both_running, timeout=900)
        task1_nodes = hostnames(tasks["1"][1])
        wait_until("both tasks training", lambda: all(
            run.text(f"{array}_{t}").count(": started") == 2 for t in ("0", "1")), timeout=600)

        drained = task1_nodes[-1]
        run.drained.append(drained)
        subprocess.run(["scontrol", "update", f"nodename={drained}", "state=drain",
                        "reason=nvrx-e2e"], check=True, timeout=30)
        decision = run.segdir / f"segment_health_check.{array}.1"
        wait_until(f"the decision {decision.name}", lambda: decision.exists()
                   and decision.stat().st_size > 0, timeout=300)
        assert drained in decision.read_text()
        # The decision stands after the node is back: the resubmission must still avoid it.
        subprocess.run(["scontrol", "update", f"nodename={drained}", "state=resume"],
                       check=True, timeout=30)

        # A worker failure in task 1: ft_launcher restarts it, and its next rendezvous round
        # runs the check on process 0.
        (run.control / "fault.1").touch()
        ended = wait_until("task 1 to end", lambda: (t := tasks_of(array)).get(
            "1", ("",))[0] in ENDED and t, timeout=600)
        assert ended["1"][0] == "FAILED", ended
        log1 = run.text(f"{array}_1")
        assert "simulated fault" in log1 and FAILED_CHECK in log1, log1[-4000:]
        assert f"job_id={array} task_id=1" in log1 and "TRAINED" not in log1

        # Task 0 trains to the end (finish); the array ends; the plan resubmits on node-lost.
        (run.control / "finish").touch()
        status = cli.wait_for("nvrx-array", lambda s: len(s.get("objects", [])) >= 2,
                              timeout=900)
        second = status["objects"][-1]
        run.objects = list(status["objects"])
        assert second != array
        task0 = run.text(f"{array}_0")
        assert task0.count("TRAINED") == 2 and "simulated fault" not in task0, task0[-4000:]

        def excluded_list() -> str | None:
            shown = subprocess.run(["scontrol", "show", "job", second], capture_output=True,
                                   text=True, timeout=30, check=False).stdout
            words = [w for w in shown.split() if w.startswith("ExcNodeList=")]
            return words[0] if words else None

        assert wait_until("ExcNodeList of the resubmission", excluded_list, timeout=120) \
            == f"ExcNodeList={drained}"

        st = run.finish(timeout=1200)
        assert st["state"] == "succeeded", st
        for t, (state, nodes) in tasks_of(second).items():
            assert state == "COMPLETED" and drained not in hostnames(nodes), (t, state, nodes)

        events = cli.json("history", "nvrx-array")
        ends = [e["event"] for e in events if e["type"] == "ExecutionEnded"]
        assert_exclusion_cause(ends[0]["cause"], provenance="scheduler")
        assert ends[0]["ref"] == array and ends[0]["cause"]["detail"].startswith("FAILED")
        assert "task 1 speaks for the array" in ends[0]["cause"]["note"]
        intended = [e["event"] for e in events if e["type"] == "SubmissionIntended"]
        assert intended[1]["exclude_nodes"] == [drained]
        assert intended[1]["cause"]["kind"] == "node-lost"
        recovered = [e["event"] for e in events if e["type"] == "RecoveryStarted"]
        assert len(recovered) == 1 and recovered[0]["cause"]["kind"] == "node-lost"
        history = cli("history", "nvrx-array", check=True).stdout
        assert f"asking the scheduler to avoid node(s) {drained}" in history, history
        assert "ended: non-zero-exit" not in history, history
    finally:
        run.cleanup()


def test_decision_while_running_takes_effect_at_next_rendezvous(
        cli: Dispatch, tmp_path: Path, ft_launcher: str) -> None:
    run = Run(cli, tmp_path, ft_launcher, "nvrx-midrun")
    try:
        ref = run.first_object()
        wait_until("both ranks training", lambda: run.text(ref).count(": started") == 2,
                   timeout=900)
        cli("segment", "mark", "nvrx-midrun", "--reason", "e2e: flapping link", check=True)
        # A running unit is not evicted by the decision: it is read at the next round.
        assert job_state(ref) == "RUNNING"
        assert FAILED_CHECK not in run.text(ref)
        (run.control / "fault.none").touch()  # a regular job's task id reads "none"
        st = run.finish()
        log = run.text(ref)
        assert "simulated fault" in log and FAILED_CHECK in log, log[-4000:]
        assert "TRAINED" not in log
        assert st["state"] == "failed", st
        assert_exclusion_cause(st["cause"], provenance="actor", actor=whoami())
    finally:
        run.cleanup()
