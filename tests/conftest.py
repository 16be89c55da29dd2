"""Every test: nothing may leave a Slurm output file in the repository root; and the
processes tests start can be interrupted (SIGINT), however the suite was started.

A job submitted without ``--output`` writes ``slurm-<id>.out`` into the directory sbatch ran
in; three such files were once committed (issue 22). Each test is checked when it ends (the
file appears when the job starts, so a test may be named for a job an earlier test left
running), and the whole run once more when it ends.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

# A shell without job control starts `cmd &` with SIGINT ignored, and an ignored signal stays
# ignored across exec: every `dispatch` a test spawns would then shrug off the Ctrl-C the test
# sends it (seen in CI: `scripts/test` ran tests/e2e as `pytest ... &`, and `logs -f` and
# `watch` never ended). A handler, unlike SIG_IGN, is reset to the default by exec.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
