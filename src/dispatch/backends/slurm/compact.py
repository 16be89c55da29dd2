"""Parsers for the tick's compact queries: ``squeue -h -t all -u USER -O <SQUEUE_FORMAT>``
(the submitting user's jobs only) and ``scontrol show node -o NODES`` (the nodes of our jobs
only). Pure functions of text; malformed output raises ``SlurmOutputError`` naming the tool
and the line.

Why not ``squeue --json``: in 22.05 it ignores ``-u`` / ``-j`` and prints every job of the
cluster (9.3 MB for 3,000 jobs); a tick must cost what our jobs cost, not the cluster's.

Differences between the versions, seen on the testbeds (22.05.8 and 24.11.5):
- ``exit_code`` / ``DerivedEC``: 22.05 prints the raw wait status (exit 3 -> ``768``), 24.11
  prints ``code:signal`` (``3:0``; an OOM-killed step ``0:125``). Both are read.
- ``Reason`` prints the job's state description instead of its reason code when there is one
  (``job requeued in held state`` where JSON has reason JobHeldUser plus that description):
  a text that is not one reason word is kept as the description; its leading reason word
  (``ReqNodeNotAvail, UnavailableNodes:n4``) as the reason.
- ``Comment`` prints ``(null)`` when there is none; a running job's ``EndTime`` ``NONE`` on
  24.11; a pending job's ``StartTime`` is a forecast (dropped here).
"""

from __future__ import annotations

import re
from datetime import datetime

from dispatch.backends.slurm.parse import (
    ExitStatus,
    SlurmOutputError,
    SqueueJob,
    parse_exit_pair,
    parse_sacct_time,
    wait_status,
)
from dispatch.backends.slurm.stop_mark import split_comment

# squeue -O fields in this order, each followed by "|" (an empty size: printed in full).
# Comment is last: it is user text and may hold "|"; the line is split into the first
# len - 1 fields and the rest, less the one "|" squeue appends.
SQUEUE_FIELDS: tuple[str, ...] = (
    "JobID", "ArrayJobID", "ArrayTaskID", "State", "Reason", "exit_code", "DerivedEC",
    "RestartCnt", "Requeue", "NodeList", "SubmitTime", "EligibleTime", "StartTime", "EndTime",
    "Partition", "STDOUT", "Comment",
)
SQUEUE_FORMAT = ",".join(f"{f}:|" for f in SQUEUE_FIELDS)

_REASON_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_NOT_SET = frozenset({"", "N/A", "(null)", "None", "NONE", "Unknown"})  # NONE: 24.11


def squeue_argv(user: str) -> list[str]:
    """The tick's one job query: the user's jobs in every state (ended ones stay MinJobAge)."""
    # --local: no REQUEST_FED_INFO first (squeue asks for it before a user's jobs); dispatch
    # reads the cluster it submits to. A non-root -u is filtered by slurmctld
    # (REQUEST_JOB_USER_INFO); squeue takes uid 0 for "no user" and reads every job for root.
    return ["squeue", "-h", "--local", "-t", "all", "-u", user, "-O", SQUEUE_FORMAT]


def parse_squeue_compact(text: str) -> tuple[SqueueJob, ...]:
    tool = "squeue -O"
    return tuple(_squeue_line(tool, line, f"line {n}")
                 for n, line in enumerate(text.splitlines(), start=1) if line.strip())


def _int(tool: str, text: str, where: str, field: str) -> int:
    if not text.isdigit():
        raise SlurmOutputError(tool, where, f"{field}: not a number: {text!r}")
    return int(text)


def _time(tool: str, text: str, where: str, field: str) -> datetime | None:
    if text in _NOT_SET:
        return None
    try:
        return parse_sacct_time(text)
    except ValueError:
        raise SlurmOutputError(tool, where, f"{field}: not a time: {text!r}") from None


def _exit(tool: str, text: str, where: str, field: str) -> ExitStatus | None:
    if text in _NOT_SET:
        return None
    if text.lstrip("-").isdigit() and text.count("-") <= 1:
        # 22.05: the raw wait status; NO_VAL prints negative (-2 for a NODE_FAIL job): kept
        # as words, never read as a code
        return wait_status(int(text))
    try:  # 24.11: code:signal
        return parse_exit_pair(text)
    except ValueError:
        raise SlurmOutputError(tool, where, f"{field}: not an exit code: {text!r}") from None


def split_reason(text: str) -> tuple[str, str]:
    """squeue's Reason column -> (reason, description). One reason word is the reason; any
    other text is a description, and its leading reason word (before ``,``) the reason."""
    if text in ("", "(null)"):
        return "", ""
    if _REASON_WORD.fullmatch(text):
        return text, ""
    head = text.split(",", 1)[0]
    return (head if "," in text and _REASON_WORD.fullmatch(head) else ""), text


def _squeue_line(tool: str, line: str, where: str) -> SqueueJob:
    n = len(SQUEUE_FIELDS)
    parts = line.split("|", n - 1)
    if len(parts) != n or not parts[-1].endswith("|"):
        raise SlurmOutputError(tool, where, f"expected {n} fields ending with '|': {line!r}")
    v = dict(zip(SQUEUE_FIELDS, parts, strict=True))
    v["Comment"] = v["Comment"][:-1]
    job_id = _int(tool, v["JobID"].strip(), where, "JobID")
    if job_id <= 0:
        raise SlurmOutputError(tool, where, f"JobID: not a job id: {v['JobID']!r}")
    state = v["State"].strip().upper()
    if not state or not _REASON_WORD.fullmatch(state):
        raise SlurmOutputError(tool, where, f"State: not a state word: {v['State']!r}")
    task = v["ArrayTaskID"].strip()
    array_job_id, array_task_id, array_task_string = 0, None, ""
    if task not in _NOT_SET:
        array_job_id = _int(tool, v["ArrayJobID"].strip(), where, "ArrayJobID")
        if task.isdigit():
            array_task_id = int(task)
        else:  # the array's record of tasks not yet started: 0-3, 0-3%1, 1,3
            array_task_string = task
    requeue = v["Requeue"].strip()
    if requeue not in ("0", "1"):
        raise SlurmOutputError(tool, where, f"Requeue: not 0 or 1: {requeue!r}")
    reason, description = split_reason(v["Reason"].strip())
    comment, marked = split_comment("" if v["Comment"] == "(null)" else v["Comment"])
    nodes = v["NodeList"].strip()
    out = v["STDOUT"].strip()
    return SqueueJob(
        job_id=job_id, state=state, states=(state,), reason=reason, description=description,
        exit=_exit(tool, v["exit_code"].strip(), where, "exit_code"),
        derived_exit=_exit(tool, v["DerivedEC"].strip(), where, "DerivedEC"),
        restarts=_int(tool, v["RestartCnt"].strip(), where, "RestartCnt"),
        requeue=requeue == "1", nodes="" if nodes in _NOT_SET else nodes,
        comment=comment, stop_marked=marked,
        partition=v["Partition"].strip(), array_job_id=array_job_id,
        array_task_id=array_task_id, array_task_string=array_task_string,
        submit_time=_time(tool, v["SubmitTime"].strip(), where, "SubmitTime"),
        eligible_time=_time(tool, v["EligibleTime"].strip(), where, "EligibleTime"),
        # A pending job's StartTime is Slurm's forecast (22.05 JSON gives 0): not a start.
        start_time=None if state == "PENDING" else _time(tool, v["StartTime"].strip(), where,
                                                         "StartTime"),
        end_time=_time(tool, v["EndTime"].strip(), where, "EndTime"),
        standard_output="" if out in _NOT_SET else out,
    )
