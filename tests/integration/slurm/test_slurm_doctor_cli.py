"""`dispatch doctor --backend slurm` against the real testbed: its tools answer, accounting
is on, the default partition and a named one are up, an unknown one is a problem (exit 1)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from dispatch.cli import main

pytestmark = pytest.mark.slurm


def doctor(*args: str) -> tuple[int, dict]:  # type: ignore[type-arg]
    r = CliRunner().invoke(main, ["doctor", "--backend", "slurm", "--json", *args])
    return r.exit_code, json.loads(r.stdout)


def test_the_testbed_is_ready(slurm_version: str) -> None:
    code, out = doctor()
    assert code == 0, out
    by = {c["name"]: c for c in out["checks"]}
    assert {c["verdict"] for c in out["checks"]} == {"ok"}
    assert "slurmdbd" in by["accounting"]["detail"]
    assert slurm_version in by["accounting"]["detail"]
    assert [n for n in by if n.startswith("partition ")]


def test_a_named_partition(slurm_version: str) -> None:
    import subprocess

    names = subprocess.run(["sinfo", "-h", "-o", "%P"], capture_output=True, text=True,
                           check=True).stdout.split()
    name = names[-1].rstrip("*")
    code, out = doctor("--partition", name)
    assert code == 0
    assert out["checks"][-1] == {"name": f"partition {name}", "verdict": "ok", "detail": "up",
                                 "fix": ""}
    code, out = doctor("--partition", "no-such-partition")
    assert code == 1
    assert out["checks"][-1]["verdict"] == "problem"
    assert name in out["checks"][-1]["detail"]
