"""Goodput and badput by cause, from the record alone (G1-G4; pure, ``now`` passed in).

G1 A job's wall time, from its creation to its committed outcome (or ``now``), is cut into
   segments, each in one phase: queued, running, recovering (by the cause of the end it
   recovers from), held (by the hold's cause), stopping (a run being stopped) or settling
   (no run left, the outcome not yet committed). The segments tile the wall time: their
   lengths sum to it exactly (integer microseconds, no rounding).
G2 Node-time: each segment is weighted by the nodes it holds: a running segment by the nodes
   its execution started on (ExecutionStarted.nodes), a held one by none (the job waits for
   a person, not for nodes: its time is time to result, never node-time), every other by
   the nodes the job asks.
G3 Lost work: once the training has reported a durable checkpoint (CheckpointRecorded), an
   end other than success loses the run since the later of the run's start and the latest
   checkpoint before the end; it is charged to that end's cause.
G4 Goodput = (running - lost work) / wall, in node-time; badput of a cause = its recovering
   and held time plus the lost work charged to it.

Two denominators, never confused: time to result (the wall time times the nodes, every
phase: what a person waited) and allocated node-time (only the phases in which the
scheduler held nodes: running and stopping; never queued, recovering, held or settling). A
job held for a day costs a day of time to result and no node-time.

Event times are kept in order for the split: a boundary earlier than the one before it counts
as that one, so a record whose clocks disagree still splits exactly; the wall time ends at the
outcome's boundary (or ``now``, or the last boundary if ``now`` is before it).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum

import msgspec

from dispatch.core import events as ev
from dispatch.core.model import CauseKind

ZERO = timedelta(0)


class Phase(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    RECOVERING = "recovering"
    HELD = "held"
    STOPPING = "stopping"  # a run being stopped: its nodes are still held
    SETTLING = "settling"  # no run left (it ended, or never ran): the outcome is not committed


class Segment(msgspec.Struct, frozen=True, gc=False):
    """[start, end) of the job's wall time spent in one phase, for one cause, on ``nodes``.
    A msgspec struct: a /metrics build makes a few per job, and a frozen dataclass cost
    ten times as much to make."""

    start: datetime
    end: datetime
    phase: Phase
    cause: CauseKind
    nodes: int


class JobTime(msgspec.Struct, frozen=True):
    """One job's wall time, cut into segments (G1) and its lost work (G3, also segments:
    phase running, inside a running segment, charged to the end's cause)."""

    job_id: str
    backend: str
    user: str
    start: datetime
    end: datetime
    settled: bool
    segments: tuple[Segment, ...]
    lost: tuple[Segment, ...]
    # How many segments the record's events closed: the rest (at most one) runs to ``now``
    # and may still change phase, so counters (/metrics) leave it out.
    closed: int = 0
    gpus_per_node: int = 0  # the spec's slurm.gpus_per_node; 0: the spec does not say
    name: str = ""  # the spec's name (a person reads a job by it)


def _clamp(t: datetime, low: datetime, high: datetime) -> datetime:
    return low if t < low else high if t > high else t


class _Cutter:
    """Walks a record once; each phase change closes the open segment."""

    __slots__ = ("at", "phase", "cause", "nodes", "job_nodes", "segments", "lost",
                 "run_start", "run_key", "checkpoint", "reports", "window", "ran_until",
                 "recovery_acted", "held_run")

    def __init__(self, start: datetime, job_nodes: int, window: timedelta) -> None:
        self.at = start
        self.phase = Phase.QUEUED
        self.cause = CauseKind.NONE
        self.job_nodes = job_nodes
        self.nodes = job_nodes
        self.segments: list[Segment] = []
        self.lost: list[Segment] = []
        self.run_start: datetime | None = None
        self.run_key: tuple[int, int] | None = None  # (submission, execution) running
        self.checkpoint: datetime | None = None  # the latest checkpoint's time
        self.reports = False  # the training reported a checkpoint at least once
        self.window = window
        self.ran_until: datetime | None = None  # when the running phase was left
        # Whether anything recovered since the last end (a recovery, a submission): an end
        # that nothing recovered from before the outcome was never recovering (issue 48).
        self.recovery_acted = True
        # Held because someone's hold ended the run (core/held_runs.py): the next start of
        # the same submission runs again.
        self.held_run = False

    def move(self, t: datetime, phase: Phase, cause: CauseKind, nodes: int | None = None
             ) -> datetime:
        t = max(t, self.at)
        if self.phase is Phase.RUNNING and phase is not Phase.RUNNING:
            self.ran_until = t
        if t > self.at:
            self.segments.append(Segment(self.at, t, self.phase, self.cause, self.nodes))
        self.at = t
        self.phase, self.cause = phase, cause
        self.nodes = (0 if phase is Phase.HELD else self.job_nodes if nodes is None
                      else max(1, nodes))
        return t

    def end_run(self, t: datetime, phase: Phase, cause: CauseKind) -> None:
        start, nodes = self.run_start, self.nodes
        self.move(t, phase, cause)
        stop = self.ran_until
        if (start is not None and stop is not None and self.reports
                and cause is not CauseKind.NONE):
            since = max(start, self.checkpoint) if self.checkpoint is not None else start
            since = _clamp(since, start, stop)
            if stop > since:
                self.lost.append(Segment(since, stop, Phase.RUNNING, cause, nodes))
        self.run_start, self.run_key = None, None


