"""``Service``: the operations people and programs do to jobs, over one record store and the
backends.

The CLI (``dispatch.cli``), and the HTTP and Python APIs, are thin layers over ``Service``:
they parse their input, call one method, and render the result. Person requests (cancel,
resubmit, give-up) append their event and return; the supervisor carries them out. Making a
job (``submit``, ``supersede``) records it and makes its first submission.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import TYPE_CHECKING

import msgspec

from dispatch.backends.registry import Backends, traits
from dispatch.core.model import Status, token_for
from dispatch.core.policy import Plan
from dispatch.core.record import Job, fold
from dispatch.core.spec import JobSpec, SpecError, check_spec
from dispatch.core.status import project
from dispatch.errors import BadInput, NotFound
from dispatch.service import requests
from dispatch.service.views import (
    SCHEDULER_NOT_ASKED,
    SCHEDULER_OK,
    JobView,
)
from dispatch.stores.base import JobMatch, RecordStore
from dispatch.stores.select import open_store
from dispatch.stores.snapshot import fold_with_snapshots
from dispatch.support.clock import Clock, utcnow
from dispatch.support.deadline import read_deadline

# Imported where used, so that reading a finished job's status (the CLI's commonest call)
# loads no supervisor, notifier, discovery or story code.
if TYPE_CHECKING:
    from dispatch.backends.base import DryRun, LogSource
    from dispatch.core import events as ev
    from dispatch.service.held import HeldIndex
    from dispatch.supervise.discovery import Look
    from dispatch.supervise.escalations import Notifier
    from dispatch.supervise.leases import Supervision
    from dispatch.supervise.loop import Supervisor

__all__ = ["JobView", "Service", "dry_run_of", "prepare"]


def prepare(spec: JobSpec, backends: Backends, *, ready: bool = True,
            source: str = "<spec>") -> tuple[JobSpec, Plan]:
    """The spec as it will be recorded, validated by its backend, and its plan on that
    backend; with ``ready``, also refused when the backend cannot be used from here. Nothing
    is recorded, no scheduler is asked. ``source`` names the spec in errors (its file)."""
    # A JobSpec made in Python gets the checks a file gets.
    check_spec(spec, source, backends=traits())
    if spec.workdir is None:
        # Relative paths in the command mean what they meant where the job was submitted.
        try:
            here = os.getcwd()
        except OSError as err:  # removed, or deeper than PATH_MAX: no name to record
            raise SpecError(source, "workdir", "not given, and the current directory cannot "
                                               f"be named: {err.strerror or err}") from None
        spec = msgspec.structs.replace(spec, workdir=here)
    backend = backends(spec.backend)
    try:
        backend.validate(spec)
        if ready:
            backend.ready()
            backend.admit(spec)
    except SpecError as err:
        if err.source != "<spec>" or source == "<spec>":
            raise
        raise SpecError(source, err.where, err.message) from None
    return spec, Plan(policy=spec.policy, declarations=backend.declarations())


def dry_run_of(spec: JobSpec, backends: Backends, source: str = "<spec>",
               environ: Mapping[str, str] | None = None) -> DryRun:
    """What the first submission would send to the scheduler; nothing recorded or sent."""
    from dispatch.backends import hostenv
    from dispatch.backends.base import Submission

    spec, _ = prepare(spec, backends, ready=False, source=source)
    # A dry run checks that every env_from_host variable is set, and shows a placeholder,
    # never the value (its output goes to terminals, logs and CI transcripts).
    hostenv.read_from(os.environ if environ is None else environ, spec.env_from_host, source)
    shown = msgspec.structs.replace(spec, env={
        **spec.env, **dict.fromkeys(spec.env_from_host, hostenv.PLACEHOLDER)})
    sub = Submission(job_id="DRYRUN", number=1, token=token_for("DRYRUN", 1), spec=shown)
    return backends(spec.backend).dry_run(sub)


class Service:
    """One record store and one set of backends; ``actor`` is who person requests are
    recorded as (default: the user this process runs as)."""

    def __init__(self, store: RecordStore, backends: Backends | None = None, *,
                 clock: Clock = utcnow, actor: str | None = None,
                 held_index: HeldIndex | None = None,
                 read_deadline_s: float | None = None) -> None:
        self.store = store
        # How long a read waits for one backend's look (R5): past it, that backend's jobs
        # show their record, marked unreachable.
        self.read_deadline_s = read_deadline() if read_deadline_s is None else read_deadline_s
        # A server's live jobs kept folded between list refreshes (service/held.py); None:
        # every list folds the live jobs to find the held ones.
        self.held_index = held_index
        self.backends = backends if backends is not None else Backends()
        self.clock = clock
        self.actor = actor or requests.whoami()

    @classmethod
    def open(cls, store_url: str | None = None, *, actor: str | None = None) -> Service:
        """The store ``store_url`` names (else $DISPATCH_STORE, else the SQLite default)."""
        return cls(open_store(store_url), actor=actor)

    def close(self) -> None:
        try:
            self.backends.close()
        finally:
            self.store.close()

    def __enter__(self) -> Service:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    # ---- reading ------------------------------------------------------------------------
    def resolve(self, job: str) -> str:
        """The job id ``job`` means: an id, a name (the newest job of its supersede chain)
        or a unique id prefix (service/resolve.py). ``NotFound`` when none, or when
        unrelated jobs share the name (``AmbiguousName``, listing them)."""
        from dispatch.service.resolve import LISTED, choose
        from dispatch.support.utf8 import encodable, escaped

        if not encodable(job):  # argv's non-UTF-8 bytes: no id or name holds them
            raise BadInput(f"job reference {escaped(job)} is not UTF-8 text")
        return choose(job, self.store.matches(job, LISTED + 1), self._describe,
                      lambda: (r.name for r in self.store.list_jobs()))

    def _describe(self, found: Sequence[JobMatch]) -> list[str]:
        """Each candidate of an ambiguous reference: id, state, created (the record's word,
        no scheduler asked)."""
        views = {v.job: v for v in self.views([m.job_id for m in found], ask_scheduler=False)}
        lines = []
        for m in found:
            v = views.get(m.job_id)
            state = v.status.state.value if v is not None and v.status is not None else "?"
            lines.append(f"{m.job_id}  {state:<10}  created {m.created_at.isoformat()}")
        return lines

    def job(self, job: str) -> Job:
        """The job as its record says (folded), without asking any scheduler."""
        job_id = self.resolve(job)
        jobs, errors = fold_with_snapshots(self.store, [job_id], self.clock())
        if job_id in errors:
            raise errors[job_id]
        return jobs[0]

    def views(self, job_ids: Sequence[str], *, ask_scheduler: bool = True) -> list[JobView]:
        """Each job's Status, with one look per backend for all of them. A backend that
        cannot be asked marks its own jobs, and a record that cannot be trusted its own
        row; neither stops the others."""
        now = self.clock()
        jobs, errors = fold_with_snapshots(self.store, job_ids, now)
        live = [j for j in jobs if j.outcome is None]
        looks: dict[str, Look] = {}
        if ask_scheduler and live:
            from dispatch.supervise.discovery import look_all

            looks = look_all(live, self.backends, now, deadline_s=self.read_deadline_s)
        by_id = {j.id: j for j in jobs}
        out: list[JobView] = []
        for job_id in job_ids:
            if job_id in errors:
                out.append(JobView.broken(job_id, errors[job_id]))
                continue
            job = by_id.get(job_id)
            if job is None:
                continue
            seen = looks.get(job.spec.backend)
            if job.outcome is not None:
                out.append(JobView(project(job, None, now), SCHEDULER_OK))
            elif seen is None:
                out.append(JobView(project(job, None, now), SCHEDULER_NOT_ASKED))
            else:
                out.append(JobView(project(job, seen.discovery, now), seen.scheduler,
                                   seen.problem))
        return out

    def view(self, job: str, *, ask_scheduler: bool = True) -> JobView:
        job_id = self.resolve(job)
        views = self.views([job_id], ask_scheduler=ask_scheduler)
        if not views:
            raise NotFound(f"no such job: {job_id}")
        return views[0]

    def status(self, job: str) -> Status:
        """The job's Status; ``SchedulerUnreachable`` when its scheduler cannot be asked
        (the record alone is in ``view(job)``)."""
        return self.view(job).checked()

    def jobs(self, *, include_finished: bool = False, name: str | None = None,
             ask_scheduler: bool = True) -> list[JobView]:
        """The jobs (unfinished ones unless ``include_finished``) in creation order; ``name``:
        a name pattern (support/name_glob.py: a name, or a shell-style glob), matched in
        the jobs table."""
        from dispatch.stores.query import JobQuery

        rows = self.store.query_jobs(JobQuery(terminal=None if include_finished else False,
                                              name_glob=name))
        return self.views([r.job_id for r in rows], ask_scheduler=ask_scheduler)

    def history(self, job: str, *, folded: bool = False) -> list[tuple[ev.Event, str]]:
        """The job's story: every committed event with one line of text (``folded``: an
        execution's checkpoints as one line, core/story.py)."""
        from dispatch.core.story import story

        return story(self.store.read(self.resolve(job)), folded=folded)

    def logs(self, job: str, submission: int | None = None) -> Sequence[LogSource]:
        """The output streams (files, or readers of pod logs) of one submission's object
        (default: the latest that has one)."""
        j = self.job(job)
        subs = [s for s in j.submissions if s.ref is not None]
        if submission is not None:
            subs = [s for s in subs if s.number == submission]
        if not subs:
            which = f"submission {submission}" if submission is not None else "any submission"
            raise NotFound(f"job {j.id} has no scheduler object for {which} yet")
        ref = subs[-1].ref
        assert ref is not None
        return self.backends(j.spec.backend).logs(ref)

    # ---- making jobs --------------------------------------------------------------------
    def prepare(self, spec: JobSpec, source: str = "<spec>") -> tuple[JobSpec, Plan]:
        """The spec as it will be recorded, validated by its backend (nothing recorded)."""
        return prepare(spec, self.backends, source=source)

    def dry_run(self, spec: JobSpec, source: str = "<spec>") -> DryRun:
        """What the first submission would send to the scheduler; nothing is recorded."""
        return dry_run_of(spec, self.backends, source)

    def create(self, spec: JobSpec, source: str = "<spec>", *,
               environ: Mapping[str, str] | None = None) -> str:
        """Validate and record the job; no submission yet (a supervisor makes it).

        ``env_from_host`` values are read from ``environ`` (default: this process's
        environment) and kept beside the record (dispatch.backends.hostenv) before the job is
        recorded, so no supervisor ever sees the job without them."""
        from dispatch.backends import hostenv
        from dispatch.supervise.leases import scope_at_submit  # the cluster, asked once

        spec, plan = self.prepare(spec, source)
        values = hostenv.read_from(os.environ if environ is None else environ,
                                   spec.env_from_host, source)
        scope = scope_at_submit(spec.backend, self.backends(spec.backend))
        job_id = requests.new_job_id()
        if values:
            hostenv.save(job_id, values)
        try:
            return requests.create_job(self.store, spec, plan.declarations, self.clock(),
                                       actor=self.actor, scope=scope, job_id=job_id)
        except BaseException:
            if values:
                hostenv.forget(job_id)
            raise

    def submit(self, spec: JobSpec, source: str = "<spec>", *,
               notifier: Notifier | None = None,
               environ: Mapping[str, str] | None = None) -> str:
        """Record the job and make its first submission (an escalation that tick raises,
        such as a rejected submission, goes to ``notifier``)."""
        return self.submit_reporting(spec, source, notifier=notifier, environ=environ)[0]

    def submit_reporting(self, spec: JobSpec, source: str = "<spec>", *,
                         notifier: Notifier | None = None,
                         environ: Mapping[str, str] | None = None) -> tuple[str, list[str]]:
        """``submit``, with why its first submission could not reach the scheduler (empty
        when it did): a local root that cannot be made reads as never used afterwards, so
        only this tick knows (`dispatch submit` exits 4 on it)."""
        job_id = self.create(spec, source, environ=environ)
        report = self.supervisor(notifier=notifier).tick([job_id])
        return job_id, list(report.unreachable)

    def supersede(self, job: str, *, notifier: Notifier | None = None,
                  environ: Mapping[str, str] | None = None) -> str:
        """Run a finished job again: exactly one new job that names the old one, submitted
        (escalations of that first tick go to ``notifier``). Its ``env_from_host`` values
        are read again, from ``environ`` (default: this process's environment)."""
        from dispatch.backends import hostenv

        job_id = self.resolve(job)
        old = fold(self.store.read(job_id), self.clock())
        declarations = self.backends(old.spec.backend).declarations()
        values = hostenv.read_from(os.environ if environ is None else environ,
                                   old.spec.env_from_host, f"job {job_id}")
        new_id = requests.new_job_id()
        if values:
            hostenv.save(new_id, values)
        try:
            requests.supersede(self.store, job_id, self.clock(), self.actor, declarations,
                               new_id=new_id)
        except BaseException:
            if values:
                hostenv.forget(new_id)
            raise
        self.supervisor(notifier=notifier).tick([new_id])
        return new_id

    # ---- person requests: append and return; the supervisor acts ------------------------
    def cancel(self, job: str) -> JobView:
        job_id = self.resolve(job)
        requests.request_cancel(self.store, job_id, self.clock(), self.actor)
        return self.view(job_id)

    def resubmit(self, job: str) -> JobView:
        job_id = self.resolve(job)
        requests.resubmit_from_hold(self.store, job_id, self.clock(), self.actor)
        return self.view(job_id)

    def give_up(self, job: str) -> JobView:
        job_id = self.resolve(job)
        requests.give_up(self.store, job_id, self.clock(), self.actor)
        return self.view(job_id)

    # ---- segment health: an operator's decisions ------------------------------------------
    def segment_mark(self, job: str, task: str | None, reason: str) -> tuple[str, str]:
        """Mark the job's allocation unit (or array ``task``) unavailable: validated, the
        artifact written, then recorded. (job id, the artifact's path)."""
        from dispatch.segment_health.commands import mark

        job_id = self.resolve(job)
        return job_id, mark(self.store, job_id, task, reason, self.actor, self.clock())

    def segment_clear(self, job: str, task: str | None, reason: str = "") -> tuple[str, bool]:
        """Remove the unit's decision; recorded once the file is gone. (job id, removed)."""
        from dispatch.segment_health.commands import unmark

        job_id = self.resolve(job)
        return job_id, unmark(self.store, job_id, task, reason, self.actor, self.clock())

    def segment_list(self, job: str | None = None) -> list[dict[str, object]]:
        """The decisions published for ``job`` (or for every job with a decision directory)."""
        from dispatch.segment_health.commands import listing

        return listing(self.store, self.resolve(job) if job else None, self.clock())

    # ---- supervising --------------------------------------------------------------------
    def supervision_of(self, job: str, *, poll: float, notifier: Notifier | None = None
                       ) -> tuple[Supervision, str]:
        """A supervision of the job's scope, under its lease like ``dispatch supervise``
        (``dispatch run``, ``Job.wait``), and that scope."""
        import functools

        from dispatch.supervise.leases import Supervision
        from dispatch.supervise.loop import Supervisor

        scope = self.job(job).scope
        make = functools.partial(Supervisor, clock=self.clock)
        return Supervision(self.store, self.backends, [scope], poll=poll, notifier=notifier,
                           make_supervisor=make), scope

    def supervisor(self, *, notifier: Notifier | None = None, name: str | None = None
                   ) -> Supervisor:
        from dispatch.supervise.loop import Supervisor

        return Supervisor(self.store, self.backends, clock=self.clock, notifier=notifier,
                          name=name)
