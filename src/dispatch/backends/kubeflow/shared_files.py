"""The pods' progress and error files in the spec's ``kubeflow.shared_dir`` (issue 46).

On Slurm a node's ``DISPATCH_PROGRESS_FILE`` and ``TORCHELASTIC_ERROR_FILE`` are files of a
shared file system that the supervisor reads at the same path (slurm/progress.py,
slurm/app_errors.py). A pod's own file system is not where the supervisor can read, so on
Kubeflow the spec names a directory that is: ``kubeflow.shared_dir``, a volume's mount_path or
under one (a PVC of shared storage, a host path every node and the supervisor's machine share),
the same path in the pods and where dispatch runs (section.shared_dir_problem).

Each pod gets its own two files there, named after the pod (unique: the TrainJob's name, which
the token makes, the job index and the Job controller's random suffix), through Kubernetes'
own expansion of ``$(DISPATCH_POD_NAME)``, a variable the downward API fills with the pod's
name and that comes first in the trainer's env (Kubernetes expands only earlier ones)::

    <shared_dir>/dispatch-<pod name>.progress.jsonl
    <shared_dir>/dispatch-<pod name>.error.json

The TrainJob carries the directory in its annotation ``dispatch.io/shared-dir`` (a look has
no spec). dispatch reads them for the pods it sees, as Slurm's are read: bounded, never through
a link, only a file of dispatch's user with one link (capture/); an untrusted file is ignored
with a note, and neither ever changes an end or its cause.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

import msgspec

from dispatch.backends.capture.app_error import ERROR_FILE_VAR, Ignored, read_error_file
from dispatch.backends.capture.progress import read_progress
from dispatch.backends.kubeflow.objects import (
    COMPLETION_INDEX_LABEL,
    SHARED_DIR_ANNOTATION,
    as_map,
    as_str,
    labels,
    meta,
    name_of,
)
from dispatch.core.app_error import (
    AppError,
    NotAnErrorFile,
    from_error_file,
    parse_error_file,
    reduce_output,
)
from dispatch.core.model import APPLICATION_ENDS, ObjectReport, State
from dispatch.core.progress import PROGRESS_FILE_VAR, latest

POD_NAME_VAR = "DISPATCH_POD_NAME"
PREFIX = "dispatch-"
PROGRESS_SUFFIX = ".progress.jsonl"
ERROR_SUFFIX = ".error.json"
# A failed pod -> the end of its trainer's log (None or "" when it cannot be read): where
# torchrun's "Root Cause" block says the failing worker's rank.
TailOf = Callable[[Any], str | None]


def shared_file_env(shared_dir: str) -> list[dict[str, Any]]:
    """The trainer's env entries that name each pod's files in ``shared_dir``: the pod's name
    first (the others refer to it), then the progress and the error file."""
    stem = f"{shared_dir.rstrip('/')}/{PREFIX}$({POD_NAME_VAR})"
    return [
        {"name": POD_NAME_VAR, "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        {"name": PROGRESS_FILE_VAR, "value": stem + PROGRESS_SUFFIX},
        {"name": ERROR_FILE_VAR, "value": stem + ERROR_SUFFIX},
    ]


def shared_dir_of(trainjob: Any) -> Path | None:
    """The directory a TrainJob's pods write their files to; None when it names none (or
    names something that is no absolute path)."""
    text = as_str(as_map(meta(trainjob).get("annotations")).get(SHARED_DIR_ANNOTATION))
    if not text or not text.startswith("/") or "\x00" in text:
        return None
    return Path(text)


def pod_file(shared_dir: Path, pod: str, suffix: str) -> Path | None:
    """A pod's file in ``shared_dir``; None for a name that is no plain file name."""
    if not pod or "/" in pod or pod in (".", ".."):
        return None
    return shared_dir / f"{PREFIX}{pod}{suffix}"


def _names(pods: Sequence[Any]) -> list[str]:
    return sorted({name for p in pods if (name := name_of(p))})


def with_progress(report: ObjectReport, shared_dir: Path, pods: Sequence[Any],
                  now: datetime) -> ObjectReport:
    """``report`` with its last execution carrying the latest checkpoint its pods' progress
    files hold (unchanged when they hold none and nothing was ignored)."""
    if not report.executions or report.state is State.PENDING:
        return report
    last = report.executions[-1]
    seen = last.ended_at or now  # a checkpoint is never after its execution's end
    paths = [p for name in _names(pods) if (p := pod_file(shared_dir, name, PROGRESS_SUFFIX))]
    if not paths:
        return report
    found = latest([read_progress(p, started=last.started_at, now=seen) for p in paths])
    if found.checkpoint is None and not found.note:
        return report
    return msgspec.structs.replace(report, executions=(
        *report.executions[:-1], msgspec.structs.replace(last, progress=found)))


