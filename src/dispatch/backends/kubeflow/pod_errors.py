"""The application's own error at a TrainJob's failed end (issue 23): the first failing pod's
container ``terminated.message`` (what the container wrote to its termination-message path,
or its log's end under ``terminationMessagePolicy: FallbackToLogsOnError``, which a
TrainingRuntime's pod template sets; the TrainJob API has no field for it). Pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from dispatch.backends.kubeflow.objects import (
    as_int,
    as_list,
    as_map,
    as_str,
    labels,
    name_of,
    parse_time,
)
from dispatch.core.app_error import AppError, ErrorSource, from_output

COMPLETION_INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
JOB_INDEX_LABEL = "jobset.sigs.k8s.io/job-index"


def _failed_terminations(pod: Any) -> list[tuple[datetime, Any, Any]]:
    """(finished at, container status, terminated) of each container that ended badly."""
    status = as_map(as_map(pod).get("status"))
    out = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in as_list(status.get(key)):
            c = as_map(cs)
            for holder in (as_map(c.get("state")), as_map(c.get("lastState"))):
                term = as_map(holder.get("terminated"))
                if not term:
                    continue
                code = as_int(term.get("exitCode"))
                if code not in (None, 0) or as_str(term.get("reason")) == "OOMKilled":
                    at = parse_time(term.get("finishedAt")) or datetime.max.replace(tzinfo=UTC)
                    out.append((at, c, term))
                break
    return out


def first_pod_error(pods: Sequence[Any]) -> AppError | None:
    """The earliest failed container's termination message, with its pod's rank (the job
    index's completion index) and node; None when no failed container left a message."""
    found = []
    for pod in pods:
        for at, cs, term in _failed_terminations(pod):
            found.append((at, name_of(pod), pod, cs, term))
    for at, _, pod, _cs, term in sorted(found, key=lambda f: (f[0], f[1])):
        message = as_str(term.get("message")) or ""
        if not message.strip():
            continue
        code = as_int(term.get("exitCode"))
        index = as_str(labels(pod).get(COMPLETION_INDEX_LABEL))
        node = as_str(as_map(as_map(pod).get("spec")).get("nodeName")) or name_of(pod)
        return from_output(
            message, node=node, source=ErrorSource.TERMINATION_MESSAGE,
            rank=int(index) if index is not None and index.isdigit() else None,
            exit_code=code if code is not None and 0 < code <= 128 else None,
            signum=code - 128 if code is not None and code > 128 else None,
            at=None if at == datetime.max.replace(tzinfo=UTC) else at)
    return None
