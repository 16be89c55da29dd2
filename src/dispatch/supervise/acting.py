"""What a supervisor does after a job's decisions are in the record (intent before action):
carry them out on the scheduler, publish segment decisions, escalate, and record the facts
its actions learnt (a submission's ref, a gate opened). A part of Supervisor (loop.py)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

import msgspec

from dispatch.backends.base import Backend, Submission, SubmitRejected
from dispatch.core import decide as dc
from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind, Provenance, SchedulerUnreachable
from dispatch.core.record import Job, SegmentDecision, fold
from dispatch.errors import DispatchError
from dispatch.stores.base import Fence, Fenced, RecordStore, append_fact
from dispatch.stores.fence import LeaseLost
from dispatch.supervise.escalations import Notifier
from dispatch.support import failpoints as fp
from dispatch.support.clock import Clock

if TYPE_CHECKING:
    from dispatch.supervise.loop import TickReport

log = logging.getLogger("dispatch.supervise.loop")


class Acting:
    """The actions of Supervisor (loop.py), which sets these attributes."""

    store: RecordStore
    clock: Clock
    notifier: Notifier
    name: str
    on_decision: Callable[[Job, dc.Decision], None] | None

    def _fence(self) -> Fence | None:
        raise NotImplementedError  # Supervisor's

    def _act(self, job: Job, version: int, decisions: Sequence[dc.Decision],
             backend: Backend | None, report: TickReport) -> None:
        for d in decisions:
            if self.on_decision is not None:
                self.on_decision(job, d)
            self._fence()  # a lease lost since the intent was written: act no more
            try:
                if isinstance(d, NEEDS_BACKEND):
                    if backend is not None:  # _decide made none of these without one
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
                        forget_host_env(job.id)
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
            self._append_fact(job.id, gate_opened(d))

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
                    self._append_fact(job.id, escalation_raised(message))
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


# Decisions carried out on the scheduler: not made while the backend cannot be used.
NEEDS_BACKEND = (dc.Submit, dc.RetrySubmit, dc.Stop, dc.StopDuplicate, dc.CancelObject,
                  dc.OpenGate)


def forget_host_env(job_id: str) -> None:
    """The job is finished: its env_from_host values are needed no more (a supersede reads
    them again from its own environment)."""
    from dispatch.backends import hostenv

    try:
        hostenv.forget(job_id)
    except (OSError, DispatchError) as err:
        log.warning("job %s: cannot remove its env_from_host values: %s", job_id, err)


def gate_opened(d: dc.OpenGate) -> Callable[[int, datetime], ev.Event]:
    def make(seq: int, now: datetime) -> ev.Event:
        return ev.GateOpened(seq=seq, at=now, submission=d.submission, ref=d.ref)
    return make


def escalation_raised(message: str) -> Callable[[int, datetime], ev.Event]:
    def make(seq: int, now: datetime) -> ev.Event:
        return ev.EscalationRaised(seq=seq, at=now, message=message)
    return make
