"""Every test: nothing may leave a Slurm output file in the repository root.

A job submitted without ``--output`` writes ``slurm-<id>.out`` into the directory sbatch ran
in; three such files were once committed (issue 22). Each test is checked when it ends (the
file appears when the job starts, so a test may be named for a job an earlier test left
running), and the whole run once more when it ends.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def stray_outputs() -> set[str]:
    return {p.name for p in REPO.glob("slurm-*.out")}


_AT_START = stray_outputs()


@pytest.fixture(autouse=True)
def no_slurm_output_in_the_repo_root() -> Iterator[None]:
    before = stray_outputs()
    yield
    new = sorted(stray_outputs() - before - _AT_START)
    if new:
        pytest.fail(f"a Slurm job wrote {', '.join(new)} into the repository root ({REPO}): "
                    "submit with --output under a temporary directory", pytrace=False)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    new = sorted(stray_outputs() - _AT_START)
    if new:
        print(f"\nSlurm output files appeared in the repository root {REPO}: {', '.join(new)}")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
