"""dispatch's mark on its own stops, kept at the scheduler (S14). Pure.

A person's ``scancel`` is final. Slurm names who cancelled a job by uid only ("CANCELLED by
0"), so a person running ``scancel`` as the user the supervisor runs as looks exactly like
the supervisor's own stop. Before its ``scancel`` the backend therefore sets the job's
Comment from ``<token>`` to ``dispatch-stop:<token>`` (``scontrol update``): a cancelled
job whose Comment carries the mark was stopped by dispatch; one without it was cancelled by
someone else, whatever the uid. The Comment is read by the queries the tick makes anyway
(squeue ``-O Comment``, sacct ``Comment``), so the mark costs no RPC in a tick; the stop
costs one more.

The token stays in the Comment after the mark (objects are found by their token), so the
parsers split a Comment into (token, marked).
"""

from __future__ import annotations

STOP_MARK = "dispatch-stop:"


def marked_comment(token: str) -> str:
    """The Comment of a job dispatch is stopping."""
    return STOP_MARK + token


def split_comment(comment: str) -> tuple[str, bool]:
    """A job's Comment -> (the token it carries, whether dispatch's stop mark is on it)."""
    if comment.startswith(STOP_MARK):
        return comment[len(STOP_MARK):], True
    return comment, False


def mark_argv(ref: str, token: str) -> list[str]:
    """The one ``scontrol update`` that marks job ``ref`` as stopped by dispatch."""
    return ["scontrol", "update", f"JobId={ref}", f"Comment={marked_comment(token)}"]
