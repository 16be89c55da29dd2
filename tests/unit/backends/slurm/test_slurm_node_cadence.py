"""When the tick reads nodes (issue 14): ``nodes.node_read_due`` as a table and as properties,
and the backend's node reads over a sequence of ticks against recorded tool output.

Every Slurm client that reads nodes also reads partitions (2 slurmctld RPCs), so a tick reads
them only when due: never read, a held node missing from the last read or unhealthy there,
the clock went back, or ``node_interval`` passed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.backends.slurm.node_health import node_unhealthy
from dispatch.backends.slurm.nodes import node_read_due, parse_scontrol_nodes
from dispatch.backends.slurm.parse import NodeInfo
from dispatch.backends.slurm.tools import Result
from dispatch.core.model import CauseKind as K
from dispatch.core.model import State as S

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "slurm"
T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
EVERY = timedelta(seconds=15)


def node(name: str, state: str = "IDLE", *flags: str) -> NodeInfo:
    return NodeInfo(name=name, state=state, flags=flags, reason="", reason_at=None,
                    reason_by=None)


HEALTHY = {"n1": node("n1", "ALLOCATED"), "n2": node("n2", "MIXED")}


@pytest.mark.parametrize(("held", "last", "read_at", "now", "due", "why"), [
    (set(), {}, None, T0, False, "nothing held: no node read, ever"),
    (set(), HEALTHY, T0, T0 + timedelta(hours=1), False, "nothing held, however old"),
    ({"n1"}, {}, None, T0, True, "never read"),
    ({"n1"}, HEALTHY, T0, T0, False, "read this instant, healthy"),
    ({"n1", "n2"}, HEALTHY, T0, T0 + EVERY - timedelta(microseconds=1), False, "not yet due"),
    ({"n1"}, HEALTHY, T0, T0 + EVERY, True, "interval passed"),
    ({"n1", "n3"}, HEALTHY, T0, T0 + timedelta(seconds=1), True, "a job got a new node"),
    ({"n1"}, {"n1": node("n1", "ALLOCATED", "NOT_RESPONDING")}, T0, T0 + timedelta(seconds=1),
     True, "a held node was lost: watched every tick"),
    ({"n1"}, {"n1": node("n1", "MIXED", "DRAIN")}, T0, T0 + timedelta(seconds=1), True,
     "a held node was draining: watched every tick"),
    ({"n1"}, {**HEALTHY, "n9": node("n9", "DOWN")}, T0, T0 + timedelta(seconds=1), False,
     "a node none of ours holds is nobody's business"),
    ({"n1"}, HEALTHY, T0, T0 - timedelta(seconds=1), True, "the clock went back"),
])
def test_node_read_due(held: set[str], last: dict[str, NodeInfo], read_at: datetime | None,
                       now: datetime, due: bool, why: str) -> None:
    assert node_read_due(held, last, read_at, now, EVERY) is due, why


NAMES = st.sampled_from(["n1", "n2", "n3", "n4"])
NODES = st.builds(node, NAMES, st.sampled_from(["IDLE", "ALLOCATED", "MIXED", "DOWN", "DRAIN"]),
                  st.sampled_from(["NOT_RESPONDING", "DRAIN", "COMPLETING", "RESERVED"]))


@given(held=st.sets(NAMES), last=st.lists(NODES), read=st.none() | st.integers(0, 100),
       now=st.integers(0, 100), every=st.integers(1, 60))
def test_a_skipped_read_stands_only_for_a_recent_healthy_view_of_every_held_node(
        held: set[str], last: list[NodeInfo], read: int | None, now: int, every: int) -> None:
    view = {n.name: n for n in last}
    read_at = None if read is None else T0 + timedelta(seconds=read)
    at = T0 + timedelta(seconds=now)
    interval = timedelta(seconds=every)
    due = node_read_due(held, view, read_at, at, interval)
    if not held:
        assert not due
    elif not due:
        assert read_at is not None and timedelta(0) <= at - read_at < interval
        assert all(n in view and not node_unhealthy(view[n]) for n in held)
    if due and read_at is not None and at >= read_at:  # later is due too: never put off again
        assert node_read_due(held, view, read_at, at + timedelta(seconds=1), interval)


class Tools:
    """squeue and scontrol answers from recorded 22.05 output; node answers may change."""

    def __init__(self, squeue: str, nodes: str, sacct: str = "") -> None:
        self.squeue, self.nodes, self.sacct = squeue, nodes, sacct
        self.node_reads = 0

    def __call__(self, argv: list[str], timeout: float) -> Result:
        if argv[0] == "squeue":
            return Result(tuple(argv), 0, self.squeue, "")
        if argv[:3] == ["scontrol", "show", "node"]:
            self.node_reads += 1  # Slurm answers for the nodes asked for only
            asked = tuple(f"NodeName={n} " for n in argv[-1].split(","))
            lines = [ln for ln in self.nodes.splitlines(keepends=True) if ln.startswith(asked)]
            return Result(tuple(argv), 0, "".join(lines), "")
        if argv[0] == "sacct" and self.sacct:
            return Result(tuple(argv), 0, self.sacct, "")
        raise AssertionError(f"unexpected call {argv}")


IDLE = (FIX / "idle.scontrol-node.txt").read_text()
# The same real lines, n3 (job 90's node) gone from slurmd's answers.
N3_LOST = "".join(line.replace("State=IDLE ", "State=DOWN+NOT_RESPONDING ", 1)
                  if line.startswith("NodeName=n3 ") else line
                  for line in IDLE.splitlines(keepends=True))
RUNNING = (FIX / "22.05" / "released.squeue.txt").read_text()  # 90 RUNNING on n3


def test_the_fixture_edit_loses_exactly_n3() -> None:
    lost = {n.name for n in parse_scontrol_nodes(N3_LOST) if node_unhealthy(n)}
    assert lost == {"n3"}


def test_ticks_read_nodes_when_due_and_a_lost_node_is_seen_within_the_interval(
        tmp_path: Path) -> None:
    tools = Tools(RUNNING, IDLE)
    clock = [T0]
    b = SlurmBackend(runner=tools, clock=lambda: clock[0], output_dir=tmp_path, user="alice",
                     node_interval=EVERY)

    def tick(after: float) -> tuple[S, K]:
        clock[0] += timedelta(seconds=after)
        (obj,) = b.discover((), ("90",)).objects
        return obj.state, obj.cause.kind

    assert tick(0) == (S.RUNNING, K.NONE) and tools.node_reads == 1
    assert tick(5) == (S.RUNNING, K.NONE) and tools.node_reads == 1  # steady: squeue only
    tools.nodes = N3_LOST  # the node is lost now; the last read still stands
    assert tick(5) == (S.RUNNING, K.NONE) and tools.node_reads == 1
    assert tick(5) == (S.RUNNING, K.NODE_LOST) and tools.node_reads == 2  # 15 s: due
    assert "n3" in b.unhealthy_nodes()
    assert tick(1) == (S.RUNNING, K.NODE_LOST) and tools.node_reads == 3  # watched each tick
    tools.nodes = IDLE
    assert tick(1) == (S.RUNNING, K.NONE) and tools.node_reads == 4  # back: seen at once
    assert tick(1) == (S.RUNNING, K.NONE) and tools.node_reads == 4  # and steady again
    assert b.calls["squeue"] == 7


def test_a_job_on_new_nodes_is_read_at_once_and_an_ended_one_not_at_all(tmp_path: Path) -> None:
    tools = Tools(RUNNING, IDLE)
    clock = [T0]
    b = SlurmBackend(runner=tools, clock=lambda: clock[0], output_dir=tmp_path, user="alice",
                     node_interval=EVERY)
    b.discover((), ("90",))
    assert tools.node_reads == 1
    tools.squeue = RUNNING.replace("|n3|", "|n4|")  # requeued and started on n4: a new node
    clock[0] += timedelta(seconds=1)
    b.discover((), ("90",))
    assert tools.node_reads == 2
    ended = (FIX / "22.05" / "completed.squeue.txt").read_text()  # COMPLETED, still listed
    fresh = Tools(ended, IDLE, (FIX / "22.05" / "completed.sacct-D.txt").read_text())
    SlurmBackend(runner=fresh, clock=lambda: T0, output_dir=tmp_path, user="alice").discover(
        (), (ended.split("|", 1)[0],))
    assert fresh.node_reads == 0


def test_the_default_interval_is_a_quarter_of_the_loss_window_at_most_30_s() -> None:
    assert SlurmBackend(node_loss_window=timedelta(seconds=60)).node_interval == EVERY
    assert SlurmBackend(node_loss_window=timedelta(minutes=10)).node_interval == \
        timedelta(seconds=30)


def test_the_interval_comes_from_the_environment_strictly(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    from dispatch.backends.registry import BackendConfigError, make_backend

    monkeypatch.delenv("DISPATCH_SLURM_NODE_LOSS_WINDOW", raising=False)
    monkeypatch.setenv("DISPATCH_SLURM_NODE_INTERVAL", "5s")
    backend = make_backend("slurm")
    assert isinstance(backend, SlurmBackend) and backend.node_interval == timedelta(seconds=5)
    monkeypatch.setenv("DISPATCH_SLURM_NODE_INTERVAL", "soon")
    with pytest.raises(BackendConfigError, match="DISPATCH_SLURM_NODE_INTERVAL"):
        make_backend("slurm")
    monkeypatch.delenv("DISPATCH_SLURM_NODE_INTERVAL")
    backend = make_backend("slurm")
    assert isinstance(backend, SlurmBackend) and backend.node_interval == EVERY  # 60 s / 4
