"""Slurm's words -> (State, Cause), executions and object reports. Pure: time is passed in.

The table is docs/scheduler-signals.md "Slurm -> (state, cause)"; the tests hold every row of it
and the real captures in tests/fixtures/slurm/. The scheduler's words are kept verbatim in
``Cause.detail`` ("STATE; reason=...; ExitCode=...; restarts=...; nodes=..."), and only
them: dispatch's own explanation goes in ``Cause.note``. A word we cannot map gives
``CauseKind.UNKNOWN`` with the words, never a guess.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta

import msgspec

from dispatch.backends.slurm.allocation import allocation, node_names
from dispatch.backends.slurm.node_health import lost_nodes, node_unhealthy, node_words
from dispatch.backends.slurm.parse import (
    ExitStatus,
    NodeInfo,
    SacctRow,
    SqueueJob,
)
from dispatch.backends.slurm.stop_mark import marked_comment
from dispatch.core.app_error import killed_by
from dispatch.core.decisions import SUPERVISOR
from dispatch.core.model import (
    Cause,
    CauseKind,
    Execution,
    ObjectReport,
    Provenance,
    State,
    UnitHealth,
)


class Signal(msgspec.Struct, frozen=True, kw_only=True):
    """What Slurm said about one job or one execution, from squeue or sacct, normalised."""

    state: str  # verbatim: "CANCELLED by 0", "PENDING", "COMPLETING"
    reason: str = ""
    description: str = ""
    exit: ExitStatus | None = None
    derived: ExitStatus | None = None  # the highest step exit (DerivedExitCode)
    restarts: int = 0
    nodes: str = ""
    steps: tuple[tuple[str, str, str], ...] = ()  # (step id, state, ExitCode) from sacct
    at: datetime | None = None
    eligible: bool = True  # False: the job has never been eligible (held since submission)
    squeue_exit: str = ""  # squeue's exit_code beside sacct's ExitCode (sacct drops 128)
    stop_mark: str = ""  # the job's Comment, verbatim, when it carries dispatch's stop mark
    note: str = ""  # dispatch's own words about these (never in the detail)

    @property
    def word(self) -> str:
        return self.state.split(" ", 1)[0].upper() if self.state.strip() else ""


# --------------------------------------------------------------------------- reason tables

# Pending for an ordinary reason: it will start when its turn comes.
WAITING_REASONS = frozenset({
    "", "None", "Priority", "BeginTime", "Dependency", "JobArrayTaskLimit", "Licenses",
    "Reservation", "Prolog", "Configuring", "Cleaning", "FrontEndDown", "Scheduling",
    "SchedDefer", "PowerUpNode", "NodeSuspended",
})
# Pending because the cluster cannot give it room now.
NO_CAPACITY_REASONS = frozenset({
    "Resources", "NodeDown", "PartitionDown", "PartitionInactive", "BadCluster",
    "ReqNodeNotAvail",
})
NO_CAPACITY_PREFIXES = ("ReqNodeNotAvail", "AssocGrp", "QOSGrp", "AssocMax", "QOSMax")
# Pending for a reason that can never clear.
NEVER_RUNS_REASONS = frozenset({
    "DependencyNeverSatisfied", "BadConstraints", "PartitionNodeLimit", "PartitionTimeLimit",
    "InvalidAccount", "InvalidQOS", "QOSNotAllowed", "AccountNotAllowed",
    "PartitionConfig", "AccountingPolicy_never",
})
_MAX_PER_JOB = re.compile(r"Max.*PerJob")
HELD_REASONS = frozenset({"JobHeldUser", "JobHeldAdmin"})

RUNNING_WORDS = frozenset({"RUNNING", "CONFIGURING", "RESIZING", "SIGNALING", "STAGE_OUT",
                           "COMPLETING"})
LIVE_WORDS = RUNNING_WORDS | frozenset({"PENDING", "SUSPENDED", "STOPPED", "REQUEUED",
                                        "REQUEUE_FED", "REQUEUE_HOLD", "SPECIAL_EXIT",
                                        "RESV_DEL_HOLD"})
ENDED_WORDS = frozenset({"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "DEADLINE", "NODE_FAIL",
                         "BOOT_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "REVOKED"})
# An execution ended but the job is not finished: the allocation row of a requeued execution.
EXECUTION_END_WORDS = ENDED_WORDS | frozenset({"REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD"})

_CANCELLED_BY = re.compile(r"^CANCELLED\s+by\s+(\S+)", re.IGNORECASE)


def is_ended(word: str) -> bool:
    return word.upper() in ENDED_WORDS


def never_runs(reason: str) -> bool:
    return reason in NEVER_RUNS_REASONS or bool(_MAX_PER_JOB.search(reason))


def no_capacity(reason: str) -> bool:
    return reason in NO_CAPACITY_REASONS or reason.startswith(NO_CAPACITY_PREFIXES)


# --------------------------------------------------------------------------- words


def detail(sig: Signal) -> str:
    """The scheduler's words, verbatim, in one line: each field under its Slurm name."""
    parts = [sig.state.strip() or "(no state)"]
    if sig.reason and sig.reason != "None":
        parts.append(f"reason={sig.reason}")
    if sig.description:
        parts.append(f"description={sig.description}")
    if sig.exit is not None and sig.exit.text:
        parts.append(f"ExitCode={sig.exit.text}")
    if sig.squeue_exit:
        parts.append(f"exit_code={sig.squeue_exit}")
    if sig.derived is not None and (sig.derived.code or sig.derived.signal):
        parts.append(f"DerivedExitCode={sig.derived.text}")
    if sig.restarts:
        parts.append(f"restarts={sig.restarts}")
    if sig.nodes:
        parts.append(f"nodes={sig.nodes}")
    for step, state, code in sig.steps:
        if state.split(" ", 1)[0].upper() not in ("COMPLETED", "RUNNING", "PENDING"):
            parts.append(f"step {step} {state} {code}".rstrip())
    if sig.stop_mark:
        parts.append(f"Comment={sig.stop_mark}")
    return "; ".join(parts)