def _end_time(e: ev.ExecutionEnded, window: timedelta) -> datetime:
    """When the run ended: a fenced end (S11) ended when the node was lost, one window before
    the fence; else the scheduler's time for the end when it gave one, else the event's."""
    c = e.cause
    if c.kind is CauseKind.NODE_LOST and c.note.startswith("fenced"):
        return e.at - window
    return c.at if c.at is not None and c.at <= e.at else e.at


def job_time(record: Sequence[ev.Event], now: datetime) -> JobTime:
    """G1-G3 for one record (which starts with its JobCreated; fold has checked it)."""
    created = record[0]
    assert isinstance(created, ev.JobCreated)
    cut = _Cutter(created.at, created.spec.nodes, created.declarations.node_loss_window)
    current = 0
    settled = False
    for e in record[1:]:
        if isinstance(e, ev.OutcomeCommitted) and e.state.terminal:
            if cut.run_start is not None:
                cut.end_run(e.at, Phase.STOPPING, e.cause.kind)
            else:
                if cut.phase is Phase.RECOVERING and not cut.recovery_acted:
                    cut.phase = Phase.SETTLING  # an end nothing recovered from
                cut.move(e.at, cut.phase, cut.cause, cut.nodes)
            settled = True
            break
        _apply(cut, e, current)
        if isinstance(e, ev.SubmissionIntended):
            current = max(current, e.submission)
    closed = len(cut.segments)
    if not settled:
        cut.move(now, cut.phase, cut.cause, cut.nodes)
    gpus = created.spec.slurm.get("gpus_per_node")
    return JobTime(job_id=created.job_id, backend=created.spec.backend,
                   user=created.actor or "", start=created.at, end=cut.at, settled=settled,
                   segments=tuple(cut.segments), lost=tuple(cut.lost), closed=closed,
                   name=created.spec.name,
                   gpus_per_node=gpus if type(gpus) is int and gpus > 0 else 0)


# Tuples, built once: ``isinstance(e, A | B)`` builds the union at every call, which cost
# more than the rest of a short record's walk (issue 49: /metrics reads every changed job).
_ACTS = (ev.SubmissionIntended, ev.RecoveryStarted, ev.HoldPlaced, ev.HoldReleased)
_STOPS = (ev.CancelRequested, ev.GiveUpRequested)


