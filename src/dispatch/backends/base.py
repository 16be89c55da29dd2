"""The one small interface every backend implements (the shape of TorchX's schedulers).

A backend reports objects; it never computes a job's state (S10). Every call that cannot
reach its scheduler raises ``SchedulerUnreachable``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import msgspec

from dispatch.model import Discovery
from dispatch.policy import Declarations
from dispatch.spec import JobSpec


class Submission(msgspec.Struct, frozen=True, kw_only=True):
    """One submission of a job: the backend stores ``token`` with the object it creates."""

    job_id: str
    number: int
    token: str
    spec: JobSpec
    gated: bool = False
    # Nodes to keep this submission off (the job's segment-health exclusions): Slurm --exclude.
    exclude_nodes: tuple[str, ...] = ()


class SubmitRejected(Exception):
    """The scheduler answered and refused the object (e.g. sbatch error). Carries its words."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class Backend(Protocol):
    name: str

    def declarations(self) -> Declarations: ...

    def submit(self, submission: Submission) -> str:
        """Create the object and return its ref. Must be safe to call again with the same
        token only after discovery showed no object carrying it."""
        ...

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        """One batched look at every object of the tick: the objects carrying any of
        ``tokens`` (found even when the record never learnt their ref) and the objects
        ``refs``. A ref the scheduler no longer knows must still be reported (ended)."""
        ...

    def stop(self, ref: str) -> None:
        """Stop the object on the supervisor's behalf (fence, duplicate, spent budget)."""
        ...

    def cancel(self, ref: str) -> None:
        """Cancel the object because a person asked to."""
        ...

    def open_gate(self, ref: str) -> None:
        """Let a gated object start (Slurm: scontrol release; TrainJob: suspend false)."""
        ...
