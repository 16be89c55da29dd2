"""What follows an exclusion: the cause of an end after a segment-health decision. Pure.

When dispatch has published an exclusion of an allocation unit (seed 002, H1) and an
execution of that unit then ends with a non-zero exit, the exit is the consumer doing its
job: process 0 of the unit refused the rendezvous (ft_launcher raises
``UnhealthyNodeException``, dispatch's ``dispatch-segment-c10d`` raises
``SegmentExcludedError``) and ``srun --kill-on-bad-exit=1`` ended the step. Blaming the
application for it would spend a budget meant for application failures and hide why the
run ended. So the end's cause becomes the decision's:

- kind ``node-lost``: the allocation unit was taken away from the job (it may never be used
  again by it); a node-lost rule recovers it (docs/segment-health.md says why this kind);
- provenance the decision's: ``scheduler`` for one resting on the scheduler's node state
  (DRAIN / DOWN / FAIL, or the node-loss fence), ``actor`` with the actor for an operator's
  ``dispatch segment mark``;
- ``detail``: the scheduler's own words about the end, verbatim; ``exit_code`` kept;
- ``note``: dispatch's explanation (which decision, by whom, when, why).

Only ``non-zero-exit`` is attributed: a cancel, a preemption, a time limit, an OOM, a node
the scheduler already calls lost, words it could not map (``unknown``) or a success keep
their own cause. For a job array (one object, named by the array job id) the unit that
speaks for the array is the task its cause names (``task N: ...``, mapping.array_report);
when another task of it failed with a non-zero exit and was not excluded, the
application's failure stands.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import datetime

from dispatch.core.model import Cause, CauseKind, Provenance
from dispatch.core.record import SegmentDecision

# Decision sources resting on the scheduler's node state (decide.PublishSegment.cause).
SCHEDULER_SOURCES = frozenset({"node-unavailable", "node-lost-fence"})
OPERATOR_SOURCE = "operator"
ATTRIBUTED_KINDS = frozenset({CauseKind.NON_ZERO_EXIT})

# How the Slurm mapping names the task that speaks for an array, in the cause's note
# (mapping.array_report): "task 1 speaks for the array; others: 0 succeeded, 2-3 failed (...)".
_SPEAKER = re.compile(r"^task (\d+) speaks for the array")
_OTHERS = "; others: "
_GROUP = re.compile(r"^([0-9,-]+) (\w+)(?: \(([a-z-]+)\))?$")


def unit_of(ref: str) -> tuple[str, str]:
    """Seed 002: an array task ``A_T`` is (A, T); a regular job is (id, id)."""
    job, sep, task = ref.partition("_")
    if sep and job.isdigit() and task.isdigit():
        return job, task
    return ref, ref


def _expand(ranges: str) -> list[str]:
    out: list[str] = []
    for part in ranges.split(","):
        lo, sep, hi = part.partition("-")
        if sep and lo.isdigit() and hi.isdigit():
            out += [str(i) for i in range(int(lo), int(hi) + 1)]
        elif part:
            out.append(part)
    return out


def _array_units(ref: str, note: str) -> tuple[str | None, list[str]]:
    """(the task that speaks for the array, other tasks that failed with a non-zero exit),
    read from the note mapping.array_report writes beside the task's own words."""
    m = _SPEAKER.match(note)
    speaker = m.group(1) if m else None
    failed: list[str] = []
    _, sep, tail = note.partition(_OTHERS)
    if sep:
        for group in tail.split("; ", 1)[0].split(", "):
            g = _GROUP.match(group)
            if g is not None and g.group(3) == CauseKind.NON_ZERO_EXIT.value:
                failed += _expand(g.group(1))
    return speaker, failed


def _whole_seconds(at: datetime) -> datetime:
    # Slurm reports ends in whole seconds: a decision published 0.3 s before the end, within
    # the same second, is still before it.
    return at.replace(microsecond=0)


def excluding_decision(decisions: Iterable[SegmentDecision], *, ref: str, reported: Cause,
                       now: datetime, array: bool = False) -> SegmentDecision | None:
    """The published decision the end of object ``ref`` follows, or None."""
    if reported.kind not in ATTRIBUTED_KINDS:
        return None
    end = reported.at or now
    published = {(d.unit_job_id, d.task_id): d for d in decisions
                 if _whole_seconds(d.at) <= end}
    if array and "_" not in ref:
        speaker, failed = _array_units(ref, reported.note)
        if speaker is None:
            return None
        if any((ref, t) not in published for t in failed):
            return None  # another task's application failure stands
        return published.get((ref, speaker))
    return published.get(unit_of(ref))


def provenance_of(decision: SegmentDecision) -> tuple[Provenance, str | None]:
    source = decision.source
    if not source:  # older records: the supervisor's decisions always name their nodes
        source = "node-unavailable" if decision.nodes else OPERATOR_SOURCE
    if source in SCHEDULER_SOURCES:
        return Provenance.SCHEDULER, None
    return Provenance.ACTOR, decision.actor


def attribute_end(decisions: Sequence[SegmentDecision], *, ref: str, reported: Cause,
                  now: datetime, array: bool = False) -> Cause:
    """The cause to record for an ended execution of ``ref`` whose backend reported
    ``reported``: the exclusion it follows, else ``reported`` unchanged."""
    decision = excluding_decision(decisions, ref=ref, reported=reported, now=now, array=array)
    if decision is None:
        return reported
    provenance, actor = provenance_of(decision)
    # A person's mark always names them; one the record does not name (an edited or older
    # record) is said as such, never credited to dispatch.
    who = decision.actor or ("dispatch" if provenance is Provenance.SCHEDULER
                             else "an operator the record does not name")
    nodes = f" (nodes {', '.join(decision.nodes)})" if decision.nodes else ""
    exit_words = f" exit {reported.exit_code}" if reported.exit_code is not None else ""
    note = (f"allocation unit {decision.unit_job_id}.{decision.task_id} was excluded by the "
            f"segment-health decision of {who} at {decision.at.isoformat()}{nodes}: "
            f"{decision.reason}. The scheduler reported {reported.kind.value} "
            f"({reported.provenance.value}){exit_words}: the launcher's process 0 refusing "
            "the rendezvous, not the application")
    if reported.note:
        note += f"; {reported.note}"
    return Cause(kind=CauseKind.NODE_LOST, provenance=provenance, actor=actor,
                 detail=reported.detail, exit_code=reported.exit_code,
                 at=reported.at or now, note=note)


def excluded_nodes(decisions: Iterable[SegmentDecision]) -> tuple[str, ...]:
    """Every node named by a published decision, once, sorted: what a new submission asks
    the scheduler to avoid. A cleared decision is no longer in the record's list."""
    return tuple(sorted({n for d in decisions for n in d.nodes}))