def _apply(cut: _Cutter, e: ev.Event, current: int) -> None:  # noqa: C901 - one per event
    if isinstance(e, _ACTS):
        cut.recovery_acted = True
    if isinstance(e, ev.SubmissionIntended):
        if e.submission > current and cut.phase is Phase.RUNNING:
            # A new submission while one ran (a replacement after a fence): that run is over.
            cut.end_run(e.at, Phase.RECOVERING, e.cause.kind if e.cause else cut.cause)
    elif isinstance(e, ev.ExecutionStarted):
        if e.submission == current and (cut.phase in (Phase.QUEUED, Phase.RECOVERING)
                                        or (cut.phase is Phase.HELD and cut.held_run)):
            at = e.started if e.started is not None and e.started <= e.at else e.at
            if cut.held_run and at < cut.at:
                at = e.at  # dated before the hold: the same processes went on (a Slurm suspend)
            cut.held_run = False
            cut.run_start = cut.move(at, Phase.RUNNING, CauseKind.NONE, e.nodes)
            cut.run_key = (e.submission, e.execution)
        elif (e.submission == current and cut.phase is Phase.SETTLING and cut.run_start is None
              and cut.cause is CauseKind.CANCELLED):
            # A run that started after the cancel (it was queued when the cancel came) holds
            # its nodes until its end is seen: stopping, allocated (issue 47 item 7).
            at = e.started if e.started is not None and e.started <= e.at else e.at
            cut.run_start = cut.move(at, Phase.STOPPING, CauseKind.CANCELLED, e.nodes)
            cut.run_key = (e.submission, e.execution)
    elif isinstance(e, ev.CheckpointRecorded):
        cut.reports = True
        written = _clamp(e.written, cut.checkpoint or e.written, e.at)
        cut.checkpoint = written
    elif isinstance(e, ev.ExecutionEnded):
        if e.submission != current or cut.phase is Phase.HELD:
            return
        kind = e.cause.kind
        # After a final success or cancel the nodes are released: settling, never allocated
        # (issue 48: the wait for the commit counted as allocated node-time).
        after = (Phase.SETTLING if kind in (CauseKind.NONE, CauseKind.CANCELLED)
                 and e.final else Phase.RECOVERING)
        if kind is CauseKind.HELD and not e.final:
            after = Phase.HELD  # someone's hold ended the run: held, until it runs again
        if cut.run_key is not None and cut.run_key != (e.submission, e.execution):
            return  # the end of an execution that is not the one running
        if cut.phase in (Phase.STOPPING, Phase.SETTLING):
            cut.end_run(_end_time(e, cut.window), Phase.SETTLING, cut.cause)
        else:
            if after is Phase.RECOVERING:
                cut.recovery_acted = False
            cut.end_run(_end_time(e, cut.window), after, kind)
            cut.held_run = after is Phase.HELD
    elif isinstance(e, ev.SubmissionRejected):
        if e.submission == current and cut.phase not in (Phase.STOPPING, Phase.SETTLING):
            cut.move(e.at, Phase.RECOVERING, e.cause.kind)
    elif isinstance(e, ev.RecoveryStarted):
        if cut.phase not in (Phase.RUNNING, Phase.STOPPING, Phase.SETTLING):
            cut.move(e.at, Phase.RECOVERING, e.cause.kind)
    elif isinstance(e, ev.HoldPlaced):
        cut.held_run = False  # dispatch's hold: a person resolves it by resubmitting
        if cut.run_start is not None:
            cut.end_run(e.at, Phase.HELD, e.cause.kind)
        else:
            cut.move(e.at, Phase.HELD, e.cause.kind)
    elif isinstance(e, ev.HoldReleased):
        if cut.phase is Phase.HELD:
            cut.move(e.at, Phase.RECOVERING, cut.cause)
    elif isinstance(e, _STOPS):
        if cut.phase not in (Phase.STOPPING, Phase.SETTLING):
            if cut.run_start is None:  # nothing runs: no nodes to release
                cut.move(e.at, Phase.SETTLING, CauseKind.CANCELLED)
            else:  # a run being stopped: its nodes stay held until its end is seen
                cut.move(e.at, Phase.STOPPING, CauseKind.CANCELLED, cut.nodes)


# The phases in which the scheduler holds the job's nodes (allocated node-time); settling
# (the run is over, the outcome not yet committed) is not one of them.
ALLOCATED = (Phase.RUNNING, Phase.STOPPING)


