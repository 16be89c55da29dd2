"""The supervisor loop: the imperative shell around fold / decide (README: Design).

Per tick: one batched read of what changed in the live jobs' records since the last tick
(stores/live.py: the jobs stay folded between ticks), one discover() per backend for all
of them, then per job: fold, decide, append the decision events (intent before action,
with optimistic concurrency), act on the backend, append the results. A supervisor that
loses a race re-reads and re-decides; one that cannot reach its scheduler makes no
transition that needs it (R3) and backs off.

Under a lease (leases.py) a supervisor serves one scope: it ticks that scope's jobs only,
every append carries its lease's fence (the store refuses a stale one, stores/lease.py) and
the lease is checked again before each action on the scheduler.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import msgspec

from dispatch.backends.base import Backend, Submission, SubmitRejected
from dispatch.core import decide as dc
from dispatch.core import events as ev
from dispatch.core.model import (
    Cause,
    CauseKind,
    Changes,
    Discovery,
    Provenance,
    SchedulerUnreachable,
)
from dispatch.core.next_due import next_due, objects_seen
from dispatch.core.observe import observe
from dispatch.core.record import Job, SegmentDecision, fold
from dispatch.core.status import plan_of
from dispatch.errors import DispatchError
from dispatch.stores.base import (
    ConflictError,
    Fence,
    Fenced,
    RecordStore,
    append_fact,
    sort_key_us,
)
from dispatch.stores.fence import LeaseLost
from dispatch.stores.live import LiveFolds
from dispatch.stores.reading import fold_records
from dispatch.supervise.discovery import OK, UNREACHABLE, Lookout, by_backend
from dispatch.supervise.escalations import Notifier
from dispatch.supervise.holders import holder, look_at_holders, this_process
from dispatch.supervise.quiet import Quiet, look_of
from dispatch.supervise.visits import Visits, changes_of
from dispatch.support import failpoints as fp
from dispatch.support.clock import Clock, utcnow

log = logging.getLogger("dispatch.supervise.loop")

@dataclass
class TickReport:
    """What one tick did; used by tests, the live table and the benchmarks."""

    jobs: int = 0
    decisions: int = 0
    appended: int = 0
    conflicts: int = 0
    unreachable: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    skipped: int = 0  # jobs not decided again: nothing changed and nothing was due


class Supervisor:
    def __init__(
        self,
        store: RecordStore,
        backend_for: Callable[[str], Backend],
        *,
        clock: Clock = utcnow,
        notifier: Notifier | None = None,
        name: str | None = None,
        attempt_lease: timedelta = dc.ATTEMPT_LEASE,
        resend_after: timedelta = dc.RESEND_AFTER,
        on_decision: Callable[[Job, dc.Decision], None] | None = None,
        scope: str | None = None,
        lease_guard: Callable[[], Fence] | None = None,
        lookout: Lookout | None = None,
    ) -> None:
        self.store = store
        self.backend_for = backend_for
        self.clock = clock
        self.notifier = notifier or Notifier()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.attempt_lease = attempt_lease
        self.resend_after = resend_after
        self.on_decision = on_decision
        # The actor a scheduler names for this process's own stops (scancel: "CANCELLED by
        # <uid>"): recorded with each stop so its cancel is not taken for a person's (S14).
        self.stop_by = str(os.getuid())
        # The scope served (None: every job) and, under a lease, the guard that returns the
        # lease's current fence or raises LeaseLost (renewing it when due).
        self.scope = scope
        self.lease_guard = lease_guard
        # Each backend's look with a deadline, on a thread of its own; shared by the
        # supervisors of one process so a backend is never asked twice at once.
        self.lookout = lookout or Lookout()
        self.stopping = threading.Event()
        # Finished jobs that may still have a live object (a stop asked for in the tick that
        # committed the outcome) or get one (a submit attempt never resolved: those of the
        # scope are looked up in the store at each takeover, _find_watched): ticked until
        # the scheduler shows none alive and none may appear (core/waits.watch_until).
        self.chasing: set[str] = set()
        # The scope's live jobs, folded, kept between ticks: a tick reads what changed only.
        self.live = LiveFolds(store, scope)
        # Jobs decide() and observe() had nothing for, kept between ticks: not decided again
        # while their record and objects stay the same and no time-based decision is due.
        self.quiet: dict[str, Quiet] = {}
        # Which jobs a tick visits, when its backends report changes (visits.py).
        self.visits = Visits()
        # Under a lease: the epoch last served and when this process took it (decide.Takeover:
        # what the previous holder recorded and may not have carried out is redone at once).
        self._epoch: int | None = None
        self.taken_over_at: datetime | None = None
        # The holders of the ticked jobs' unresolved attempts found gone this tick, when each
        # was first found gone, and those found alive (holders.py); this process names
        # itself in the attempts it records.
        self._gone: frozenset[ev.Holder] = frozenset()
        self._gone_at: dict[ev.Holder, datetime] = {}
        self._alive: frozenset[ev.Holder] = frozenset()
        # When the finished jobs to watch were last looked up, and under which epoch.
        self._watch_looked: tuple[int | None, datetime] | None = None

    # ---- one tick -------------------------------------------------------------------
    def tick(self, job_ids: Sequence[str] | None = None) -> TickReport:
        report = TickReport()
        now = self.clock()
        self._note_takeover(now)
        if job_ids is None:  # every live job of the scope, folded on from the last tick
            self._find_watched(now)
            jobs, broken = self.live.refresh(now)
            chased, chase_broken = fold_records(
                self.store, [j for j in self.chasing if j not in self.live.wanted], now)
            jobs, broken = [*jobs, *chased], {**broken, **chase_broken}
        else:
            jobs, broken = fold_records(
                self.store, list(dict.fromkeys([*job_ids, *self.chasing])), now)
        for job_id, err in broken.items():  # one bad record never stops the others
            report.errors.append(f"job {job_id}: {err}")
            log.error("job %s: its record cannot be used: %s", job_id, err)
        jobs = [j for j in jobs if not j.terminal or j.id in self.chasing]
        report.jobs = len(jobs)
        # The chased jobs by id (the live ones are in self.live.folded); None: some jobs.
        chosen = {j.id: j for j in chased} if job_ids is None else None
        find: Callable[[str], Job | None] = lambda i: (  # noqa: E731
            self.live.folded.get(i) or (chosen or {}).get(i))
        # One /proc read per holder of an unresolved attempt; a holder's first finding of
        # gone is kept (its submit bound runs from then: core/waits.watch_until). Only a job
        # read now or visited at every tick can have one (visits.py).
        self._gone, self._alive = look_at_holders(jobs if chosen is None else Visits.pick(
            {*self.live.fresh, *self.visits.every_tick, *self.chasing}, None, find))
        self._gone_at = {h: self._gone_at.get(h, now) for h in self._gone}
        for name, group in by_backend(jobs).items():
            seen = self.lookout.look(name, group, self.backend_for, now,
                                     keep_alive=self._fence, stopping=self.stopping)
            if seen.scheduler == UNREACHABLE:
                report.unreachable.append(seen.problem)
            elif seen.scheduler != OK:
                report.errors.append(f"backend {name}: {seen.problem}")
            changes = changes_of(seen.backend, seen.discovery)
            complete = seen.discovery.complete if seen.discovery is not None else None
            ids = None if chosen is None else self.visits.choose(
                name, changes, complete, {*self.live.fresh, *self.chasing}, now)
            if ids is not None:
                todo = Visits.pick(ids, name, find)
                report.skipped, group = report.skipped + len(group) - len(todo), todo
            for job in group:
                if self.stopping.is_set():
                    return report
                before = self.quiet.get(job.id)
                try:
                    self._step(job, seen.backend, seen.discovery, report, changes)
                except (Fenced, LeaseLost):
                    raise  # the scope is not ours any more: no job of it is (leases.py)
                except DispatchError as err:
                    report.errors.append(f"job {job.id}: {err}")
                    log.error("job %s: %s", job.id, err)
                if job.spec.segment_health is not None:
                    self._reconcile_segments(job, report)
                if chosen is not None:
                    self.visits.visited(job, before, self.quiet.get(job.id),
                                        job.id in self.chasing)
            if chosen is not None:
                self.visits.consumed(name, changes, complete)
        if chosen is not None:
            self.visits.ticked(now, self.quiet)
        if len(self.quiet) > len(jobs):  # forget the jobs that left the tick
            ticked = {j.id for j in jobs}
            self.quiet = {k: q for k, q in self.quiet.items() if k in ticked}
            self.visits.forget(ticked)
        return report

    def _step(self, job: Job, backend: Backend | None, discovery: Discovery | None,
              report: TickReport, changes: Changes | None = None, attempts: int = 3) -> None:
        """Decide, append, act. ``backend`` None: it cannot be built here, so only decisions
        that need no scheduler are made (e.g. cancelling a job that never reached one)."""
        gone = self._gone_for(job, backend)
        if job.terminal and discovery is not None and not _any_alive(job, discovery):
            now = self.clock()
            until = dc.watch_until(job, gone, now)
            if until is None or now > until:
                self.chasing.discard(job.id)  # nothing of it alive, nothing may appear: done
                return
            # A submit attempt never resolved may still publish an object: watched on.
        complete = discovery is not None and discovery.complete
        quiet = self.quiet.pop(job.id, None)
        if quiet is not None and quiet.holds(job, discovery, changes, complete, gone.holders,
                                             self.clock()):
            self.quiet[job.id] = quiet  # the same answer as last tick: nothing (next_due.py)
            report.skipped += 1
            return
        for _ in range(attempts):
            now = self.clock()
            # observe(): starts and checkpoints, for goodput (G1, G3); decide(): the rest.
            plan = plan_of(job)
            takeover = self._takeover(backend)
            decisions = observe(job, discovery) + dc.decide(
                job, discovery, plan, now, attempt_lease=self.attempt_lease,
                resend_after=self.resend_after, takeover=takeover, gone=gone)
            if not decisions:
                self.quiet[job.id] = Quiet(
                    at=now, version=job.version, objects=objects_seen(job, discovery),
                    complete=complete, gone=gone.holders, look=look_of(discovery), due=next_due(
                        job, discovery, plan, now, attempt_lease=self.attempt_lease,
                        resend_after=self.resend_after, takeover=takeover, gone=gone))
                return
            if backend is None and any(isinstance(d, _NEEDS_BACKEND) for d in decisions):
                return  # waits until its backend can be used; the tick reported why
            events = dc.to_events(decisions, job, now, self.name, stop_by=self.stop_by,
                                  holder=holder())
            try:
                version = self.store.append(job.id, events, job.version,
                                            fence=self._fence()) if events else job.version
            except ConflictError:
                # Another supervisor decided first: re-read, re-decide on what it wrote.
                report.conflicts += 1
                job = fold(self.store.read(job.id), now)
                continue
            if fp.ARMED:  # a test's crash window: the intent is recorded, nothing acted
                fp.appended(events)
            report.decisions += len(decisions)
            report.appended += len(events)
            if any(isinstance(d, dc.Commit) for d in decisions) and (any(
                    isinstance(d, (dc.Stop, dc.StopDuplicate, dc.CancelObject))
                    for d in decisions) or any(s.unresolved for s in job.submissions)):
                # Make sure the stop lands even after the commit, and watch for an object a
                # submit attempt never resolved may still publish (dc.watch_until).
                self.chasing.add(job.id)
            self._act(job, version, decisions, backend, report)
            return

    # ---- actions, after the intent is in the record ----------------------------------
    def _act(self, job: Job, version: int, decisions: Sequence[dc.Decision],
             backend: Backend | None, report: TickReport) -> None:
        for d in decisions:
            if self.on_decision is not None:
                self.on_decision(job, d)
            self._fence()  # a lease lost since the intent was written: act no more
            try:
                if isinstance(d, _NEEDS_BACKEND):
                    if backend is not None:  # _step made none of these without one
                        self._on_scheduler(job, d, backend)
                elif isinstance(d, dc.PublishSegment):
                    self._publish_segment(job, d, report)
                    if fp.ARMED:
                        fp.hit("acted:publish-segment")
                elif isinstance(d, dc.Escalate):
                    self.notifier.escalate(job, d.message, d.cause, self.clock(), d.error)
                elif isinstance(d, dc.Commit):
                    log.info("job %s (%s) committed %s: %s", job.id, job.name, d.state.value,
                             d.cause.kind.value)
                    if job.spec.env_from_host and d.state.terminal:
                        _forget_host_env(job.id)
            except SchedulerUnreachable as err:
                # The intent stays in the record; the next tick carries it out (idempotent).
                report.unreachable.append(str(err))
                log.warning("job %s: %s; will retry", job.id, err)
                return

    def _on_scheduler(self, job: Job, d: dc.Decision, backend: Backend) -> None:
        if isinstance(d, (dc.Submit, dc.RetrySubmit)):
            intended = job.submission(d.submission)
            avoid = d.exclude_nodes if isinstance(d, dc.Submit) else (
                intended.exclude_nodes if intended is not None else ())
            self._submit(job, d.submission, d.token, d.gated, backend, avoid)
        elif isinstance(d, (dc.Stop, dc.StopDuplicate)):
            backend.stop(d.ref)
            if fp.ARMED:
                fp.hit("acted:stop")
        elif isinstance(d, dc.CancelObject):
            backend.cancel(d.ref)
            if fp.ARMED:
                fp.hit("acted:cancel")
        elif isinstance(d, dc.OpenGate):
            if fp.ARMED:
                fp.hit("gate:opening")
            backend.open_gate(d.ref)
            if fp.ARMED:
                fp.hit("acted:open-gate")
            self._append_fact(job.id, _gate_opened(d))

    def _publish_segment(self, job: Job, d: dc.PublishSegment, report: TickReport) -> None:
        # SegmentPublished is in the record (the intent): write what the record says now.
        # reconcile re-reads the record under the directory's lock before it writes; a
        # failure here is retried by the per-tick reconcile until the files match (an outbox).
        decided = SegmentDecision(unit_job_id=d.unit_job_id, task_id=d.task_id,
                                  reason=d.reason, at=self.clock(), actor=self.name,
                                  nodes=d.nodes)
        self._reconcile_segments(msgspec.structs.replace(job, segments=(*job.segments, decided)),
                                 report, {(d.unit_job_id, d.task_id): d.cause})
        log.warning("job %s: segment health: unit %s.%s marked unavailable: %s",
                    job.id, d.unit_job_id, d.task_id, d.reason)

    def _reconcile_segments(self, job: Job, report: TickReport | None,
                            causes: dict[tuple[str, str], str] | None = None) -> None:
        """Issue 12 item 4: make the decision files match the record; never raises.

        A refusal (a planted link) or a state line over its limit is escalated once per
        message through the notifier; a disk or store error is logged, retried next tick.
        """
        if job.terminal or job.spec.segment_health is None or not job.segments:
            return
        from dispatch.segment_health.artifact import SegmentHealthError
        from dispatch.segment_health.reconcile import reconcile

        def reread() -> Job:
            return fold(self.store.read(job.id), self.clock())

        try:
            try:
                messages = reconcile(job, reread=reread, causes=causes).escalations
            except SegmentHealthError as err:  # e.g. a planted link under the lock's name
                messages = [f"segment health: {err}"]
            known = {e.message for e in job.escalations}
            for message in dict.fromkeys(messages):
                if message not in known:
                    self._append_fact(job.id, _escalation_raised(message))
                    self.notifier.escalate(job, message, None, self.clock())
        except (Fenced, LeaseLost):
            raise  # the lease is gone: the supervisor stops acting on the scope
        except Exception as err:  # noqa: BLE001 - one job's files never stop the tick
            log.warning("job %s: segment health files not yet in step: %s", job.id, err)
            if report is not None:
                report.errors.append(f"job {job.id}: segment health: {err}")

    def _submit(self, job: Job, number: int, token: str, gated: bool, backend: Backend,
                exclude_nodes: tuple[str, ...] = ()) -> None:
        spec = job.spec
        try:
            if spec.env_from_host:  # kept beside the record at submission, never in it
                from dispatch.backends import hostenv

                values = hostenv.load(job.id, spec.env_from_host)
                spec = msgspec.structs.replace(spec, env={**spec.env, **values})
        except DispatchError as err:
            cause = Cause(kind=CauseKind.LAUNCH_FAILED, provenance=Provenance.SCHEDULER,
                          note=str(err), at=self.clock())
            self._append_fact(job.id, lambda seq, now: ev.SubmissionRejected(
                seq=seq, at=now, submission=number, cause=cause))
            return
        submission = Submission(job_id=job.id, number=number, token=token, spec=spec,
                                gated=gated, exclude_nodes=exclude_nodes)
        try:
            ref = backend.submit(submission)
            if fp.ARMED:
                fp.hit("acted:submit")
        except SubmitRejected as err:
            cause = Cause(kind=CauseKind.LAUNCH_FAILED, provenance=Provenance.SCHEDULER,
                          detail=err.detail, at=self.clock())
            self._append_fact(job.id, lambda seq, now: ev.SubmissionRejected(
                seq=seq, at=now, submission=number, cause=cause))
            return
        self._append_fact(job.id, lambda seq, now: ev.SubmissionBound(
            seq=seq, at=now, submission=number, ref=ref))

    def _append_fact(self, job_id: str, make: Callable[[int, datetime], ev.Event]) -> None:
        """Append a fact learnt from the backend; a conflict only means others wrote first."""
        append_fact(self.store, job_id, lambda seq: make(seq, self.clock()),
                    fence=self._fence())
        if fp.ARMED:
            fp.appended([make(0, self.clock())])

    def _fence(self) -> Fence | None:
        return self.lease_guard() if self.lease_guard is not None else None

    def _note_takeover(self, now: datetime) -> None:
        """A new epoch of the scope's lease is a takeover (this process's first, or a retake
        after losing it): remember when, and forget the quiet answers decided before it."""
        fence = self._fence()
        if fence is not None and fence.epoch != self._epoch:
            self._epoch, self.taken_over_at = fence.epoch, now
            self.quiet.clear()
            self.visits.reset()

    def _gone_for(self, job: Job, backend: Backend | None) -> dc.Gone:
        """This tick's gone and alive holders of ``job``'s unresolved attempts, with the
        backend's submit bound (a backend that declares none keeps the attempt lease)."""
        bound = getattr(backend, "submit_in_flight", self.attempt_lease)
        if not (self._gone or self._alive):  # no holder to judge: one answer for all jobs
            return _NONE_GONE.get(bound) or _NONE_GONE.setdefault(
                bound, dc.Gone(holders=frozenset(), submit_in_flight=bound))
        held = {h for s in job.submissions if s.unresolved for h in s.holders
                if h is not None}
        mine = frozenset(held & self._gone)
        return dc.Gone(holders=mine, submit_in_flight=bound, alive=frozenset(
            held & self._alive), found_at={h: self._gone_at[h] for h in mine})

    def _find_watched(self, now: datetime) -> None:
        """At a takeover, or this supervisor's first tick (and every WATCH_RELOOK after): the
        scope's finished jobs whose watch for a never-resolved submit attempt may not be
        over (the store's index, stores/attempts.py) are watched from now on, whoever
        committed their outcome; core/waits.watch_until says when each watch is over."""
        last = self._watch_looked
        if last is not None and last[0] == self._epoch and \
                last[1] <= now < last[1] + WATCH_RELOOK:
            return
        me = this_process()
        found = self.store.watched(self.scope, sort_key_us(now - dc.WATCH_UNRESOLVED),
                                   me.host if me else None, me.boot_id if me else None)
        self.chasing.update(found)
        self._watch_looked = (self._epoch, now)

    def _takeover(self, backend: Backend | None) -> dc.Takeover | None:
        if self.taken_over_at is None:
            return None
        # A backend that declares no bound keeps the attempt lease (a fake in a test).
        bound = getattr(backend, "submit_in_flight", self.attempt_lease)
        return dc.Takeover(at=self.taken_over_at, submit_in_flight=bound)

    # ---- loops -----------------------------------------------------------------------
    def serve(self, poll: float, on_tick: Callable[[TickReport], None] | None = None) -> None:
        backoff = poll
        while not self.stopping.is_set():
            try:
                report = self.tick()
            except Exception:  # keep serving; the record is the truth, the next tick retries
                log.exception("tick failed")
                report = TickReport(errors=["tick failed"])
            if on_tick is not None:
                on_tick(report)
            backoff = min(backoff * 2, poll * 16) if report.unreachable else poll
            self.stopping.wait(backoff)


