"""Issue 45 item 16: every failpoint the code defines is armed by some test.

The defined points are the code's: failpoints.KNOWN and every name a call site passes to
``fp.hit``. The armed ones are the crash matrix's parametrization (each action's points,
tests/chaos/test_crash_matrix.py) and the Slurm lane's segment publication
(tests/integration/slurm/test_segment_crash.py, parametrized by SLURM_POINTS). A point
added to the code and to no test fails here, naming it.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.integration.supervision.crash import ACTIONS, SLURM_POINTS

from dispatch.support import failpoints

SRC = Path(failpoints.__file__).parent.parent


def defined() -> set[str]:
    sites = set()
    for path in SRC.rglob("*.py"):
        sites |= set(re.findall(r'fp\.hit\("([^"]+)"\)', path.read_text()))
    assert sites, "no call site found"
    return set(failpoints.KNOWN) | sites


def armed() -> set[str]:
    return {p for a in ACTIONS.values() for p in a.points} | set(SLURM_POINTS)


def test_every_defined_failpoint_is_armed_by_some_test() -> None:
    never = sorted(defined() - armed())
    assert not never, f"failpoints no test arms: {', '.join(never)}"


def test_every_armed_point_is_defined() -> None:
    assert armed() <= set(failpoints.KNOWN), armed() - set(failpoints.KNOWN)
