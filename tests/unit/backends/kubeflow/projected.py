"""Every pure reader of the kubeflow backend, checked against the informer's projection
(issue 49): the unit tests' objects read through ``projection.project`` must be read exactly
as read whole (the same state, cause, words, executions, nodes). conftest.py wraps the readers
a test module imports, so every mapping, evidence and pod-error fixture is also a check that
the projection keeps every field the readers read."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from dispatch.backends.kubeflow.objects import name_of
from dispatch.backends.kubeflow.pods import is_evidence
from dispatch.backends.kubeflow.projection import project

# reader -> the kind of each argument that is an API object ("[Pod]": a list of pods)
READERS: dict[str, dict[str, str]] = {
    "report_trainjob": {"trainjob": "TrainJob", "jobset": "JobSet", "jobs": "[Job]",
                        "pods": "[Pod]", "nodes": "[Node]", "events": "[Event]"},
    "creation_failure": {"trainjob": "TrainJob", "jobset": "JobSet", "jobs": "[Job]",
                         "events": "[Event]"},
    "pod_end_signals": {"pod": "Pod"},
    "pending_signal": {"pod": "Pod"},
    "crash_loop": {"pod": "Pod"},
    "report_pods_left": {"pods": "[Pod]"},
    "deleted_by": {"tj": "TrainJob"},
    "first_failed_container": {"pods": "[Pod]"},
    "first_pod_error": {"pods": "[Pod]"},
    "replaced_pods": {"pods": "[Pod]", "jobs": "[Job]"},
    "node_lost_since": {"node": "Node"},
    "lost_nodes": {"nodes": "[Node]"},
    "with_shared_files": {"trainjob": "TrainJob", "pods": "[Pod]"},
    "error_from_files": {"pods": "[Pod]"},
    "shared_dir_of": {"trainjob": "TrainJob"},
}
# what a reader returns that holds objects: compared by their names
NAMED: dict[str, Callable[[Any], Any]] = {
    "replaced_pods": lambda pairs: [(name_of(old), name_of(new)) for old, new in pairs],
}


def projected(kind: str, value: Any) -> Any:
    """``value`` as the informer's cache holds it: each object projected as its collection's
    kind; kept evidence of a deleted pod is the backend's, never projected (pod_evidence)."""
    if kind.startswith("["):
        if not isinstance(value, list | tuple):
            return value
        return [projected(kind[1:-1], v) for v in value]
    if not isinstance(value, dict) or is_evidence(value):
        return value
    return project(kind, value)


def checked(name: str, reader: Callable[..., Any]) -> Callable[..., Any]:
    """``reader``, which also reads its objects projected and fails on any difference."""
    signature = inspect.signature(reader)
    kinds = READERS[name]
    said = NAMED.get(name, lambda out: out)

    def both(*args: Any, **kwargs: Any) -> Any:
        whole = reader(*args, **kwargs)
        bound = signature.bind(*args, **kwargs)
        for param, kind in kinds.items():
            if param in bound.arguments:
                bound.arguments[param] = projected(kind, bound.arguments[param])
        kept = reader(*bound.args, **bound.kwargs)
        assert said(kept) == said(whole), (
            f"{name} reads the projected objects otherwise:\n whole: {said(whole)}\n"
            f" projected: {said(kept)}")
        return whole

    return both


@contextmanager
def readers_checked(module: Any) -> Iterator[list[str]]:
    """Each reader ``module`` imported, wrapped by ``checked`` while the context lasts."""
    with pytest.MonkeyPatch.context() as patch:
        found = [n for n in READERS if callable(getattr(module, n, None))]
        for name in found:
            patch.setattr(module, name, checked(name, getattr(module, name)))
        yield found
