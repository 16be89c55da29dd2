"""Issue 23: a step's task killed by a signal reads as that signal, not as "exit 9 or 137".

sacct shows the step's death as ``0:9`` on the step row while the job row carries the batch
script's exit (srun's 128+9, printed less 128 as ``9:0`` by sacct; exactly 137 by squeue).
The lines follow sacct -P's format on the testbeds (tests/fixtures/slurm/*.sacct.txt);
a script's own ``exit 137`` with no killed step keeps the old "9 or 137" note."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatch.backends.slurm.mapping import object_report
from dispatch.backends.slurm.parse import ExitStatus, group_sacct, parse_sacct
from dispatch.core.model import CauseKind as K

NOW = datetime(2026, 12, 2, 5, 0, tzinfo=UTC)
HEAD = "JobID|JobIDRaw|State|ExitCode|DerivedExitCode|Reason|Submit|Start|End|NodeList|" \
       "Partition|Comment\n"
T = "2026-12-02T04:50:00"


def _rows(job: str, step: str, batch: str, derived: str = "0:9") -> str:
    return (HEAD
            + f"90|90|FAILED|{job}|{derived}|None|{T}|{T}|{T}|n[1-2]|low|cap.kill.0\n"
            + f"90.batch|90.batch|FAILED|{batch}|||{T}|{T}|{T}|n1||\n"
            + f"90.extern|90.extern|COMPLETED|0:0|||{T}|{T}|{T}|n[1-2]||\n"
            + f"90.0|90.0|FAILED|{step}|||{T}|{T}|{T}|n[1-2]||\n")


@pytest.mark.parametrize(("job", "step", "batch", "squeue", "kind", "code", "says"), [
    # sacct alone: the job's 9:0 is srun's 137 less 128, the step says 0:9
    ("9:0", "0:9", "9:0", None, K.NON_ZERO_EXIT, 137, "killed by signal 9 (SIGKILL)"),
    # squeue's exact wait status beside it
    ("9:0", "0:9", "9:0", ExitStatus(code=137, text="137"), K.NON_ZERO_EXIT, 137,
     "killed by signal 9 (SIGKILL)"),
    # SIGSEGV in a task
    ("11:0", "0:11", "11:0", None, K.NON_ZERO_EXIT, 139, "killed by signal 11 (SIGSEGV)"),
    # a script's own exit 137 and a clean step: no signal is claimed
    ("9:0", "0:0", "9:0", None, K.NON_ZERO_EXIT, 9, "9 or 137"),
    # a step killed by another signal than the exit carries: not the job's end
    ("3:0", "0:9", "3:0", None, K.NON_ZERO_EXIT, 3, "3 or 131"),
])
def test_step_signal(job: str, step: str, batch: str, squeue: ExitStatus | None, kind: K,
                     code: int, says: str) -> None:
    groups = group_sacct(parse_sacct(_rows(job, step, batch)))
    from dispatch.backends.slurm import mapping

    row, steps = groups["90"][0]
    sig = mapping.signal_from_sacct(row, steps, squeue_exit=squeue)
    state, cause = mapping.classify(sig)
    assert (cause.kind, cause.exit_code) == (kind, code)
    assert says in cause.note
    if not says.startswith("killed"):
        assert "killed" not in cause.note
    assert f"ExitCode={job}" in cause.detail  # the scheduler's words stay verbatim
    if says.startswith("killed"):
        assert "9 or 137" not in cause.note


def test_object_report_from_accounting_says_signal_9() -> None:
    groups = group_sacct(parse_sacct(_rows("9:0", "0:9", "9:0")))
    report = object_report(ref="90", token=None, job=None, groups=groups["90"], nodes={},
                           lost_since=None, now=NOW)
    assert report.cause.exit_code == 137
    assert "step 0 was killed by signal 9 (SIGKILL)" in report.cause.note
    assert "step 0 FAILED 0:9" in report.cause.detail


@pytest.mark.parametrize("version", ["22.05", "24.11"])
def test_captured_on_the_testbeds(version: str) -> None:
    """tests/fixtures/slurm/<version>/step-sigkill.sacct.txt: `python -c os.kill(self,
    SIGKILL)` under srun on each testbed (2026-12-02): job 9:0, DerivedExitCode 0:9, step 0:9
    (CANCELLED)."""
    text = (Path(__file__).resolve().parents[3] / "fixtures" / "slurm" / version
            / "step-sigkill.sacct.txt").read_text()
    groups = group_sacct(parse_sacct(text))
    (ref,) = groups
    report = object_report(ref=ref, token=None, job=None, groups=groups[ref], nodes={},
                           lost_since=None, now=NOW)
    assert report.cause.kind is K.NON_ZERO_EXIT and report.cause.exit_code == 137
    assert "killed by signal 9 (SIGKILL)" in report.cause.note
    assert "9 or 137" not in report.cause.note
    assert "ExitCode=9:0" in report.cause.detail