def _notes(*notes: str) -> str:
    return "; ".join(n for n in notes if n)


def _cause(kind: CauseKind, sig: Signal, *, provenance: Provenance = Provenance.SCHEDULER,
           actor: str | None = None, exit_code: int | None = None, note: str = "") -> Cause:
    return Cause(kind=kind, provenance=provenance, actor=actor, detail=detail(sig),
                 note=_notes(note, sig.note), exit_code=exit_code, at=sig.at)


# Slurm's SIG_OOM (253 as a wait status; sacct prints 0:125): a step the cgroup OOM-killed.
SIG_OOM_SIGNAL = 125


def _step_oom(sig: Signal) -> bool:
    """A step ran out of memory: its row says so, or the job's DerivedExitCode carries
    SIG_OOM (squeue has it before accounting has written the step rows)."""
    if sig.derived is not None and sig.derived.signal == SIG_OOM_SIGNAL:
        return True
    return any(state.split(" ", 1)[0].upper() == "OUT_OF_MEMORY" for _, state, _ in sig.steps)


# --------------------------------------------------------------------------- the table


def classify(sig: Signal, *, preempt_mode: str = "REQUEUE",
             previous: Cause | None = None) -> tuple[State, Cause]:
    """One job's (or one execution's) state and cause from Slurm's words.

    ``previous``: the cause of the job's last ended execution, for a job pending again after a
    requeue (recovering). ``preempt_mode``: the cluster's PreemptMode (SUSPENDED means
    preempted only under SUSPEND).
    """
    word = sig.word
    reason = sig.reason
    none = Cause(kind=CauseKind.NONE, detail=detail(sig), note=sig.note, at=sig.at)

    if word == "PENDING":
        if sig.restarts and "requeued in held state" in sig.description and not reason:
            # squeue -O prints the description instead of the reason (JobHeldUser/Admin).
            return State.HELD, _cause(CauseKind.REQUEUED, sig)
        if reason in HELD_REASONS:
            if sig.restarts and "requeued in held state" in sig.description:
                return State.HELD, _cause(CauseKind.REQUEUED, sig)
            return State.HELD, _cause(CauseKind.HELD, sig, provenance=Provenance.ACTOR)
        if reason == "JobHoldMaxRequeue":
            return State.HELD, _cause(CauseKind.REQUEUED, sig)
        if "launch failed requeued held" in sig.description:
            return State.HELD, _cause(CauseKind.LAUNCH_FAILED, sig)
        if sig.restarts > 0 and (reason in WAITING_REASONS or no_capacity(reason)):
            if previous is not None:
                return State.RECOVERING, msgspec.structs.replace(
                    previous, detail=f"{previous.detail}; {detail(sig)}",
                    note=_notes(previous.note, "the ended execution's words, then the job's "
                                "now"))
            return State.RECOVERING, _cause(CauseKind.REQUEUED, sig)
        if never_runs(reason):
            return State.PENDING, _cause(CauseKind.NO_CAPACITY, sig, note="can never start")
        if no_capacity(reason):
            return State.PENDING, _cause(CauseKind.NO_CAPACITY, sig)
        if reason in WAITING_REASONS:
            return State.PENDING, none
        return State.PENDING, _cause(CauseKind.UNKNOWN, sig)

    if word == "REQUEUE_HOLD":
        if "launch failed requeued held" in sig.description:
            return State.HELD, _cause(CauseKind.LAUNCH_FAILED, sig)
        return State.HELD, _cause(CauseKind.REQUEUED, sig)
    if word in ("SPECIAL_EXIT", "RESV_DEL_HOLD"):
        return State.HELD, _cause(CauseKind.HELD, sig)
    if word == "COMPLETING" and "requeued in held state" in sig.description:
        # 22.05 prints COMPLETING instead of REQUEUE_HOLD while the old execution ends.
        return State.HELD, _cause(CauseKind.REQUEUED, sig)
    if word in RUNNING_WORDS:
        return State.RUNNING, none
    if word in ("SUSPENDED", "STOPPED"):
        if word == "SUSPENDED" and preempt_mode.upper().startswith("SUSPEND"):
            return State.HELD, _cause(CauseKind.PREEMPTED, sig)
        return State.HELD, _cause(CauseKind.HELD, sig)

    if word == "COMPLETED":
        return State.SUCCEEDED, none
    if word == "CANCELLED":
        if sig.stop_mark:  # S14: dispatch marked the job before its scancel (stop_mark.py)
            return State.CANCELLED, _cause(
                CauseKind.CANCELLED, sig, provenance=Provenance.ACTOR, actor=SUPERVISOR,
                note="dispatch's own stop: the job's Comment carries its stop mark")
        m = _CANCELLED_BY.match(sig.state.strip())
        if m:
            return State.CANCELLED, _cause(CauseKind.CANCELLED, sig, provenance=Provenance.ACTOR,
                                           actor=m.group(1))
        return State.CANCELLED, _cause(CauseKind.CANCELLED, sig)
    if word == "FAILED":
        if _step_oom(sig):  # the srun step ran out of memory; the job row shows srun's exit
            return State.FAILED, _cause(CauseKind.OUT_OF_MEMORY, sig)
        ex = sig.exit
        if ex is not None and ex.signal:
            # Killed by a signal (e.g. 0:9): who sent it is not said. Never a guess.
            return State.FAILED, _cause(CauseKind.UNKNOWN, sig)
        if reason == "JobLaunchFailure":
            return State.FAILED, _cause(CauseKind.LAUNCH_FAILED, sig)
        if ex is not None and ex.code:
            return State.FAILED, _cause(CauseKind.NON_ZERO_EXIT, sig,
                                        provenance=Provenance.APPLICATION, exit_code=ex.code)
        return State.FAILED, _cause(CauseKind.UNKNOWN, sig)
    if word in ("TIMEOUT", "DEADLINE"):
        return State.FAILED, _cause(CauseKind.TIME_LIMIT, sig)
    if word == "NODE_FAIL":
        return State.FAILED, _cause(CauseKind.NODE_LOST, sig)
    if word == "BOOT_FAIL":
        return State.FAILED, _cause(CauseKind.LAUNCH_FAILED, sig)
    if word == "OUT_OF_MEMORY":
        return State.FAILED, _cause(CauseKind.OUT_OF_MEMORY, sig)
    if word == "PREEMPTED":
        return State.FAILED, _cause(CauseKind.PREEMPTED, sig)
    if word in ("REQUEUED", "REQUEUE_FED"):
        return State.RECOVERING, _cause(CauseKind.REQUEUED, sig)
    if word == "REVOKED":
        return State.CANCELLED, _cause(CauseKind.DUPLICATE, sig)
    return State.UNKNOWN, _cause(CauseKind.UNKNOWN, sig)


