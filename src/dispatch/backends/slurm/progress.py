"""The training's progress on Slurm (G3): each node's DISPATCH_PROGRESS_FILE is
``<output dir>/<token>.<job>.r<restarts>.node<id>.progress.jsonl`` (script.py). Read for the
execution that runs (or just ended), bounded and without following links
(backends/capture/progress.py); the latest checkpoint rides on the execution to observe()."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import msgspec

from dispatch.backends.capture.progress import read_progress
from dispatch.backends.slurm.app_errors import glob_escape
from dispatch.core.model import ObjectReport, State
from dispatch.core.progress import latest


def with_progress(report: ObjectReport, out_file: Path | None, now: datetime) -> ObjectReport:
    """``report`` with its last execution carrying the training's latest checkpoint, when
    a progress file of that execution holds one (unchanged otherwise)."""
    if out_file is None or not report.executions or report.state is State.PENDING:
        return report
    suffix = f".{report.ref}.out"
    if not out_file.name.endswith(suffix):
        return report
    prefix = out_file.name[: -len(suffix)]
    last = report.executions[-1]
    paths = sorted(out_file.parent.glob(f"{glob_escape(prefix)}.{report.ref}.r{last.index}"
                                        ".node*.progress.jsonl"))
    if not paths:
        return report
    seen = last.ended_at or now  # a checkpoint is never after its execution's end
    found = latest([read_progress(p, started=last.started_at, now=seen) for p in paths])
    if found.checkpoint is None and not found.note:
        return report
    return msgspec.structs.replace(report, executions=(
        *report.executions[:-1], msgspec.structs.replace(last, progress=found)))
