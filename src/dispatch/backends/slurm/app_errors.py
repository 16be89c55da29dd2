"""The application's own error at the end of a Slurm job (issue 23): the first failing node's
torchelastic error file (the batch script points each node's TORCHELASTIC_ERROR_FILE at
``<output dir>/<token>.<job>.r<restarts>.node<id>.error.json``, script.py), else the end of
the job's output file (srun's "task N" line names the node). Read once per job and
execution; never touches the cause."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec

from dispatch.backends.capture.app_error import Ignored, output_tail, read_error_file
from dispatch.core.app_error import (
    AppError,
    ErrorSource,
    NotAnErrorFile,
    from_error_file,
    from_output,
    parse_error_file,
    reduce_output,
    srun_failure,
)
from dispatch.core.model import APPLICATION_ENDS, Execution, ObjectReport, State

_NODE = re.compile(r"\.node([0-9]+)\.error\.json\Z")  # \Z: "$" takes a final "\n"


def wants_error(report: ObjectReport) -> bool:
    if report.state is not State.FAILED or report.cause.kind not in APPLICATION_ENDS:
        return False
    last = report.executions[-1] if report.executions else None
    return last is not None and last.error is None


def with_error(report: ObjectReport, out_file: Path | None) -> ObjectReport:
    """``report`` with its last execution carrying the application's error, when one is
    found (unchanged otherwise)."""
    if out_file is None or not wants_error(report):
        return report
    last = report.executions[-1]
    error = capture(report.ref, last, out_file)
    if error is None:
        return report
    return msgspec.structs.replace(report, executions=(
        *report.executions[:-1], msgspec.structs.replace(last, error=error)))


def capture(ref: str, ex: Execution, out_file: Path) -> AppError | None:
    suffix = f".{ref}.out"
    if not out_file.name.endswith(suffix):
        return None
    prefix = out_file.name[: -len(suffix)]
    text = output_tail(out_file) or ""
    srun = srun_failure(text)
    notes: list[str] = []
    # (timestamp, node id, error) of the files torchelastic's agent copied from a failed
    # worker (they carry its exit code, errorCode), and of those a launcher wrote about its
    # own failure (a rendezvous lost when another node ended, a stop): the first worker's
    # file is the root cause; a launcher's own words only when nothing else speaks.
    workers: list[tuple[int, int, AppError]] = []
    launchers: list[tuple[int, int, AppError]] = []
    for path in sorted(out_file.parent.glob(f"{glob_escape(prefix)}.{ref}.r{ex.index}"
                                            ".node*.error.json")):
        m = _NODE.search(path.name)
        if m is None:
            continue
        node_id = int(m.group(1))
        node = ex.nodes[node_id] if node_id < len(ex.nodes) else f"node{node_id}"
        try:
            data = read_error_file(path, started_at=ex.started_at)
            if data is None:
                continue
            parsed = parse_error_file(data)
        except Ignored as err:
            notes.append(f"the error file was ignored: {err}")
            continue
        except NotAnErrorFile as err:
            notes.append(f"the error file was ignored: {path}: {err}")
            continue
        told = reduce_output(text, host=node)
        (workers if parsed.error_code is not None else launchers).append(
            (parsed.timestamp or 0, node_id, from_error_file(
                parsed, node=node, rank=told.rank if told.rank is not None else None,
                local_rank=told.local_rank, at=ex.ended_at)))
    if workers or (launchers and not text):
        first = min(workers or launchers, key=lambda f: (f[0], f[1]))[2]
        return msgspec.structs.replace(first, note="; ".join(notes)) if notes else first
    if not text and not notes:
        return None
    return from_output(text, node=srun.node if srun else "",
                       rank=srun.task if srun else None,
                       exit_code=srun.exit_code if srun else None,
                       signum=srun.signal if srun else None, at=ex.ended_at,
                       note="; ".join(notes), host=srun.node if srun else "",
                       source=ErrorSource.OUTPUT_TAIL)


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)
