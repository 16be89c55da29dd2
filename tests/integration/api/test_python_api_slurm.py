"""The Python API on the real Slurm testbed (scripts/slurm-testbed up): submit, wait (the
caller's process supervises), logs, history; a cancel reaches scancel."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from api_harness import Env

import dispatch
from dispatch import CauseKind, State

pytestmark = pytest.mark.slurm
WAIT_S = 300.0  # the testbed is shared: a job may wait in the queue


def slurm_spec(env: Env, tmp_path: Path, name: str, command: list[str],
               monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    # The output directory through the environment, not the spec's slurm.output_dir: a
    # backend built later (logs() opens its own) looks for output only in its default
    # directory and in what its own process submitted.
    out = tmp_path / "slurm-out"
    out.mkdir(exist_ok=True)
    out.chmod(0o777)
    monkeypatch.setenv("DISPATCH_SLURM_OUTPUT_DIR", str(out))
    return {"name": name, "backend": "slurm", "command": command, "nodes": 1,
            "time_limit": "5m"}


def scancel(job: dispatch.Job) -> None:
    refs = list(job.record().objects)
    if refs:
        subprocess.run(["scancel", *refs], capture_output=True, timeout=30, check=False)


def test_submit_wait_logs_on_slurm(env: Env, tmp_path: Path,
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    job = dispatch.submit(slurm_spec(env, tmp_path, "api-slurm-ok",
                                     ["bash", "-c", "echo hello from $SLURMD_NODENAME"],
                                     monkeypatch), store=env.store)
    try:
        st = job.wait(timeout=WAIT_S, poll=1.0)
    finally:
        scancel(job)
    assert st.state is State.SUCCEEDED, st
    assert st.cause is not None and st.cause.kind is CauseKind.NONE
    lines = list(job.logs())
    assert any(line.startswith("hello from n") for line in lines), lines
    assert any(h.text.startswith("SUCCEEDED") for h in job.history())


def test_cancel_on_slurm(env: Env, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    job = dispatch.submit(slurm_spec(env, tmp_path, "api-slurm-cancel", ["sleep", "300"],
                                     monkeypatch), store=env.store)
    try:
        with pytest.raises(TimeoutError):
            job.wait(timeout=5, poll=1.0)
        job.cancel()
        st = job.wait(timeout=WAIT_S, poll=1.0)
    finally:
        scancel(job)
    assert st.state is State.CANCELLED
    assert st.cause is not None and st.cause.kind is CauseKind.CANCELLED
