"""The outbox for published decisions (issue 12 item 4): the record says, the files follow.

The supervisor appends SegmentPublished (its intent) before it writes the artifact. If the
write fails or the supervisor dies in between, the record claims a publication that is not
on disk. So the files are not written once and trusted: every tick, for every live job with
segment decisions, ``reconcile`` compares the record with the directory and writes what is
missing or stale, until they match.

``plan_reconcile`` is the pure half: the job's folded decisions and what the directory holds
in, the writes (and the refusals and overflows) out. ``reconcile`` is the shell: it lists
the directory (one listdir and one state read per unit job), and only when something is
to be written takes the per-job locks, reads the record again under them (an operator's
``clear`` removes the file and records "cleared" under the same lock, so a stale view never
writes back a decision just cleared), plans again and writes.

What it never does: remove a file. A per-unit file the record does not hold is left alone
(another publisher may own it, and the seed allows several); clearing is a person's act.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from dispatch.core.record import Job, SegmentDecision
from dispatch.segment_health.artifact import (
    SegmentHealthError,
    absolute_directory,
    is_slurm_id,
    numeric_key,
    parse_unit_filename,
    state_filename,
    unit_filename,
)
from dispatch.segment_health.directory import DecisionDirectory, kind_of, open_directory
from dispatch.segment_health.publisher import encode_decision, make_decision
from dispatch.segment_health.state import MAX_STATE_LINE_BYTES, encode_state_within_limit

# The artifact's cause word for a decision the record holds without one (SegmentPublished
# carries no cause field); the supervisor passes the word it decided on when it has it.
RECORDED_CAUSE = "recorded-decision"


@dataclass(frozen=True)
class Entry:
    """One directory entry as lstat sees it (a link is a link, never what it names)."""

    kind: str  # directory.kind_of: "regular file", "symbolic link", "directory", ...
    size: int

    @property
    def excludes(self) -> bool:
        return self.kind == "regular file" and self.size > 0


@dataclass(frozen=True)
class UnitWrite:
    decision: SegmentDecision
    why: str  # "missing" | "zero-byte"


@dataclass(frozen=True)
class StateWrite:
    unit_job_id: str
    content: bytes
    why: str  # "missing" | "stale"


@dataclass(frozen=True)
class Refusal:
    name: str
    why: str


@dataclass(frozen=True)
class Overflow:
    unit_job_id: str
    size: int  # bytes the full line would take
    count: int  # tasks excluded
    kept: int  # tasks the written line lists

    @property
    def message(self) -> str:
        return (
            f"segment health: the state line of unit job {self.unit_job_id} would be "
            f"{self.size} bytes for {self.count} excluded tasks, over its "
            f"{MAX_STATE_LINE_BYTES}-byte limit; it lists the first {self.kept}, and every "
            "excluded task still has its per-unit file"
        )


@dataclass(frozen=True)
class Plan:
    units: tuple[UnitWrite, ...] = ()
    states: tuple[StateWrite, ...] = ()
    refused: tuple[Refusal, ...] = ()
    overflows: tuple[Overflow, ...] = ()

    @property
    def writes(self) -> bool:
        return bool(self.units or self.states)


def plan_reconcile(
    decisions: Iterable[SegmentDecision],
    listing: Mapping[str, Entry],
    states: Mapping[str, bytes],
) -> Plan:
    """What to write so the directory says what the record says. Pure.

    ``listing``: every entry of the directory (name -> Entry); ``states``: the first
    MAX_STATE_LINE_BYTES + 1 bytes of each regular state file of the decisions' unit jobs.
    A decision's per-unit file must be a non-empty regular file; each unit job's state line
    must list its recorded tasks and every other per-unit file that excludes (H4: in step
    with the per-unit files). A link, directory or other entry under a name to be written is
    refused, never replaced.
    """
    ordered = sorted(decisions, key=lambda d: (numeric_key(d.unit_job_id),
                                               numeric_key(d.task_id)))
    units: list[UnitWrite] = []
    refused: list[Refusal] = []
    recorded: dict[str, set[str]] = {}
    for d in ordered:
        try:
            name = unit_filename(d.unit_job_id, d.task_id)
        except SegmentHealthError as err:  # a record naming no Slurm unit: say so, go on
            refused.append(Refusal(f"{d.unit_job_id}.{d.task_id}", str(err)))
            continue
        recorded.setdefault(d.unit_job_id, set()).add(d.task_id)
        entry = listing.get(name)
        if entry is None:
            units.append(UnitWrite(d, "missing"))
        elif entry.kind != "regular file":
            refused.append(Refusal(name, f"is a {entry.kind}, not a regular file"))
        elif entry.size == 0:
            units.append(UnitWrite(d, "zero-byte"))
    on_disk: dict[str, set[str]] = {}
    for name, entry in listing.items():
        ids = parse_unit_filename(name)
        if ids is not None and entry.excludes:
            on_disk.setdefault(ids[0], set()).add(ids[1])
    writes: list[StateWrite] = []
    overflows: list[Overflow] = []
    for unit_job in sorted(recorded, key=numeric_key):
        excluded = recorded[unit_job] | on_disk.get(unit_job, set())
        line, overflow = encode_state_within_limit(excluded, job_id=unit_job)
        if overflow is not None:
            kept = line.count(b'"') // 2
            overflows.append(Overflow(unit_job, overflow.size, overflow.count, kept))
        name = state_filename(unit_job)
        entry = listing.get(name)
        if entry is None:
            writes.append(StateWrite(unit_job, line, "missing"))
        elif entry.kind != "regular file":
            refused.append(Refusal(name, f"is a {entry.kind}, not a regular file"))
        elif states.get(name) != line:
            writes.append(StateWrite(unit_job, line, "stale"))
    return Plan(tuple(units), tuple(writes), tuple(refused), tuple(overflows))


@dataclass(frozen=True)
class Reconciled:
    """What one reconcile did, and what a person must hear about."""

    written: tuple[str, ...] = ()
    refused: tuple[Refusal, ...] = ()
    overflows: tuple[Overflow, ...] = ()

    @property
    def escalations(self) -> list[str]:
        """Messages for the escalation path: stable while the condition lasts (deduplicable)."""
        return [f"segment health: cannot write {r.name}: {r.why}" for r in self.refused] \
            + [o.message for o in self.overflows]


def reconcile(
    job: Job,
    *,
    reread: Callable[[], Job] | None = None,
    causes: Mapping[tuple[str, str], str] | None = None,
) -> Reconciled:
    """Write the job's missing or stale decision files; idempotent, cheap when in step.

    ``reread`` gives the job as its record says now; it is called under the locks before
    anything is written (without it ``job`` is trusted). ``causes`` names the artifact's
    cause word per (unit job, task) where the caller knows it. Raises DirectoryUnusable, or
    OSError from the disk: the caller retries next tick.
    """
    if job.spec.segment_health is None or not job.segments:
        return Reconciled()
    root = absolute_directory(job.spec.segment_health.dir)
    with open_directory(root, create=True) as found:
        assert found is not None  # create=True
        first = _plan(found, job.segments)
        if not first.writes:
            return Reconciled(refused=first.refused, overflows=first.overflows)
        unit_jobs = sorted({d.unit_job_id for d in job.segments
                            if is_slurm_id(d.unit_job_id)}, key=numeric_key)
        with contextlib.ExitStack() as locks:
            for unit_job in unit_jobs:  # one order everywhere: no deadlock between two
                locks.enter_context(found.lock(unit_job))
            fresh = reread() if reread is not None else job
            plan = _plan(found, fresh.segments)
            # A unit job that appeared since the first look is not locked: the next tick.
            plan = Plan(tuple(u for u in plan.units if u.decision.unit_job_id in unit_jobs),
                        tuple(s for s in plan.states if s.unit_job_id in unit_jobs),
                        plan.refused, plan.overflows)
            return _carry_out(found, fresh, plan, causes or {})


def _listing(found: DecisionDirectory) -> dict[str, Entry]:
    entries: dict[str, Entry] = {}
    for name in found.names():
        if not name.startswith("segment_health_check."):
            continue  # hidden temp and lock files, and whatever else lives there
        info = found.lstat(name)
        if info is not None:
            entries[name] = Entry(kind_of(info.st_mode), info.st_size)
    return entries


def _plan(found: DecisionDirectory, decisions: Iterable[SegmentDecision]) -> Plan:
    decisions = list(decisions)
    listing = _listing(found)
    states: dict[str, bytes] = {}
    for unit_job in {d.unit_job_id for d in decisions if is_slurm_id(d.unit_job_id)}:
        name = state_filename(unit_job)
        entry = listing.get(name)
        if entry is not None and entry.kind == "regular file":
            try:
                head = found.read(name, MAX_STATE_LINE_BYTES + 1)
            except SegmentHealthError:
                # Swapped for a link or FIFO since the listing: plan from what lstat says.
                info = found.lstat(name)
                if info is None:
                    listing.pop(name, None)
                else:
                    listing[name] = Entry(kind_of(info.st_mode), info.st_size)
                continue
            if head is not None:
                states[name] = head
    return plan_reconcile(decisions, listing, states)


def _carry_out(found: DecisionDirectory, job: Job, plan: Plan,
               causes: Mapping[tuple[str, str], str]) -> Reconciled:
    written: list[str] = []
    refused = list(plan.refused)
    for unit in plan.units:
        d = unit.decision
        name = unit_filename(d.unit_job_id, d.task_id)
        try:
            document = make_decision(
                job_id=d.unit_job_id, task_id=d.task_id, nodes=list(d.nodes),
                cause=causes.get((d.unit_job_id, d.task_id), RECORDED_CAUSE),
                who=d.actor or "dispatch", why=d.reason or "(no reason recorded)", when=d.at,
                extra={"dispatch_job": job.id, "dispatch_name": job.name})
            found.write_atomic(name, encode_decision(d.unit_job_id, d.task_id, document))
        except SegmentHealthError as err:  # a link planted since the listing, a bad record
            refused.append(Refusal(name, str(err)))
            continue
        written.append(name)
    for state in plan.states:
        name = state_filename(state.unit_job_id)
        try:
            found.write_atomic(name, state.content)
        except SegmentHealthError as err:
            refused.append(Refusal(name, str(err)))
            continue
        written.append(name)
    return Reconciled(tuple(written), tuple(refused), plan.overflows)