# --------------------------------------------------------------------------- signals


def signal_from_squeue(job: SqueueJob) -> Signal:
    ended = is_ended(job.state)
    return Signal(
        state=job.state if len(job.states) <= 1 else f"{job.state} ({','.join(job.states)})",
        reason=job.reason,
        description=job.description,
        exit=job.exit if ended else None,
        derived=job.derived_exit if ended else None,
        restarts=job.restarts,
        nodes=job.nodes,
        at=job.end_time if ended else None,
        eligible=job.eligible_time is not None,
        stop_mark=marked_comment(job.comment) if job.stop_marked else "",
    )


def signal_from_sacct(row: SacctRow, steps: Sequence[SacctRow] = (), *,
                      squeue_exit: ExitStatus | None = None, restarts: int = 0) -> Signal:
    """An allocation row of sacct and its step rows. sacct's ``Reason`` is the last *pending*
    reason, not why the job ended, so it is kept only for a row still pending."""
    word = row.state_word
    exit_ = row.exit
    squeue_words, note = "", ""
    if squeue_exit is not None:  # squeue's wait status is exact; keep both words
        exit_ = msgspec.structs.replace(squeue_exit, text=row.exit.text)
        squeue_words = squeue_exit.text
    killed = step_killed_by(steps, exit_) if exit_.code and not exit_.signal else None
    if killed is not None:
        # A step's task died by a signal (its row: 0:9) and the batch script passed srun's
        # 128+signal on: the exit is exactly that, and the signal is the end's words.
        step, signum = killed
        exit_ = msgspec.structs.replace(exit_, code=128 + signum)
        note = (f"step {step} was {killed_by(signum)} (its ExitCode 0:{signum}); the job's "
                f"exit {128 + signum} is that death passed on by the batch script")
    elif squeue_exit is None and exit_.code and exit_.code < 128 and not exit_.signal:
        # sacct up to 24.11 prints codes >= 128 less 128; 26.05 prints them as they are (a
        # code >= 128 is therefore exact).
        note = (f"sacct (up to Slurm 24.11) prints codes >= 128 less 128: exit code "
                f"{exit_.code} or {exit_.code + 128}")
    return Signal(
        state=row.state,
        reason=row.reason if word == "PENDING" else "",
        exit=exit_,
        derived=row.derived_exit,
        restarts=restarts,
        nodes=row.nodes if row.nodes != "None assigned" else "",
        steps=tuple((s.step or "", s.state, s.exit.text) for s in steps),
        at=row.end,
        squeue_exit=squeue_words,
        note=note,
        stop_mark=marked_comment(row.comment) if row.stop_marked else "",
    )


