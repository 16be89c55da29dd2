"""The application's own error at a TrainJob's failed end (issue 23): the first failing pod's
container ``terminated.message`` (what the container wrote to its termination-message path,
or its log's end under ``terminationMessagePolicy: FallbackToLogsOnError``, which a
TrainingRuntime's pod template sets; the TrainJob API has no field for it). A container that
left no message: its last log lines (read by the backend, ``podlogs.log_tail``), reduced the
same way as a Slurm or local node's output tail. Pure."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import msgspec

from dispatch.backends.kubeflow.objects import (
    COMPLETION_INDEX_LABEL,
    as_int,
    as_list,
    as_map,
    as_str,
    labels,
    name_of,
    parse_time,
)
from dispatch.backends.kubeflow.pods import terminations
from dispatch.core.app_error import AppError, ErrorSource, from_output

# The reasons under which ``terminated.message`` is what the container left (its
# termination-message file, or its log's end under FallbackToLogsOnError). Under any other
# reason the kubelet or the runtime wrote the message itself (ContainerStatusUnknown: "The
# container could not be located when the pod was terminated"; StartError: the runtime's
# failure): Kubernetes' words, kept in the note, never shown as the application's.
APPLICATION_REASONS = frozenset({"", "Error", "Completed", "OOMKilled"})


def _failed_terminations(pod: Any) -> list[tuple[datetime, Any, Any]]:
    """(finished at, container status, terminated) of each container that ended badly by
    itself: an end its pod's deletion caused (the kubelet's SIGTERM or SIGKILL: a person's
    delete, the Job controller's) is not the application's error, the failure before it is."""
    status = as_map(as_map(pod).get("status"))
    out = []
    for key in ("initContainerStatuses", "containerStatuses"):
        for cs in as_list(status.get(key)):
            c = as_map(cs)
            for term, deleted in terminations(pod, c):
                code = as_int(term.get("exitCode"))
                if deleted:
                    continue
                if code not in (None, 0) or as_str(term.get("reason")) == "OOMKilled":
                    at = parse_time(term.get("finishedAt")) or datetime.max.replace(tzinfo=UTC)
                    out.append((at, c, term))
    return out


class FailedContainer(msgspec.Struct, frozen=True):
    """The first container of a TrainJob's pods that ended badly, and where it ran."""

    pod: str
    container: str
    uid: str
    node: str
    rank: int | None
    exit_code: int | None
    message: str
    at: datetime | None
    # what Kubernetes itself wrote in the message's place (reason: message), if anything
    kubernetes_words: str = ""


def first_failed_container(pods: Sequence[Any]) -> FailedContainer | None:
    """The earliest failed container (by its finishedAt, then the pod's name), with its pod's
    rank (the job index's completion index) and node; None when none failed."""
    found = []
    for pod in pods:
        for at, cs, term in _failed_terminations(pod):
            found.append((at, name_of(pod), pod, cs, term))
    if not found:
        return None
    at, name, pod, cs, term = min(found, key=lambda f: (f[0], f[1]))
    index = as_str(labels(pod).get(COMPLETION_INDEX_LABEL))
    reason, message = as_str(term.get("reason")) or "", as_str(term.get("message")) or ""
    if reason not in APPLICATION_REASONS:
        message, words = "", f"{reason}: {message}" if message else reason
    else:
        words = ""
    return FailedContainer(
        pod=name, container=as_str(as_map(cs).get("name")) or "",
        uid=as_str(as_map(as_map(pod).get("metadata")).get("uid")) or "",
        node=as_str(as_map(as_map(pod).get("spec")).get("nodeName")) or name,
        rank=int(index) if index is not None and index.isdigit() else None,
        exit_code=as_int(term.get("exitCode")), message=message,
        at=None if at == datetime.max.replace(tzinfo=UTC) else at, kubernetes_words=words)


def _exit_and_signal(code: int | None) -> tuple[int | None, int | None]:
    if code is None or code <= 0:
        return None, None
    return (code, None) if code <= 128 else (None, code - 128)


def first_pod_error(pods: Sequence[Any]) -> AppError | None:
    """The first failed container's termination message as the application's error; None
    when it left none (the backend then reads its last log lines: ``error_of``)."""
    failed = first_failed_container(pods)
    if failed is None or not failed.message.strip():
        return None
    return error_of(failed, None)


def error_of(failed: FailedContainer, log_tail: str | None) -> AppError:
    """The failed container's error: its termination message when it left one, else the
    last lines of its log; neither: an error without words whose note says so (the cause is
    the scheduler's either way)."""
    # Under a reason of Kubernetes' own the exit code is its placeholder too (137 for a
    # container it could not locate), not how the application ended.
    code, signum = (None, None) if failed.kubernetes_words else _exit_and_signal(
        failed.exit_code)
    if failed.message.strip():
        text, source, note = failed.message, ErrorSource.TERMINATION_MESSAGE, ""
    elif log_tail and log_tail.strip():
        text, source, note = log_tail, ErrorSource.OUTPUT_TAIL, ""
    else:
        text, source = "", ErrorSource.TERMINATION_MESSAGE
        note = (f"container {failed.container} of pod {failed.pod} left no termination "
                "message and no log lines")
        if failed.kubernetes_words:
            note += f" (Kubernetes said {failed.kubernetes_words})"
    return from_output(text, node=failed.node, source=source, rank=failed.rank,
                       exit_code=code, signum=signum, at=failed.at, note=note)
