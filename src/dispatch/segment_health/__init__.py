"""Segment health decisions (docs/semantics.md#h1 to #h4).

publisher: dispatch marks an allocation unit unavailable (supervisor side).
consumer: a launcher's process 0 checks its unit before rendezvous (one stat, never a read).
launch: the Slurm launch shape the check needs (pure).
reconcile: the outbox: the files follow the record, every supervisor tick (imports the
  record; not imported here, so a launcher's ``segment check`` stays light).
directory: the shared directory, never followed (O_NOFOLLOW through one directory fd).
rendezvous: the torchrun backend ``dispatch-segment-c10d`` (imports torch; not imported here).
"""

from dispatch.segment_health.artifact import (
    DirectoryNotAbsolute,
    InvalidUnitId,
    SegmentHealthError,
    unit_ids,
)
from dispatch.segment_health.consumer import CheckResult, Outcome, SegmentCheck, check, install
from dispatch.segment_health.directory import (
    DirectoryUnusable,
    NotARegularFile,
    SymlinkRefused,
)
from dispatch.segment_health.publisher import (
    InvalidDecision,
    PublishedDecision,
    clear,
    list_decisions,
    make_decision,
    publish,
    read_state,
)
from dispatch.segment_health.state import StateFormatError, StateTooLarge

__all__ = [
    "CheckResult",
    "DirectoryNotAbsolute",
    "DirectoryUnusable",
    "InvalidDecision",
    "InvalidUnitId",
    "NotARegularFile",
    "Outcome",
    "PublishedDecision",
    "SegmentCheck",
    "SegmentHealthError",
    "StateFormatError",
    "StateTooLarge",
    "SymlinkRefused",
    "check",
    "clear",
    "install",
    "list_decisions",
    "make_decision",
    "publish",
    "read_state",
    "unit_ids",
]
