"""dispatch's mark on its own Slurm stops (S14, issue 21 item 15): the job's Comment goes from
``<token>`` to ``dispatch-stop:<token>`` before the scancel, the parsers read it back beside
the token, the mapping names "dispatch" only for a cancel that carries it, and the stop never
sends an unmarked scancel to a live job. No Slurm needed (recorded words, a table of tools)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.backends.slurm.compact import parse_squeue_compact
from dispatch.backends.slurm.mapping import Signal, classify, object_report
from dispatch.backends.slurm.parse import SACCT_FIELDS, SqueueJob, group_sacct, parse_sacct
from dispatch.backends.slurm.stop_mark import mark_argv, marked_comment, split_comment
from dispatch.backends.slurm.tools import Result, SlurmCommandError
from dispatch.core.model import CauseKind as K
from dispatch.core.model import Provenance as P
from dispatch.core.model import SchedulerUnreachable
from dispatch.core.model import State as S


@pytest.mark.parametrize(("comment", "token", "marked"), [
    ("j1.2", "j1.2", False),
    ("dispatch-stop:j1.2", "j1.2", True),
    ("", "", False),
    ("dispatch-stop:", "", True),
    ("a dispatch-stop:j1.2", "a dispatch-stop:j1.2", False),  # only a prefix marks
])
def test_a_comment_splits_into_token_and_mark(comment: str, token: str, marked: bool) -> None:
    assert split_comment(comment) == (token, marked)


def test_the_mark_is_one_scontrol_update_that_keeps_the_token() -> None:
    assert marked_comment("j1.2") == "dispatch-stop:j1.2"
    assert mark_argv("812", "j1.2") == ["scontrol", "update", "JobId=812",
                                        "Comment=dispatch-stop:j1.2"]


LINE = ("7|7|N/A|CANCELLED|None|0:15|0:0|0|1|n3|2026-12-01T08:20:57|2026-12-01T08:20:57|"
        "2026-12-01T08:20:58|2026-12-01T08:21:30|low|/tmp/%j.out|{comment}|")


@pytest.mark.parametrize(("comment", "token", "marked"), [
    ("j1.2", "j1.2", False), ("dispatch-stop:j1.2", "j1.2", True), ("(null)", "", False)])
def test_squeue_reads_the_token_and_the_mark(comment: str, token: str, marked: bool) -> None:
    (job,) = parse_squeue_compact(LINE.format(comment=comment))
    assert (job.comment, job.stop_marked) == (token, marked)


def test_sacct_reads_the_token_and_the_mark() -> None:
    text = "|".join(SACCT_FIELDS) + "\n" + (
        "7|7|CANCELLED by 0|0:15||None|2026-12-01T08:20:57|2026-12-01T08:20:58|"
        "2026-12-01T08:21:30|n3|low|dispatch-stop:j1.2\n")
    (row,) = parse_sacct(text)
    assert (row.comment, row.stop_marked) == ("j1.2", True)


@pytest.mark.parametrize(("state", "mark", "actor", "in_detail"), [
    pytest.param("CANCELLED by 0", "dispatch-stop:j1.2", "dispatch", True, id="marked-by-0"),
    pytest.param("CANCELLED by 0", "", "0", False, id="unmarked-by-our-uid-is-a-person"),
    pytest.param("CANCELLED by 1000", "", "1000", False, id="unmarked-by-another-uid"),
    pytest.param("CANCELLED", "dispatch-stop:j1.2", "dispatch", True, id="squeue-marked"),
    pytest.param("CANCELLED", "", None, False, id="squeue-unmarked-says-no-actor"),
])
def test_a_cancel_is_dispatchs_only_with_the_mark(state: str, mark: str, actor: str | None,
                                                  in_detail: bool) -> None:
    got_state, cause = classify(Signal(state=state, stop_mark=mark))
    assert got_state is S.CANCELLED and cause.kind is K.CANCELLED
    assert cause.actor == actor
    assert cause.provenance is (P.ACTOR if actor else P.SCHEDULER)
    assert cause.detail.startswith(state)  # the scheduler's words, verbatim
    assert (f"Comment={mark}" in cause.detail) is in_detail
    assert ("dispatch's own stop" in cause.note) is in_detail


def test_the_mark_changes_nothing_but_a_cancel() -> None:
    assert classify(Signal(state="COMPLETED", stop_mark="dispatch-stop:j1.2"))[0] \
        is S.SUCCEEDED
    state, cause = classify(Signal(state="TIMEOUT", stop_mark="dispatch-stop:j1.2"))
    assert (state, cause.kind) == (S.FAILED, K.TIME_LIMIT)


class Tools:
    """Answers each tool from a queue of results; records every argv."""

    def __init__(self, **answers: list[Result]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout: float) -> Result:
        self.calls.append(tuple(argv))
        return self.answers[argv[0]].pop(0)


def ok(tool: str, stderr: str = "", rc: int = 0) -> Result:
    return Result((tool,), rc, "", stderr)


def known(tools: Tools, tmp_path: Path) -> SlurmBackend:
    """A backend that submitted job 812 with token j1.2."""
    b = SlurmBackend(runner=tools, output_dir=tmp_path, user="root")
    b._remember("812", "j1.2")
    return b


def test_stop_marks_then_cancels(tmp_path: Path) -> None:
    tools = Tools(scontrol=[ok("scontrol")], scancel=[ok("scancel")])
    known(tools, tmp_path).stop("812")
    assert tools.calls == [("scontrol", "update", "JobId=812", "Comment=dispatch-stop:j1.2"),
                           ("scancel", "812")]


def test_a_person_cancel_through_dispatch_is_not_marked(tmp_path: Path) -> None:
    tools = Tools(scancel=[ok("scancel")])
    known(tools, tmp_path).cancel("812")
    assert tools.calls == [("scancel", "812")]


def test_a_job_that_has_ended_is_not_marked_and_its_scancel_is_a_no_op(tmp_path: Path) -> None:
    # (an array marks its live tasks and refuses the ended ones: the live ones are stopped)
    tools = Tools(scontrol=[ok("scontrol", "Job has already finished\n", 1)],
                  scancel=[ok("scancel", "scancel: error: Kill job error on job id 812: "
                              "Job/step already completing or completed\n")])
    known(tools, tmp_path).stop("812")
    assert [c[0] for c in tools.calls] == ["scontrol", "scancel"]


def test_no_unmarked_scancel_when_the_mark_is_refused(tmp_path: Path) -> None:
    tools = Tools(scontrol=[ok("scontrol", "Access/permission denied\n", 1),
                            ok("scontrol", "Unable to contact slurm controller "
                               "(connect failure)\n", 1)])
    b = known(tools, tmp_path)
    with pytest.raises(SlurmCommandError):
        b.stop("812")
    with pytest.raises(SchedulerUnreachable):
        b.stop("812")
    assert [c[0] for c in tools.calls] == ["scontrol", "scontrol"]


# Seen on the 22.05 testbed: a job requeued, then cancelled while pending again.
REQUEUED_THEN_CANCELLED = "|".join(SACCT_FIELDS) + "\n" + "\n".join([
    "75|75|REQUEUED|0:0||None|2026-12-02T04:23:10|2026-12-02T04:23:12|2026-12-02T04:23:15|n1|"
    "low|j1.2",
    "75.batch|75.batch|REQUEUED|0:0|||2026-12-02T04:23:12|2026-12-02T04:23:12|"
    "2026-12-02T04:23:15|n1||",
    "75|75|CANCELLED by 0|0:0||None|2026-12-02T04:23:10|2026-12-02T04:23:15|"
    "2026-12-02T04:23:15|None assigned|low|j1.2",
]) + "\n"


def test_a_requeued_job_cancelled_while_pending_ends_with_accountings_words_at_once() -> None:
    """Its last row has a Start but no nodes: it never ran, so no batch step is awaited, and
    the end is accounting's "CANCELLED by 0" (the uid) at once, not squeue's bare CANCELLED a
    minute later, which names no one."""
    groups = group_sacct(parse_sacct(REQUEUED_THEN_CANCELLED))["75"]
    end = datetime(2026, 12, 2, 4, 23, 15, tzinfo=UTC)
    job = SqueueJob(job_id=75, state="CANCELLED", restarts=1, comment="j1.2",
                    start_time=end, end_time=end)
    report = object_report(ref="75", token="j1.2", job=job, groups=groups, nodes={},
                           lost_since=None, now=end)
    assert report is not None and report.state is S.CANCELLED
    assert report.cause.actor == "0" and report.cause.detail.startswith("CANCELLED by 0")