def step_killed_by(steps: Sequence[SacctRow], exit_: ExitStatus) -> tuple[str, int] | None:
    """(step, signal) when a step of the job was killed by the signal the job's exit code
    carries (sacct's 9:0, which drops 128, or squeue's exact 137, beside a step's 0:9)."""
    code = exit_.code or 0
    for s in steps:
        signum = s.exit.signal
        if signum and s.step not in ("extern",) and code in (signum, 128 + signum):
            return s.step or "?", signum
    return None


# --------------------------------------------------------------------------- executions


def executions(groups: Sequence[tuple[SacctRow, Sequence[SacctRow]]], job: SqueueJob | None,
               *, preempt_mode: str = "REQUEUE") -> tuple[Execution, ...]:
    """The executions of one job: every allocation row of ``sacct -D`` that started, in order,
    each with its own cause once it ended; then the running one squeue shows, if accounting
    has not got it yet. The exit code of the newest execution comes from squeue when squeue
    still shows the job ended (sacct subtracts 128 from codes >= 128)."""
    started = [(row, steps) for row, steps in groups if row.start is not None]
    out: list[Execution] = []
    for i, (row, steps) in enumerate(started):
        last = i == len(started) - 1
        squeue_exit = (job.exit if last and job is not None and is_ended(job.state)
                       and row.state_word == job.state else None)
        sig = signal_from_sacct(row, steps, squeue_exit=squeue_exit)
        ended = row.state_word in EXECUTION_END_WORDS
        cause = classify(sig, preempt_mode=preempt_mode)[1] if ended else None
        views = [row.nodes, *(s.nodes for s in steps)]
        if last and job is not None and row.start == job.start_time:
            views.append(job.nodes)
        out.append(Execution(index=i, started_at=row.start, ended_at=row.end if ended else None,
                             cause=cause, nodes=allocation(views)))
    if job is not None and job.state in RUNNING_WORDS - {"COMPLETING"} \
            and job.start_time is not None:
        if not out or (out[-1].ended and out[-1].started_at != job.start_time):
            out.append(Execution(index=len(out), started_at=job.start_time,
                                 nodes=node_names(job.nodes)))
    return tuple(out)


