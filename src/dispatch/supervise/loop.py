"""The supervisor loop: the imperative shell around fold / decide (README: Design).

Per tick: one batched read of what changed in the live jobs' records since the last tick
(stores/live.py: the jobs stay folded between ticks), one discover() per backend for all
of them, then per job: fold and decide; the decision events of up to BATCH_JOBS jobs are
appended in one transaction, each job's against its own version (batch.py: intent before
action, optimistic concurrency), then each job is acted on (acting.py) and the results
appended. A job whose append lost a race is re-read and decided again; a supervisor that
cannot reach its scheduler makes no transition that needs it (R3) and backs off.

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

from dispatch.backends.base import Backend
from dispatch.core import decide as dc
from dispatch.core import events as ev
from dispatch.core.model import Changes, Discovery
from dispatch.core.next_due import next_due, objects_seen
from dispatch.core.observe import observe
from dispatch.core.record import Job, fold
from dispatch.core.status import plan_of
from dispatch.errors import DispatchError
from dispatch.stores.base import (
    ConflictError,
    Fence,
    Fenced,
    RecordStore,
    sort_key_us,
)
from dispatch.stores.batch import Outcome
from dispatch.stores.fence import LeaseLost
from dispatch.stores.live import LiveFolds, SharedFolds
from dispatch.stores.reading import fold_records
from dispatch.supervise.acting import NEEDS_BACKEND, Acting
from dispatch.supervise.batch import BATCH_JOBS, Decided, Visit, write
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


class Supervisor(Acting):
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
        shared_folds: SharedFolds | None = None,
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
        # The scope's live jobs, folded, kept between ticks: a tick reads what changed only;
        # in serve, shared with its held index (stores/live.py).
        self.live = LiveFolds(store, scope, shared_folds)
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
            decided: list[Visit] = []  # written together, then acted on (batch.py)
            for job in group:
                if self.stopping.is_set():
                    self._finish(decided, report, chosen is not None)
                    return report
                visit = self._visit(job, seen.backend, seen.discovery, report, changes)
                if visit.decided is None:
                    self._visited(visit, report, chosen is not None)
                    continue
                decided.append(visit)
                if len(decided) >= BATCH_JOBS:
                    self._finish(decided, report, chosen is not None)
                    decided = []
            self._finish(decided, report, chosen is not None)
            if chosen is not None:
                self.visits.consumed(name, changes, complete)
        if chosen is not None:
            self.visits.ticked(now, self.quiet)
        if len(self.quiet) > len(jobs):  # forget the jobs that left the tick
            ticked = {j.id for j in jobs}
            self.quiet = {k: q for k, q in self.quiet.items() if k in ticked}
            self.visits.forget(ticked)
        return report

    def _visit(self, job: Job, backend: Backend | None, discovery: Discovery | None,
               report: TickReport, changes: Changes | None) -> Visit:
        """``job``'s decisions of this tick, not yet written (``_finish`` writes and carries
        them out). ``backend`` None: it cannot be built here, so only decisions that need no
        scheduler are made (e.g. cancelling a job that never reached one)."""
        visit = Visit(job, self.quiet.get(job.id))
        try:
            gone = self._settle(job, backend, discovery, report, changes)
            if gone is not None:
                visit.decided = self._decide(job, backend, discovery, gone)
        except (Fenced, LeaseLost):
            raise  # the scope is not ours any more: no job of it is (leases.py)
        except DispatchError as err:
            report.errors.append(f"job {job.id}: {err}")
            log.error("job %s: %s", job.id, err)
        return visit

    def _settle(self, job: Job, backend: Backend | None, discovery: Discovery | None,
                report: TickReport, changes: Changes | None) -> dc.Gone | None:
        """The holders' answer for ``job``, or None when it has nothing to decide: watched
        to its end, or the same quiet answer as last tick (next_due.py)."""
        gone = self._gone_for(job, backend)
        if job.terminal and discovery is not None and not _any_alive(job, discovery):
            now = self.clock()
            until = dc.watch_until(job, gone, now)
            if until is None or now > until:
                self.chasing.discard(job.id)  # nothing of it alive, nothing may appear: done
                return None
            # A submit attempt never resolved may still publish an object: watched on.
        complete = discovery is not None and discovery.complete
        quiet = self.quiet.pop(job.id, None)
        if quiet is not None and quiet.holds(job, discovery, changes, complete, gone.holders,
                                             self.clock()):
            self.quiet[job.id] = quiet  # the same answer as last tick: nothing to decide
            report.skipped += 1
            return None
        return gone

    def _decide(self, job: Job, backend: Backend | None, discovery: Discovery | None,
                gone: dc.Gone) -> Decided | None:
        """One attempt's decisions and their events; None: nothing to write (quiet noted)."""
        now = self.clock()
        complete = discovery is not None and discovery.complete
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
            return None
        if backend is None and any(isinstance(d, NEEDS_BACKEND) for d in decisions):
            return None  # waits until its backend can be used; the tick reported why
        events = dc.to_events(decisions, job, now, self.name, stop_by=self.stop_by,
                              holder=holder())
        return Decided(job, decisions, events, now, backend, discovery, gone)

    def _finish(self, visits: Sequence[Visit], report: TickReport, chosen: bool) -> None:
        """Write the visits' decisions in one transaction (batch.py), then per job in turn:
        act on what was written (intent before action) or decide again alone what
        conflicted, then its segment files and its visit."""
        if not visits:
            return
        written = write(self.store, [v.decided for v in visits if v.decided is not None],
                        self._fence())
        for v in visits:
            try:
                if v.decided is not None:
                    self._carry_out(v.decided, written[v.job.id], report)
            except (Fenced, LeaseLost):
                raise
            except DispatchError as err:
                report.errors.append(f"job {v.job.id}: {err}")
                log.error("job %s: %s", v.job.id, err)
            self._visited(v, report, chosen)

    def _visited(self, v: Visit, report: TickReport, chosen: bool) -> None:
        """After a job's decisions were carried out (or none made): its segment files, and
        its visit noted (visits.py)."""
        if v.job.spec.segment_health is not None:
            self._reconcile_segments(v.job, report)
        if chosen:
            self.visits.visited(v.job, v.before, self.quiet.get(v.job.id),
                                v.job.id in self.chasing)

    def _carry_out(self, d: Decided, written: Outcome, report: TickReport) -> None:
        if isinstance(written, ConflictError):
            # Another supervisor decided first: re-read, re-decide on what it wrote, alone.
            report.conflicts += 1
            self._retry(fold(self.store.read(d.job.id), d.now), d.backend, d.discovery,
                        d.gone, report, attempts=2)
        elif isinstance(written, DispatchError):
            raise written  # this job's append refused (the others' stand): reported
        elif isinstance(written, Exception):  # a batch of events made wrong: this job's only
            report.errors.append(f"job {d.job.id}: {written}")
            log.error("job %s: its decisions could not be recorded: %s", d.job.id, written)
        else:
            self._done(d, written, report)

    def _retry(self, job: Job, backend: Backend | None, discovery: Discovery | None,
               gone: dc.Gone, report: TickReport, attempts: int) -> None:
        """Decide, append, act, for one job alone (after its batched append conflicted)."""
        for _ in range(attempts):
            d = self._decide(job, backend, discovery, gone)
            if d is None:
                return
            try:
                version = self.store.append(job.id, d.events, job.version,
                                            fence=self._fence()) if d.events else job.version
            except ConflictError:
                report.conflicts += 1
                job = fold(self.store.read(job.id), d.now)
                continue
            self._done(d, version, report)
            return

    def _done(self, d: Decided, version: int, report: TickReport) -> None:
        """``d``'s events are in the record at ``version``: carry its decisions out."""
        job, decisions = d.job, d.decisions
        if fp.ARMED:  # a test's crash window: the intent is recorded, nothing acted
            fp.appended(d.events)
        report.decisions += len(decisions)
        report.appended += len(d.events)
        if any(isinstance(x, dc.Commit) for x in decisions) and (any(
                isinstance(x, (dc.Stop, dc.StopDuplicate, dc.CancelObject))
                for x in decisions) or any(s.unresolved for s in job.submissions)):
            # Make sure the stop lands even after the commit, and watch for an object a
            # submit attempt never resolved may still publish (dc.watch_until).
            self.chasing.add(job.id)
        self._act(job, version, decisions, d.backend, report)

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


def _any_alive(job: Job, discovery: Discovery) -> bool:
    refs = {s.ref for s in job.submissions if s.ref is not None}
    return any(o.alive for o in discovery.of_job(job.id)) or any(
        o.alive for r in refs if (o := discovery.get(r)) is not None)
