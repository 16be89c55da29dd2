"""CLI start-up (issue 15): the read commands load only what they use. What a command imports
is most of its start-up time; this checks the imports, never a time (shared machines are
noisy). `bench/bench_startup.py` measures the time against `torchx --help`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatch.core.events import OutcomeCommitted
from dispatch.core.model import Cause, CauseKind, Provenance, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.service.requests import create_job
from dispatch.stores.sqlite import SQLiteStore

# Nothing a read of a finished job's record needs: servers, clients, schedulers' libraries,
# spec parsing, webhooks, the supervisor and the plan, Rich (status to a pipe is plain text).
NOT_ON_STATUS_PATH = (
    "rich", "starlette", "uvicorn", "prometheus_client", "psutil", "lightkube", "tenacity",
    "psycopg", "httpx2", "yaml", "jsonschema", "hypothesis", "urllib.request", "http.client",
    "secrets", "dispatch.http", "dispatch.segment_health", "dispatch.supervise.loop",
    "dispatch.supervise.leases", "dispatch.supervise.escalations", "dispatch.supervise.discovery",
    "dispatch.service.specfile",
    "dispatch.api", "dispatch.backends.base", "dispatch.backends.local",
    "dispatch.backends.slurm", "dispatch.backends.kubeflow", "dispatch.core.decide", "re2",
)

# Runs the CLI as `dispatch ARGS` does, stdout to a file (not a terminal), then names the
# modules of the list above that were loaded (a package counts with its submodules).
PROBE = r"""
import json, sys
names = json.loads(sys.argv[1])
sys.argv = ["dispatch", *sys.argv[2:]]
from dispatch.cli import main
try:
    main()
except SystemExit:
    pass
loaded = sorted(n for n in names if any(m == n or m.startswith(n + ".") for m in sys.modules))
sys.stderr.write("LOADED " + json.dumps(loaded) + "\n")
"""


@pytest.fixture
def finished_job(tmp_path: Path) -> tuple[dict[str, str], str]:
    """A store holding one failed job (no scheduler needed to read it), and the env to use."""
    store_path = tmp_path / "record.sqlite3"
    now = datetime(2026, 12, 1, tzinfo=UTC)
    with SQLiteStore(store_path) as store:
        job = create_job(store, JobSpec(name="startup", command=["true"]),
                         Declarations(backend="local"),
                         now, actor="tester", scope="local")
        store.append(job, [OutcomeCommitted(
            seq=2, at=now, state=State.FAILED,
            cause=Cause(kind=CauseKind.NON_ZERO_EXIT, provenance=Provenance.APPLICATION,
                        exit_code=3, at=now))], expected_version=1)
    env = {k: v for k, v in os.environ.items()
           if k not in ("FORCE_COLOR", "TTY_COMPATIBLE", "PYTHONPATH")}
    env.update(DISPATCH_STORE=str(store_path), DISPATCH_LOCAL_ROOT=str(tmp_path / "local"),
               XDG_STATE_HOME=str(tmp_path))
    return env, job


def loaded_by(env: dict[str, str], *args: str) -> tuple[list[str], str]:
    done = subprocess.run([sys.executable, "-c", PROBE, json.dumps(NOT_ON_STATUS_PATH), *args],
                          env=env, capture_output=True, text=True, timeout=120, check=False)
    said = done.stderr.splitlines()
    assert said and said[-1].startswith("LOADED "), done.stderr
    return json.loads(said[-1].removeprefix("LOADED ")), done.stdout + "\n".join(said[:-1])


@pytest.mark.parametrize("args", [("status", "{job}"), ("status", "{job}", "--json"),
                                  ("status", "no-such-job"), ("status", "no-such-job", "--json"),
                                  ("history", "{job}"), ("ls", "--all", "--json")])
def test_read_commands_load_none_of_the_heavy_modules(
        finished_job: tuple[dict[str, str], str], args: tuple[str, ...]) -> None:
    env, job = finished_job
    loaded, out = loaded_by(env, *(a.format(job=job) for a in args))
    assert loaded == []
    assert out.strip()  # it did answer: the status, or the error
