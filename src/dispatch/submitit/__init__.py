"""``import dispatch.submitit as submitit``: submitit 1.5.4's names over dispatch's
Executor (docs/coming-from-submitit.md)."""

from dispatch.submitit import core as core
from dispatch.submitit import helpers as helpers
from dispatch.submitit.core.utils import FailedJobError, UncompletedJobError
from dispatch.submitit.executors import (
    AutoExecutor,
    DebugExecutor,
    Executor,
    LocalExecutor,
    SlurmExecutor,
)
from dispatch.submitit.job import DebugJob, Job
from dispatch.submitit.job_environment import JobEnvironment

LocalJob = Job
SlurmJob = Job
__version__ = "1.5.4"

__all__ = [
    "AutoExecutor",
    "DebugExecutor",
    "DebugJob",
    "Executor",
    "FailedJobError",
    "Job",
    "JobEnvironment",
    "LocalExecutor",
    "LocalJob",
    "SlurmExecutor",
    "SlurmJob",
    "UncompletedJobError",
    "__version__",
    "core",
    "helpers",
]