def _ran_on(job: SqueueJob | None,
            latest: tuple[SacctRow, Sequence[SacctRow]] | None) -> tuple[str, ...]:
    """The nodes of the execution squeue shows (or, without squeue, accounting's latest):
    every view of it, since each can be short while it ends (backends/slurm/allocation.py)."""
    views = [] if job is None else [job.nodes]
    if latest is not None and latest[0].start is not None \
            and (job is None or latest[0].start == job.start_time):
        views += [latest[0].nodes, *(s.nodes for s in latest[1])]
    return allocation(views)


# --------------------------------------------------------------------------- one object


def object_report(*, ref: str, token: str | None, job: SqueueJob | None,
                  groups: Sequence[tuple[SacctRow, Sequence[SacctRow]]],
                  nodes: Mapping[str, NodeInfo], lost_since: datetime | None, now: datetime,
                  was_held: bool = False, preempt_mode: str = "REQUEUE"
                  ) -> ObjectReport | None:
    """Everything known of one Slurm job -> its report. ``lost_since`` is when the caller first
    saw one of its nodes lost (the backend remembers it); used only while it runs.

    None when neither squeue nor accounting knows the job: silence, not Slurm's word that it
    ended (accounting lags, or is purged or off), so it is not seen in this look (S16)."""
    execs = executions(groups, job, preempt_mode=preempt_mode)
    previous = next((e.cause for e in reversed(execs) if e.cause is not None), None)
    latest = groups[-1] if groups else None

    if job is not None and not is_ended(job.state):
        sig = signal_from_squeue(job)
        state, cause = classify(sig, preempt_mode=preempt_mode, previous=previous)
        job_nodes = _ran_on(job, latest)
        if state is State.RUNNING and job.state == "COMPLETING" and latest is not None \
                and is_ended(latest[0].state_word) and _same_execution(latest[0], job) \
                and _steps_settled(*latest):
            # Accounting already says how it ended: that is the answer, not "running".
            state, cause = classify(signal_from_sacct(latest[0], latest[1], restarts=job.restarts),
                                    preempt_mode=preempt_mode)
        gated = state is State.HELD and job.reason == "JobHeldUser" and not sig.eligible \
            and job.restarts == 0
        if state is State.PENDING and cause.kind is CauseKind.NONE and was_held:
            cause = Cause(kind=CauseKind.RELEASED, provenance=Provenance.ACTOR,
                          detail=cause.detail, at=now)
        lost_at = None
        if state is State.RUNNING and job.state != "COMPLETING":
            lost = lost_nodes(job_nodes, nodes)
            if lost:
                seen = [n.reason_at for n in lost if n.reason_at is not None]
                lost_at = lost_since or (min(seen) if seen else now)
                cause = Cause(kind=CauseKind.NODE_LOST, detail="; ".join(
                    [detail(sig), *(node_words(n) for n in lost)]), at=lost_at,
                    note="node(s) lost under the running job: "
                         + ", ".join(n.name for n in lost))
        unhealthy = tuple(n for n in job_nodes if n in nodes and node_unhealthy(nodes[n]))
        units = (UnitHealth(unit=ref, nodes=unhealthy, detail="; ".join(
            node_words(nodes[n]) for n in unhealthy)),) if unhealthy else ()
        return ObjectReport(ref=ref, token=token or job.comment or None, state=state,
                            cause=cause, executions=execs, nodes=job_nodes, lost_since=lost_at,
                            gated=gated, unhealthy_units=units)

    if job is not None:  # squeue still shows it, ended
        if latest is not None and is_ended(latest[0].state_word) \
                and _same_execution(latest[0], job) and _steps_settled(*latest):
            sig = signal_from_sacct(latest[0], latest[1], squeue_exit=job.exit,
                                    restarts=job.restarts)
        else:
            waiting = _awaiting_accounting(ref, token, job, execs, _ran_on(job, latest), now)
            if waiting is not None:
                return waiting
            sig = signal_from_squeue(job)
        state, cause = classify(sig, preempt_mode=preempt_mode)
        return ObjectReport(ref=ref, token=token or job.comment or None, state=state,
                            cause=cause, executions=_close_last(execs, cause, job),
                            nodes=_ran_on(job, latest))

    if latest is not None:  # only accounting knows it
        row, steps = latest
        restarts = sum(1 for r, _ in groups[:-1] if r.state_word in EXECUTION_END_WORDS)
        state, cause = classify(signal_from_sacct(row, steps, restarts=restarts),
                                preempt_mode=preempt_mode, previous=previous)
        comment = next((r.comment for r, _ in reversed(groups) if r.comment), None)
        return ObjectReport(ref=ref, token=token or comment, state=state,
                            cause=cause, executions=execs, nodes=_ran_on(None, latest))

    return None


