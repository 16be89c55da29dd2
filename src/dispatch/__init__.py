"""dispatch: a state and the cause behind it for every training job, and recovery by cause.

The Python API (``submit``, ``get``, ``jobs``, ``Job``; docs/python-api.md), functions as
jobs (``Executor``, ``Checkpointable``, ``Call``, ``FunctionJob``, ``FunctionFailed``;
docs/coming-from-submitit.md), ``fold``,
``project`` and ``__version__`` are imported on first use, so that ``import dispatch`` (and
every CLI command) stays quick.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    Execution,
    Level,
    ObjectReport,
    Provenance,
    SchedulerUnreachable,
    State,
    Status,
)
from dispatch.core.policy import Action, Declarations, Plan, PolicyError, RecoveryPolicy, Rule
from dispatch.errors import (
    BackendError,
    BadInput,
    DispatchError,
    NotFound,
    StateConflict,
    StoreUnusable,
    Unreachable,
)

if TYPE_CHECKING:
    from dispatch.api import HistoryLine, Job, JobFailed, get, jobs, submit
    from dispatch.core.record import fold
    from dispatch.core.status import project
    from dispatch.fn.calls import Call
    from dispatch.fn.checkpoint import Checkpointable
    from dispatch.fn.executor import Executor
    from dispatch.fn.job import FunctionFailed, FunctionJob

DISTRIBUTION = "dispatch-jobs"
_API = frozenset({"HistoryLine", "Job", "JobFailed", "get", "jobs", "submit"})
# Functions as jobs: each name and the module it lives in.
_FN = {"Executor": "dispatch.fn.executor", "Call": "dispatch.fn.calls",
       "Checkpointable": "dispatch.fn.checkpoint", "FunctionFailed": "dispatch.fn.job",
       "FunctionJob": "dispatch.fn.job"}


def __getattr__(name: str) -> Any:
    if name == "fold":
        from dispatch.core.record import fold

        return fold
    if name == "project":
        from dispatch.core.status import project

        return project
    if name in _FN:
        from importlib import import_module

        return getattr(import_module(_FN[name]), name)
    if name in _API:
        from dispatch import api

        return getattr(api, name)
    if name == "__version__":
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version(DISTRIBUTION)
        except PackageNotFoundError:  # run from a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'dispatch' has no attribute {name!r}")


def __dir__() -> list[str]:
    """The lazily imported names too, so tab completion and ``help(dispatch)`` show them."""
    return sorted(set(globals()) | set(__all__))


__all__ = [
    "Action",
    "BackendError",
    "BadInput",
    "Call",
    "Cause",
    "Checkpointable",
    "CauseKind",
    "Declarations",
    "Discovery",
    "DispatchError",
    "Execution",
    "Executor",
    "FunctionFailed",
    "FunctionJob",
    "HistoryLine",
    "Job",
    "JobFailed",
    "Level",
    "NotFound",
    "ObjectReport",
    "Plan",
    "PolicyError",
    "Provenance",
    "RecoveryPolicy",
    "Rule",
    "SchedulerUnreachable",
    "State",
    "StateConflict",
    "Status",
    "StoreUnusable",
    "Unreachable",
    "fold",
    "get",
    "jobs",
    "project",
    "submit",
]
