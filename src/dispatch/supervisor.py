"""The supervisor loop: the imperative shell around fold / decide (DESIGN "the system").

Per tick: one batched read of every live job's record, one discover() per backend for all
of them, then per job: fold, decide, append the decision events (intent before action,
with optimistic concurrency), act on the backend, append the results. A supervisor that
loses a race re-reads and re-decides; one that cannot reach its scheduler makes no
transition that needs it (R3) and backs off.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from dispatch import decide as dc
from dispatch import events as ev
from dispatch.backends.base import Backend, Submission, SubmitRejected
from dispatch.model import Cause, CauseKind, Discovery, Provenance, SchedulerUnreachable
from dispatch.notify import Notifier
from dispatch.record import Job, fold
from dispatch.status import plan_of
from dispatch.stores.base import ConflictError, RecordStore, append_fact

log = logging.getLogger("dispatch.supervisor")

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class TickReport:
    """What one tick did; used by tests, the live table and the benchmarks."""

    jobs: int = 0
    decisions: int = 0
    appended: int = 0
    conflicts: int = 0
    unreachable: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


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
    ) -> None:
        self.store = store
        self.backend_for = backend_for
        self.clock = clock
        self.notifier = notifier or Notifier()
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.attempt_lease = attempt_lease
        self.resend_after = resend_after
        self.on_decision = on_decision
        self.stopping = threading.Event()
        # Finished jobs of ours that may still have a live object (a stop asked for in the
        # tick that committed the outcome): ticked until the scheduler shows none alive.
        self.chasing: set[str] = set()

    # ---- one tick -------------------------------------------------------------------
    def tick(self, job_ids: Sequence[str] | None = None) -> TickReport:
        report = TickReport()
        if job_ids is None:
            job_ids = [row.job_id for row in self.store.list_jobs(live_only=True)]
        job_ids = list(dict.fromkeys([*job_ids, *self.chasing]))
        if not job_ids:
            return report
        records = self.store.read_many(job_ids)
        now = self.clock()
        jobs = [fold(records[j], now) for j in job_ids if j in records]
        jobs = [j for j in jobs if not j.terminal or j.id in self.chasing]
        report.jobs = len(jobs)
        by_backend: dict[str, list[Job]] = {}
        for job in jobs:
            by_backend.setdefault(job.spec.backend, []).append(job)
        for backend_name, group in by_backend.items():
            backend = self.backend_for(backend_name)
            discovery = self._discover(backend, group, report)
            for job in group:
                if self.stopping.is_set():
                    return report
                self._step(job, backend, discovery, report)
        return report

    def _discover(self, backend: Backend, jobs: Iterable[Job],
                  report: TickReport) -> Discovery | None:
        tokens: list[str] = []
        refs: list[str] = []
        for job in jobs:
            for s in job.submissions:
                tokens.append(s.token)
                if s.ref is not None:
                    refs.append(s.ref)
        try:
            return backend.discover(tokens, refs)
        except SchedulerUnreachable as err:
            log.warning("%s; no transition that needs it this tick", err)
            report.unreachable.append(str(err))
            return None

    def _step(self, job: Job, backend: Backend, discovery: Discovery | None,
              report: TickReport, attempts: int = 3) -> None:
        if job.terminal and discovery is not None and not _any_alive(job, discovery):
            self.chasing.discard(job.id)  # the scheduler shows nothing of it alive: done
            return
        for _ in range(attempts):
            now = self.clock()
            decisions = dc.decide(job, discovery, plan_of(job), now,
                                  attempt_lease=self.attempt_lease,
                                  resend_after=self.resend_after)
            if not decisions:
                return
            events = dc.to_events(decisions, job, now, self.name)
            try:
                version = self.store.append(job.id, events, job.version) if events \
                    else job.version
            except ConflictError:
                # Another supervisor decided first: re-read, re-decide on what it wrote.
                report.conflicts += 1
                job = fold(self.store.read(job.id), now)
                continue
            report.decisions += len(decisions)
            report.appended += len(events)
            if any(isinstance(d, dc.Commit) for d in decisions) and any(
                    isinstance(d, (dc.Stop, dc.StopDuplicate, dc.CancelObject))
                    for d in decisions):
                self.chasing.add(job.id)  # make sure the stop lands even after the commit
            self._act(job, version, decisions, backend, report)
            return

    # ---- actions, after the intent is in the record ----------------------------------
    def _act(self, job: Job, version: int, decisions: Sequence[dc.Decision], backend: Backend,
             report: TickReport) -> None:
        for d in decisions:
            if self.on_decision is not None:
                self.on_decision(job, d)
            try:
                if isinstance(d, (dc.Submit, dc.RetrySubmit)):
                    intended = job.submission(d.submission)
                    avoid = d.exclude_nodes if isinstance(d, dc.Submit) else (
                        intended.exclude_nodes if intended is not None else ())
                    self._submit(job, d.submission, d.token, d.gated, backend, avoid)
                elif isinstance(d, dc.Stop):
                    backend.stop(d.ref)
                elif isinstance(d, dc.StopDuplicate):
                    backend.stop(d.ref)
                elif isinstance(d, dc.CancelObject):
                    backend.cancel(d.ref)
                elif isinstance(d, dc.OpenGate):
                    backend.open_gate(d.ref)
                    self._append_fact(job.id, _gate_opened(d))
                elif isinstance(d, dc.PublishSegment):
                    self._publish_segment(job, d)
                elif isinstance(d, dc.Escalate):
                    self.notifier.escalate(job, d.message, d.cause, self.clock())
                elif isinstance(d, dc.Commit):
                    log.info("job %s (%s) committed %s: %s", job.id, job.name, d.state.value,
                             d.cause.kind.value)
            except SchedulerUnreachable as err:
                # The intent stays in the record; the next tick carries it out (idempotent).
                report.unreachable.append(str(err))
                log.warning("job %s: %s; will retry", job.id, err)
                return

    def _publish_segment(self, job: Job, d: dc.PublishSegment) -> None:
        from dispatch.segment_health import make_decision, publish

        assert job.spec.segment_health is not None
        decision = make_decision(job_id=d.unit_job_id, task_id=d.task_id, nodes=d.nodes,
                                 cause=d.cause, who=self.name, why=d.reason, when=self.clock(),
                                 extra={"dispatch_job": job.id, "dispatch_name": job.name})
        path = publish(job.spec.segment_health.dir, d.unit_job_id, d.task_id, decision=decision)
        log.warning("job %s: segment health: unit %s.%s marked unavailable (%s): %s",
                    job.id, d.unit_job_id, d.task_id, d.reason, path)

    def _submit(self, job: Job, number: int, token: str, gated: bool, backend: Backend,
                exclude_nodes: tuple[str, ...] = ()) -> None:
        submission = Submission(job_id=job.id, number=number, token=token, spec=job.spec,
                                gated=gated, exclude_nodes=exclude_nodes)
        try:
            ref = backend.submit(submission)
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
        append_fact(self.store, job_id, lambda seq: make(seq, self.clock()))

    # ---- loops -----------------------------------------------------------------------
    def run_until_terminal(self, job_id: str, poll: float,
                           on_tick: Callable[[TickReport], None] | None = None) -> Job:
        while True:
            report = self.tick([job_id])
            if on_tick is not None:
                on_tick(report)
            job = fold(self.store.read(job_id), self.clock())
            if job.terminal:
                return job
            wait = poll * (4 if report.unreachable else 1)
            if self.stopping.wait(wait):
                return job

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


def _gate_opened(d: dc.OpenGate) -> Callable[[int, datetime], ev.Event]:
    def make(seq: int, now: datetime) -> ev.Event:
        return ev.GateOpened(seq=seq, at=now, submission=d.submission, ref=d.ref)
    return make


def _any_alive(job: Job, discovery: Discovery) -> bool:
    refs = {s.ref for s in job.submissions if s.ref is not None}
    return any(o.alive for o in discovery.of_job(job.id)) or any(
        o.alive for r in refs if (o := discovery.get(r)) is not None)