# How long an end squeue shows may wait for accounting to say how it ended (the step rows carry
# an srun step's OUT_OF_MEMORY; the job row only srun's exit). Past it, squeue's word is used.
ACCOUNTING_GRACE = timedelta(seconds=60)


def _steps_settled(row: SacctRow, steps: Sequence[SacctRow]) -> bool:
    """Accounting has written the whole end: a job that started has its batch step, and no
    step is still open. A requeued job cancelled while pending again has a row with a Start
    (= its End) but no nodes ("None assigned"): it never ran, so no batch step will come."""
    ran = row.start is not None and row.nodes not in ("", "None assigned")
    if ran and not any(s.step == "batch" for s in steps):
        return False
    return all(is_ended(s.state_word) for s in steps)


def _awaiting_accounting(ref: str, token: str | None, job: SqueueJob,
                         execs: tuple[Execution, ...], ran_on: tuple[str, ...],
                         now: datetime) -> ObjectReport | None:
    """squeue says the job ended, accounting has not said how yet: within the grace the
    object still counts as running (like COMPLETING), so no end is recorded on half the
    words. None once the grace has passed."""
    if job.end_time is not None and now - job.end_time >= ACCOUNTING_GRACE:
        return None
    return ObjectReport(
        ref=ref, token=token or job.comment or None, state=State.RUNNING,
        cause=Cause(kind=CauseKind.NONE, detail=detail(signal_from_squeue(job)),
                    note="squeue says it ended; waiting for accounting to say how"),
        executions=execs, nodes=ran_on)


def _same_execution(row: SacctRow, job: SqueueJob) -> bool:
    """The accounting row is the execution squeue shows (not an older one of a requeued job)."""
    return job.start_time is None or row.start is None or row.start == job.start_time


def _close_last(execs: tuple[Execution, ...], cause: Cause,
                job: SqueueJob) -> tuple[Execution, ...]:
    """squeue says the job ended but accounting has not caught up: end the last execution."""
    if execs and not execs[-1].ended:
        last = msgspec.structs.replace(execs[-1], ended_at=job.end_time, cause=cause)
        return (*execs[:-1], last)
    if not execs and job.start_time is not None:
        return (Execution(index=0, started_at=job.start_time, ended_at=job.end_time,
                          cause=cause, nodes=node_names(job.nodes)),)
    return execs