@dataclass(slots=True)
class Split:
    """G1-G4 totals. ``wall``/``parts``: time; ``node_*``: node-time (G2). Keys of ``parts``:
    (phase, cause); ``lost``: by the cause charged (G3)."""

    jobs: int = 0
    wall: timedelta = ZERO
    node_wall: timedelta = ZERO
    parts: dict[tuple[Phase, CauseKind], timedelta] = field(default_factory=dict)
    node_parts: dict[tuple[Phase, CauseKind], timedelta] = field(default_factory=dict)
    lost: dict[CauseKind, timedelta] = field(default_factory=dict)
    node_lost: dict[CauseKind, timedelta] = field(default_factory=dict)
    # GPU-time (G2, where the spec gives GPUs per node): node-time times GPUs per node.
    gpu_parts: dict[tuple[Phase, CauseKind], timedelta] = field(default_factory=dict)
    gpu_lost: dict[CauseKind, timedelta] = field(default_factory=dict)

    def phase(self, phase: Phase, *, nodes: bool = True) -> timedelta:
        parts = self.node_parts if nodes else self.parts
        return sum((v for (p, _), v in parts.items() if p is phase), ZERO)

    def lost_total(self, *, nodes: bool = True) -> timedelta:
        return sum((self.node_lost if nodes else self.lost).values(), ZERO)

    def good(self, *, nodes: bool = True) -> timedelta:
        return self.phase(Phase.RUNNING, nodes=nodes) - self.lost_total(nodes=nodes)

    def goodput(self, *, nodes: bool = True) -> float | None:
        """G4: useful over wall (node-time by default); None for no wall time."""
        wall = self.node_wall if nodes else self.wall
        return None if wall <= ZERO else self.good(nodes=nodes) / wall

    def allocated(self) -> timedelta:
        """Allocated node-time: only the phases in which the scheduler held nodes (running,
        stopping); never queued, recovering, held or settling."""
        return sum((self.phase(p) for p in ALLOCATED), ZERO)

    def allocated_goodput(self) -> float | None:
        """Useful node-time over allocated node-time; None when nothing was allocated."""
        alloc = self.allocated()
        return None if alloc <= ZERO else self.good() / alloc

    def badput(self, *, nodes: bool = True) -> dict[CauseKind, timedelta]:
        """G4: per cause, recovering and held time plus the lost work charged to it."""
        out: dict[CauseKind, timedelta] = {}
        for (p, c), v in (self.node_parts if nodes else self.parts).items():
            if p in (Phase.RECOVERING, Phase.HELD):
                out[c] = out.get(c, ZERO) + v
        for c, v in (self.node_lost if nodes else self.lost).items():
            out[c] = out.get(c, ZERO) + v
        return out

    def add(self, other: Split) -> None:
        self.jobs += other.jobs
        self.wall += other.wall
        self.node_wall += other.node_wall
        for mine, theirs in ((self.parts, other.parts), (self.node_parts, other.node_parts),
                             (self.gpu_parts, other.gpu_parts)):
            for k, v in theirs.items():
                mine[k] = mine.get(k, ZERO) + v
        for mine_l, theirs_l in ((self.lost, other.lost), (self.node_lost, other.node_lost),
                                 (self.gpu_lost, other.gpu_lost)):
            for c, v in theirs_l.items():
                mine_l[c] = mine_l.get(c, ZERO) + v


def _clip(s: Segment, low: datetime | None, high: datetime | None) -> timedelta:
    a = s.start if low is None or s.start > low else low
    b = s.end if high is None or s.end < high else high
    return b - a if b > a else ZERO


def split(jt: JobTime, since: datetime | None = None,
          until: datetime | None = None) -> Split:
    """A job's split, counting only the part of its wall time within [since, until)."""
    out = Split(jobs=1)
    for s in jt.segments:
        d = _clip(s, since, until)
        if d:
            key = (s.phase, s.cause)
            out.parts[key] = out.parts.get(key, ZERO) + d
            out.node_parts[key] = out.node_parts.get(key, ZERO) + d * s.nodes
            out.wall += d
            out.node_wall += d * s.nodes
            if jt.gpus_per_node:
                out.gpu_parts[key] = out.gpu_parts.get(key, ZERO) + d * s.nodes \
                    * jt.gpus_per_node
    for s in jt.lost:
        d = _clip(s, since, until)
        if d:
            out.lost[s.cause] = out.lost.get(s.cause, ZERO) + d
            out.node_lost[s.cause] = out.node_lost.get(s.cause, ZERO) + d * s.nodes
            if jt.gpus_per_node:
                out.gpu_lost[s.cause] = out.gpu_lost.get(s.cause, ZERO) + d * s.nodes \
                    * jt.gpus_per_node
    return out


class By(StrEnum):
    CAUSE = "cause"
    JOB = "job"
    BACKEND = "backend"
    USER = "user"


def fleet(jobs: Iterable[JobTime], by: By | None, since: datetime | None = None,
          until: datetime | None = None) -> dict[str, Split]:
    """Totals over many jobs, grouped by job, backend or user ("" when ``by`` is None or
    cause: the split itself holds the causes). Jobs with no time in the window are left out."""
    out: dict[str, Split] = {}
    for jt in jobs:
        if since is not None and jt.end < since:
            continue
        part = split(jt, since, until)
        if not part.wall:
            continue
        key = (jt.job_id if by is By.JOB else jt.backend if by is By.BACKEND
               else jt.user if by is By.USER else "")
        out.setdefault(key, Split()).add(part)
    return out
