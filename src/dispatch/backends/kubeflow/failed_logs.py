"""What a failed pod's log tells when its container left no termination message (issue 23):
the end of its trainer log, read through the API server once per pod or container, and the
error it gives. Bounded caches: a long-lived supervisor sees failed pods for ever."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec

from dispatch.backends.kubeflow.client import ApiAnswer, KubeClient
from dispatch.backends.kubeflow.objects import meta, name_of
from dispatch.backends.kubeflow.pod_errors import error_of, first_failed_container
from dispatch.backends.kubeflow.podlogs import TRAINER_CONTAINER, log_tail
from dispatch.core.app_error import AppError
from dispatch.core.model import APPLICATION_ENDS, ObjectReport, SchedulerUnreachable, State

# Failed containers whose log-read error is kept (insertion order; the oldest goes first).
LOG_ERRORS_KEPT = 4096


class FailedPodLogs:
    """Reads failed pods' log ends through ``kube()`` (made on first use by the backend)."""

    def __init__(self, kube: Callable[[], KubeClient]) -> None:
        self._kube = kube
        # (pod uid, container) -> the error its last log lines told
        self.errors: dict[tuple[str, str], AppError] = {}
        self._tails: dict[str, str] = {}  # pod uid -> its log's end (tail_of)

    def with_log_error(self, ns: str, report: ObjectReport, pods: list[Any]) -> ObjectReport:
        """A failed end whose first failing container left no termination message: its
        error from the container's last log lines, read once; the cause as it was."""
        last = report.executions[-1] if report.executions else None
        if (report.state is not State.FAILED or report.cause.kind not in APPLICATION_ENDS
                or last is None or last.error is not None):
            return report
        failed = first_failed_container(pods)
        if failed is None:
            return report
        key = (failed.uid, failed.container)
        error = self.errors.get(key)
        if error is None:
            try:
                error = error_of(failed, log_tail(self._kube(), ns, failed.pod,
                                                  failed.container or None))
            except SchedulerUnreachable:
                return report  # asked again at the next look
            except ApiAnswer as err:
                error = msgspec.structs.replace(error_of(failed, None), note=(
                    f"the log of pod {failed.pod} could not be read: {err}"))
            self.errors[key] = error
            if len(self.errors) > LOG_ERRORS_KEPT:  # the oldest pod's is read no more
                del self.errors[next(iter(self.errors))]
        return msgspec.structs.replace(report, executions=(
            *report.executions[:-1], msgspec.structs.replace(last, error=error)))

    def tail_of(self, ns: str, pod: Any) -> str | None:
        """The end of a failed pod's trainer log, read once per pod (the newest
        LOG_ERRORS_KEPT kept); None when the API server cannot be reached (asked again at
        the next look), "" when it has no log to give."""
        uid, name = str(meta(pod).get("uid") or ""), name_of(pod)
        if uid in self._tails:
            return self._tails[uid]
        statuses = [str(c.get("name")) for c in (pod.get("status") or {}).get(
            "containerStatuses") or [] if isinstance(c, dict)]
        container = TRAINER_CONTAINER if TRAINER_CONTAINER in statuses else (
            statuses[0] if statuses else None)
        try:
            text = log_tail(self._kube(), ns, name, container)
        except SchedulerUnreachable:
            return None
        except ApiAnswer:
            text = ""
        self._tails[uid] = text
        if len(self._tails) > LOG_ERRORS_KEPT:
            del self._tails[next(iter(self._tails))]
        return text
