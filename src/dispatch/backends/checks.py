"""What ``dispatch doctor`` reports: one plain row per check, the same for every backend.

A backend's doctor (backends/<name>/doctor.py) returns these; the command line renders them.
``problem`` means a job cannot run (exit non-zero); ``degraded`` means it runs, but something
dispatch would otherwise see it sees later or not at all (said, never silent).
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass


class Verdict(enum.StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    PROBLEM = "problem"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class Check:
    """One thing looked at: its name, the verdict, what was seen, and what fixes it."""

    name: str
    verdict: Verdict
    detail: str
    fix: str = ""

    def as_json(self) -> dict[str, str]:
        return {"name": self.name, "verdict": self.verdict.value, "detail": self.detail,
                "fix": self.fix}


def all_needed_there(checks: Sequence[Check]) -> bool:
    """Everything a job needs is there: no check found a problem."""
    return not any(c.verdict is Verdict.PROBLEM for c in checks)
