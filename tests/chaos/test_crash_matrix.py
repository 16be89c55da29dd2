"""Issue 39: the crash matrix. For every failpoint x every action that passes it (submit,
preempt recovery, node-loss fence and gated replacement, a person's cancel, a person's
release and give-up) on the local backend, on SQLite and on a throwaway PostgreSQL: a real
``dispatch supervise`` child runs the action until it dies at the failpoint (its exit status
says it died there), a clean supervisor takes the scope over, and (tests/integration/
supervision/crash.py):

- no two objects carry one token, no runner outlives its object, the record reads back and
  folds;
- the outcome, the number of submissions and the budget spent are the uncrashed run's (the
  budget spent once), so a person's cancel is honoured (cancelled) and a give-up fails;
- the interrupted act is carried out within lease + the backend's submit bound + two ticks
  of the crash.

Deterministic: each child dies at its point, whenever it reaches it; nothing waits for a
window to come by. The matrix is printed (failpoint x action -> seconds to recover).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401  (fixtures)
from tests.integration.supervision.crash import ACTIONS, Run, run

pytestmark = pytest.mark.chaos


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite://{tmp_path / 'record.sqlite3'}"
    return str(request.getfixturevalue("postgres_url"))


def _check(got: Run, uncrashed: Run) -> str | None:
    if got.outcome != uncrashed.outcome:
        return f"outcome {got.outcome}, uncrashed {uncrashed.outcome}"
    if got.action == "cancel" and got.outcome[0] != "cancelled":
        return f"the person's cancel not honoured: {got.outcome}"
    if got.recovery_s > got.bound_s:
        return f"recovered {got.recovery_s:.2f}s after the crash > {got.bound_s:.2f}s"
    return None


def test_every_failpoint_of_every_action(url: str, tmp_path: Path) -> None:
    results: list[tuple[str, str, str]] = []
    failures: list[str] = []
    for action in ACTIONS.values():
        uncrashed = run(url, tmp_path / action.name / "uncrashed", action.name, None)
        results.append((action.name, "(uncrashed)", "/".join(map(str, uncrashed.outcome))))
        for point in action.points:
            base = tmp_path / action.name / point.replace(":", "-")
            try:
                got = run(url, base, action.name, point)
            except AssertionError as err:  # one window's failure never hides the others'
                failures.append(f"{action.name} x {point}: {err}")
                results.append((action.name, point, "FAIL"))
                continue
            problem = _check(got, uncrashed)
            if problem is not None:
                failures.append(f"{action.name} x {point}: {problem}")
            results.append((action.name, point, "FAIL" if problem else
                            f"pass {got.recovery_s:5.2f}s <= {got.bound_s:.2f}s"
                            + (f" ({'; '.join(got.notes)})" if got.notes else "")))
    print(f"\ncrash matrix ({url.partition(':')[0]}): failpoint x action -> recovery")
    for action_name, point, verdict in results:
        print(f"  {point:28} x {action_name:10} -> {verdict}")
    assert not failures, "\n".join(failures)
    assert sum(1 for r in results if r[2].startswith("pass")) == sum(
        len(a.points) for a in ACTIONS.values())
