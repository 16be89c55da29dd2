"""submitit's ``core`` names: ``submitit.core.utils.FailedJobError`` and friends resolve here
as they do in submitit 1.5.4."""

from dispatch.submitit.core import utils as utils
from dispatch.submitit.core.utils import (
    DelayedSubmission,
    FailedJobError,
    JobPaths,
    UncompletedJobError,
)

__all__ = ["DelayedSubmission", "FailedJobError", "JobPaths", "UncompletedJobError", "utils"]
