"""Whose words a failed container's ``terminated.message`` is (pod_errors.py): the
application's under the reasons a container ends with, Kubernetes' own under the reasons the
kubelet or the runtime writes (seen on the real control plane, issue 35: a preempted pod's
"The container could not be located when the pod was terminated" read as the application's
error)."""

from __future__ import annotations

from typing import Any

import pytest

from dispatch.backends.kubeflow.pod_errors import error_of, first_failed_container, first_pod_error
from dispatch.core.app_error import ErrorSource


def _pod(reason: str, code: int, message: str) -> dict[str, Any]:
    term = {"reason": reason, "exitCode": code, "finishedAt": "2026-12-03T10:00:00Z",
            "message": message}
    return {"metadata": {"name": "tj-node-0-0", "uid": "u1"}, "spec": {"nodeName": "n1"},
            "status": {"containerStatuses": [{"name": "node", "state": {"terminated": term}}]}}


@pytest.mark.parametrize("reason", ["Error", "OOMKilled", ""])
def test_a_containers_own_message_is_the_applications_error(reason: str) -> None:
    error = first_pod_error([_pod(reason, 3, "ValueError: loss is nan")])
    assert error is not None
    assert error.source is ErrorSource.TERMINATION_MESSAGE
    assert error.message == "ValueError: loss is nan"
    assert error.exit_code == 3


@pytest.mark.parametrize(("reason", "message"), [
    ("ContainerStatusUnknown", "The container could not be located when the pod was terminated"),
    ("StartError", "failed to create containerd task: exec: \"train\": not found"),
])
def test_kubernetes_own_words_are_never_the_applications(reason: str, message: str) -> None:
    pods = [_pod(reason, 137, message)]
    assert first_pod_error(pods) is None  # the backend then reads the log's last lines
    failed = first_failed_container(pods)
    assert failed is not None and failed.message == ""
    error = error_of(failed, None)
    assert error.message == ""
    assert error.exit_code is None and error.signal is None  # 137 is Kubernetes' placeholder
    assert f"Kubernetes said {reason}: {message}" in error.note
    # its log's last lines, when it has any, are still the application's
    from_log = error_of(failed, "Traceback (most recent call last):\nRuntimeError: boom")
    assert from_log.source is ErrorSource.OUTPUT_TAIL
    assert from_log.message == "RuntimeError: boom"
