"""Issue 46, "Misreadings a held-out run found": the node-loss fence's window belongs to the
execution. It starts when that execution is first on a lost node, never before it existed:
after ``restore-node`` the old ``unreachable`` taint stays a moment, and a replacement that
landed there was fenced half a second after it started (its window read from the taint)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_kubeflow_mapping import NOW, job, jobset, pod, row, trainjob

from dispatch.backends.kubeflow.fence import window_start
from dispatch.core.model import CauseKind, State
from kube_fake import schemas
from kube_fake.trainer import builtin_cond, node

T = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


# (lost_at, on_node_at, started_at, now, window start)
WINDOWS = [
    # the node was lost while the execution ran on it: the loss's time
    (at(100), at(0), at(5), at(120), at(100)),
    # a stale taint from before the execution: from when it was on the node...
    (at(0), at(100), None, at(120), at(100)),
    # ...or from its start, when that is later (bound, then its container ran)
    (at(0), at(100), at(101), at(120), at(101)),
    # no time from the API server: this look
    (None, at(0), at(5), at(120), at(120)),
    # a disruption condition: its own time, never before the execution's start
    (at(50), None, at(60), at(120), at(60)),
    (at(50), None, None, at(120), at(50)),
]


@pytest.mark.parametrize(("lost", "on_node", "started", "now", "want"), WINDOWS)
def test_the_window_starts_at_the_loss_never_before_the_execution(
        lost: datetime | None, on_node: datetime | None, started: datetime | None,
        now: datetime, want: datetime) -> None:
    assert window_start(lost, on_node, started, now) == want


times = st.none() | st.integers(0, 10**6).map(at)


@given(lost=times, on_node=times, started=times, now=st.integers(0, 10**6).map(at))
def test_a_window_never_starts_before_its_execution(
        lost: datetime | None, on_node: datetime | None, started: datetime | None,
        now: datetime) -> None:
    start = window_start(lost, on_node, started, now)
    for t in (on_node, started):
        assert t is None or start >= t
    # and never later than it must: the loss itself, or the execution's own first moment
    assert start in {t for t in (lost or now, on_node, started) if t is not None}


def _restored(taint_at: str) -> list[dict[str, Any]]:
    """n2 back after restore-node: Ready again, its unreachable taint not yet removed."""
    n2 = node("n2", lost=True, since=taint_at)
    n2["status"]["conditions"] = [builtin_cond("Ready", "True", "KubeletReady",
                                               at="2026-03-01T10:06:00Z")]
    schemas.validate("Node", n2)
    return [node("n1"), n2]


def test_a_replacement_on_a_node_with_a_stale_taint_is_lost_from_its_own_start() -> None:
    # the replacement's pod was bound at 10:06:30 and its container ran at 10:06:31, on n2
    # whose unreachable taint dates from 10:00: its window starts at 10:06:31, not 10:00
    replacement = pod(0, node_name="n2", state={"running": {"startedAt": "2026-03-01T10:06:31Z"}},
                      conditions=[builtin_cond("PodScheduled", at="2026-03-01T10:06:30Z")])
    report = row(trainjob(), jobset(), [job()], [replacement],
                 _restored("2026-03-01T10:00:00Z"))
    assert report.state is State.RUNNING and report.cause.kind is CauseKind.NODE_LOST
    assert report.lost_since == datetime(2026, 3, 1, 10, 6, 31, tzinfo=UTC), report.lost_since
    assert NOW - report.lost_since < timedelta(seconds=30)


def test_a_pod_bound_to_a_lost_node_is_lost_from_its_bind_while_it_never_ran() -> None:
    stuck = pod(0, node_name="n2", phase="Pending", state={"waiting": {"reason": "Pending"}},
                conditions=[builtin_cond("PodScheduled", at="2026-03-01T10:06:30Z")])
    report = row(trainjob(), jobset(), [job()], [stuck], _restored("2026-03-01T10:00:00Z"))
    assert report.cause.kind is CauseKind.NODE_LOST
    assert report.lost_since == datetime(2026, 3, 1, 10, 6, 30, tzinfo=UTC)