# How often the scope's finished jobs to watch are looked up again while it is held (they
# are looked up at each takeover; a lease held throughout sees every outcome committed in
# it, so this only catches one committed by an unleased writer): one indexed query.
WATCH_RELOOK = timedelta(minutes=5)

# The holders' answer when no attempt's holder was judged this tick, per submit bound.
_NONE_GONE: dict[timedelta, dc.Gone] = {}

# Decisions carried out on the scheduler: not made while the backend cannot be used.
_NEEDS_BACKEND = (dc.Submit, dc.RetrySubmit, dc.Stop, dc.StopDuplicate, dc.CancelObject,
                  dc.OpenGate)


def _forget_host_env(job_id: str) -> None:
    """The job is finished: its env_from_host values are needed no more (a supersede reads
    them again from its own environment)."""
    from dispatch.backends import hostenv

    try:
        hostenv.forget(job_id)
    except (OSError, DispatchError) as err:
        log.warning("job %s: cannot remove its env_from_host values: %s", job_id, err)


def _gate_opened(d: dc.OpenGate) -> Callable[[int, datetime], ev.Event]:
    def make(seq: int, now: datetime) -> ev.Event:
        return ev.GateOpened(seq=seq, at=now, submission=d.submission, ref=d.ref)
    return make


def _escalation_raised(message: str) -> Callable[[int, datetime], ev.Event]:
    def make(seq: int, now: datetime) -> ev.Event:
        return ev.EscalationRaised(seq=seq, at=now, message=message)
    return make


def _any_alive(job: Job, discovery: Discovery) -> bool:
    refs = {s.ref for s in job.submissions if s.ref is not None}
    return any(o.alive for o in discovery.of_job(job.id)) or any(
        o.alive for r in refs if (o := discovery.get(r)) is not None)