def _rank(pod: Any) -> int | None:
    index = as_str(labels(pod).get(COMPLETION_INDEX_LABEL))
    return int(index) if index is not None and index.isdigit() else None


def error_from_files(report: ObjectReport, shared_dir: Path, pods: Sequence[Any],
                     tail_of: TailOf | None = None) -> tuple[AppError | None, str]:
    """The application's error from its pods' torchelastic error files, for a failed end
    that is the application's: the first worker's (torchelastic's copy of a failed worker's
    file carries its exit code) by the file's timestamp (whole seconds: two ranks failing
    together tie), then the time it was written, then the pod's completion index; a
    launcher's own file only when no worker's is there. Its rank is torchrun's, from the
    "Root Cause" block at the end of that pod's log (``tail_of``): under a c10d rendezvous
    a pod's completion index is not its rank (the rendezvous orders the nodes); without
    such a block (no torchrun, a log that cannot be read) the completion index stands.
    Also dispatch's note on the files it ignored (a link, another job's, not an error
    file): those stay unread, and the termination message or log tail remains the error."""
    if report.state is not State.FAILED or report.cause.kind not in APPLICATION_ENDS:
        return None, ""
    last = report.executions[-1] if report.executions else None
    if last is None:
        return None, ""
    workers: list[tuple[int, int, int, AppError, Any]] = []
    launchers: list[tuple[int, int, int, AppError, Any]] = []
    notes: list[str] = []
    for pod in sorted(pods, key=name_of):
        name = name_of(pod)
        path = pod_file(shared_dir, name, ERROR_SUFFIX)
        if path is None:
            continue
        try:
            data = read_error_file(path, started_at=last.started_at)
            if data is None:
                continue
            parsed = parse_error_file(data)
            written = path.lstat().st_mtime_ns
        except Ignored as err:
            notes.append(f"the error file was ignored: {err}")
            continue
        except NotAnErrorFile as err:
            notes.append(f"the error file was ignored: {path}: {err}")
            continue
        except OSError:
            continue  # gone between the read and the stat
        rank = _rank(pod)
        node = as_str(as_map(as_map(pod).get("spec")).get("nodeName")) or name
        found = from_error_file(parsed, node=node, rank=rank, at=last.ended_at)
        key = (parsed.timestamp or 0, written, rank if rank is not None else 1 << 30, found,
               pod)
        (workers if parsed.error_code is not None else launchers).append(key)
    chosen = min(workers or launchers, key=lambda f: f[:3], default=None)
    if chosen is None:
        return None, "; ".join(notes)
    error, failed = chosen[3], chosen[4]
    told = reduce_output(text) if tail_of is not None and (text := tail_of(failed)) else None
    if told is not None and told.rank is not None:
        error = msgspec.structs.replace(error, rank=told.rank, local_rank=told.local_rank)
    note = "; ".join(notes)
    return (msgspec.structs.replace(error, note=note) if note else error), note


def with_shared_files(report: ObjectReport, trainjob: Any, pods: Sequence[Any],
                      now: datetime, tail_of: TailOf | None = None) -> ObjectReport:
    """``report`` with what its pods' files in the TrainJob's shared directory say: the
    latest checkpoint on its last execution, and, at a failed end that is the
    application's, the first failing worker's error file in place of the termination
    message or log tail (the error file names the exception and its traceback)."""
    shared_dir = shared_dir_of(trainjob)
    if shared_dir is None:
        return report
    report = with_progress(report, shared_dir, pods, now)
    error, note = error_from_files(report, shared_dir, pods, tail_of)
    last = report.executions[-1] if report.executions else None
    if error is None and note and last is not None and last.error is not None:
        told = last.error  # the termination message speaks, with why the files did not
        error = msgspec.structs.replace(told, note=f"{told.note}; {note}" if told.note else note)
    if error is None or last is None:
        return report
    return msgspec.structs.replace(report, executions=(
        *report.executions[:-1], msgspec.structs.replace(last, error=error)))
