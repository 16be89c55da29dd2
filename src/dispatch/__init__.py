"""dispatch: a state and the cause behind it for every training job, and recovery by cause."""

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

__all__ = [
    "Action",
    "Cause",
    "CauseKind",
    "Declarations",
    "Discovery",
    "Execution",
    "Level",
    "ObjectReport",
    "Plan",
    "PolicyError",
    "Provenance",
    "RecoveryPolicy",
    "Rule",
    "SchedulerUnreachable",
    "State",
    "Status",
]
