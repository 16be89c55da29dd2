"""The local backend: a job's command as N node processes on this machine (the embedded default).

One detached runner process per object (``runner.py``) is the object's scheduler: it starts
the nodes, enforces the limits and writes the status (formats in ``wire.py``). Everything here
is found from the files under the root (``root.py``), never from memory, so a restarted
supervisor (a new ``LocalBackend``) sees the objects an earlier one created. The backend
reports objects only; it never computes a job's state (S10).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

import msgspec

from dispatch.backends.base import DryRun, Submission, SubmitRejected
from dispatch.backends.local.claims import release_published, submit_claim
from dispatch.backends.local.errors import (
    BadInjection,
    InjectError,
    NoSuchObject,
    unwritable,
    write_failed,
)
from dispatch.backends.local.journal import note_change
from dispatch.backends.local.looks import FULL_LOOK_EVERY, LocalLooks
from dispatch.backends.local.nodes import runner_environment
from dispatch.backends.local.plan import LocalDryRun, dry_run, spec_problems
from dispatch.backends.local.procs import boot_id, pid_max, process_alive, read_proc_stat
from dispatch.backends.local.reports import (
    ended_at,
    from_status,
    unreadable,
    vanished,
    whoami,
)
from dispatch.backends.local.root import LocalRoot, default_root, new_ref, write_request
from dispatch.backends.local.wire import (
    CANCEL,
    CONTROL,
    GATE,
    LOSE_NODE,
    META,
    PREEMPT,
    PUBLISH_WAIT_S,
    RUNNER,
    RUNNER_LOG,
    STATUS,
    STOP,
    SUPERVISOR_ACTOR,
    VANISHED,
    ControlRequest,
    ObjectMeta,
    ObjectStatus,
    RunnerInfo,
    node_name,
    utcnow,
)
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    ObjectReport,
    State,
)
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec, SpecError
from dispatch.support import failpoints as fp
from dispatch.support.files import create_exclusive, fsync_dir, write_atomic
from dispatch.support.isolated import isolated_argv, package_parent

RUNNER_MODULE = "dispatch.backends.local.runner"
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
Injection = Literal["preempt", "lose-node"]


class LocalBackend:
    """The Backend protocol (backends/base.py) over local processes. A backend reusing it
    sets ``name`` in a subclass: its declarations, dry run and scope carry that name."""

    name = "local"
    reports_changes = True  # Discovery.changes (looks.py)

    def __init__(self, root: Path | str | None = None,
                 node_loss_window: timedelta = timedelta(seconds=5), *,
                 kill_grace: float = 3.0, python: str = sys.executable,
                 root_variable: str | None = None,
                 full_look_every: timedelta | None = FULL_LOOK_EVERY) -> None:
        # Absolute: the runner starts in the root and is handed its object's path.
        self.root = Path(os.path.abspath(root)) if root is not None else default_root()
        self.node_loss_window = node_loss_window
        self.kill_grace = kill_grace
        self.python = python
        self.disk = LocalRoot(self.root, root_variable)
        self.objects_dir, self.staging_dir = self.disk.objects_dir, self.disk.staging_dir
        # Reports of ended objects: they never change; they save reads, never stand in for disk
        self._ended: dict[str, ObjectReport] = {}
        # Runners this process started, kept only to reap them when they exit.
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._child_of: dict[int, str] = {}
        self._boot_id = boot_id()  # a pid is only this boot's pid
        self.looks = LocalLooks(self, full_look_every)

    # ------------------------------------------------------------ Backend protocol

    # A local publish is one rename inside the supervisor's own process, under the token's
    # claim (claims.py): once that process is gone nothing of its submit is in flight; while
    # it lives, even stopped, another submit of the token waits (SubmitInFlight).
    submit_in_flight = timedelta(0)

    def declarations(self) -> Declarations:
        return Declarations(backend=self.name, native_actions=frozenset(),
                            node_loss_window=self.node_loss_window)

    def validate(self, spec: JobSpec, source: str = "<spec>") -> None:
        """Refuse what the local backend cannot run, before anything is recorded: any key in
        ``local:`` (it takes none), a workdir that is not a directory here, NUL bytes, more
        nodes than this machine has process ids."""
        problems = spec_problems(spec, pid_max())
        if problems:
            where, message = problems[0]
            more = "; ".join(f"{w}: {m}" for w, m in problems[1:])
            raise SpecError(source, where, message + (f" (and {more})" if more else ""))

    def dry_run(self, submission: Submission) -> DryRun:
        """What ``submit`` would do, without doing any of it (nothing is written)."""
        return self.plan(submission).as_dry_run()

    def plan(self, submission: Submission) -> LocalDryRun:
        """The runner and nodes ``submit`` would start, as data."""
        return dry_run(submission, root=self.root, kill_grace=self.kill_grace, backend=self.name,
                       runner_argv=self.runner_argv(f"{self.root}/objects/<ref>"))

    def runner_argv(self, objdir: str) -> tuple[str, ...]:
        """``python -m dispatch.backends.local.runner OBJDIR``, isolated
        (dispatch/support/isolated.py): the runner imports nothing from a working directory or
        a PYTHONPATH."""
        return tuple(isolated_argv(self.python, RUNNER_MODULE, [objdir], package_parent()))

    def ready(self) -> None:
        """Refuse a root another user could change (``LocalRoot.check_trusted``)."""
        self.disk.check_trusted()

    def admit(self, spec: JobSpec) -> None:
        """``validate`` is the whole of what this scheduler would check."""

    def submit(self, submission: Submission) -> str:
        """Create the object and start its runner; the ref of an object already carrying
        ``submission.token`` when there is one (idempotent)."""
        try:
            self.validate(submission.spec)
        except SpecError as err:
            raise SubmitRejected(str(err)) from None
        marker = self.disk.claim()
        # Held from the look to the publish: one object per token, even across a SIGSTOP.
        with submit_claim(self.root, submission.token) as claim:
            existing = self.disk.find(lambda m: m.token == submission.token)
            ref = (min(existing, key=lambda ref: (self._meta(ref).created_at, ref))
                   if existing else self._create(submission, marker.id))
            release_published(claim)
            return ref

    def _create(self, submission: Submission, root_id: str) -> str:
        spec = submission.spec
        ref = self._new_ref(root_id)
        final = self.objects_dir / ref
        stage = self.staging_dir / f"{ref}.{secrets.token_hex(4)}"
        meta = ObjectMeta(
            ref=ref, token=submission.token, job_id=submission.job_id,
            submission=submission.number, name=spec.name, nodes=spec.nodes,
            argv=tuple(spec.command), env=dict(spec.env),
            workdir=str(Path(spec.workdir).resolve()) if spec.workdir else os.getcwd(),
            time_limit=float(spec.time_limit) if spec.time_limit is not None else None,
            memory=spec.memory, gated=submission.gated, kill_grace=self.kill_grace,
            created_at=utcnow(), mark=f"{ref}:{secrets.token_hex(8)}", root_id=root_id,
            max_output_bytes=spec.max_output_bytes,
            checkpoint_pattern=spec.progress.checkpoint_pattern if spec.progress else "")
        try:
            # meta.json holds the job's environment (secrets among it): 0600 in a 0700
            # object directory, whatever the umask (mkdir only ever narrows the mode).
            stage.mkdir(mode=0o700)
            (stage / CONTROL).mkdir()
            write_atomic(stage / META, msgspec.json.encode(meta), mode=0o600)
        except OSError as err:
            shutil.rmtree(stage, ignore_errors=True)
            raise write_failed(f"cannot write local object {ref}", err) from None
        # The runner starts first and waits for the object to be published; so every
        # published object has had a runner (a submit that crashes before the rename leaves
        # only a staging directory, and its runner leaves after PUBLISH_WAIT_S).
        try:
            with open(stage / RUNNER_LOG, "ab") as log:
                proc = subprocess.Popen(  # noqa: S603 - an argv list, never a shell
                    self.runner_argv(str(final)),
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    cwd=self.root, env=runner_environment(), start_new_session=True,
                    close_fds=True)
        except OSError as err:
            shutil.rmtree(stage, ignore_errors=True)
            raise write_failed("cannot start the local runner", err) from None
        st = read_proc_stat(proc.pid)
        info = RunnerInfo(pid=proc.pid, start_ticks=st.start_ticks if st else -1,
                          boot_id=self._boot_id)
        try:
            write_atomic(stage / RUNNER, msgspec.json.encode(info))
            fsync_dir(stage)
            if fp.ARMED:  # a test's crash window: staged, the runner waiting, not published
                fp.hit("local-submit:staged")
            os.rename(stage, final)
            fsync_dir(self.objects_dir)
        except OSError as err:
            proc.kill()
            proc.wait()
            shutil.rmtree(stage, ignore_errors=True)
            raise write_failed(f"cannot publish local object {ref}", err) from None
        self.disk.remember(meta, info)
        self._children[ref] = proc
        self._child_of[proc.pid] = ref
        note_change(self.root, ref)  # every reader's next look reads it (journal.py)
        return ref

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        """The objects carrying one of ``tokens`` and the objects ``refs``, and which of this
        root's objects changed since the previous look (looks.py: a full look reads every
        object's files, a changed look only those the change journal or a runner's death
        names). A ref with no object is reported ended only when the root is there and is
        the one the ref was made in (its marker): a root that is absent is unreachable, and
        a ref of another root is left out of an incomplete look; never a verdict on what
        cannot be seen.
        """
        return self.looks.discover(tokens, refs)

    def stop(self, ref: str) -> None:
        """Stop on the supervisor's behalf: the object ends cancelled, actor "dispatch"."""
        self._request_end(ref, STOP, SUPERVISOR_ACTOR)

    def cancel(self, ref: str, actor: str | None = None) -> None:
        """Cancel because a person asked: the object ends cancelled with ``actor`` (by default
        the user this process runs as)."""
        self._request_end(ref, CANCEL, actor or whoami())

    def open_gate(self, ref: str) -> None:
        report = self._report(ref)
        if report is None or report.ended:
            return
        try:
            write_atomic(self.objects_dir / ref / GATE, utcnow().isoformat().encode())
        except OSError as err:
            raise unwritable(f"cannot open the gate of {ref}", err) from None
        self._wake(ref)

    def logs(self, ref: str) -> list[Path]:
        """The node logs of an object, node 0 first (only those that exist yet)."""
        self.disk.marker()
        if not self._exists(ref):
            raise NoSuchObject(ref, self.root)
        meta = self.disk.load_meta(ref)
        count = meta.nodes if isinstance(meta, ObjectMeta) else 0
        paths = [self.objects_dir / ref / f"{node_name(i)}.log" for i in range(count)]
        return [p for p in paths if p.exists()]

    def close(self) -> None:
        """Runners outlive the backend by design: reap those that ended, let their pidfds go."""
        self._reap_runners()
        self.looks.close()

    # ------------------------------------------------------------ beyond the protocol

    def inject(self, target: str, what: Injection, node: int | None = None) -> str:
        """Make the scheduler-side event ``what`` happen to a running object; returns its ref.

        ``target`` is a ref, a submission token, or a job id (then the job's live object with
        the highest submission number). ``preempt`` ends the object preempted; ``lose-node``
        kills node ``node`` (default: the last node) and leaves the object running with cause
        node-lost until it is stopped.
        """
        if what not in ("preempt", "lose-node"):
            raise BadInjection(f"unknown injection {what!r} (preempt or lose-node)")
        if what == "preempt" and node is not None:
            raise BadInjection(f"preempt takes no node (got node {node}): it ends the whole "
                               "object")
        ref = self._resolve(target)
        report = self._report(ref)
        if report is None:
            raise NoSuchObject(target, self.root)
        meta = self.disk.load_meta(ref)
        if isinstance(meta, str):
            raise InjectError(f"{ref}: meta.json unreadable: {meta}")
        if what == "lose-node":
            index = meta.nodes - 1 if node is None else node
            if not 0 <= index < meta.nodes:
                raise BadInjection(f"{ref} has nodes 0..{meta.nodes - 1}; no node {index}")
        if report.ended:
            raise InjectError(f"{ref} has already ended ({report.state.value})")
        if what == "preempt":
            self._write_request(ref, PREEMPT, None)
        else:
            if report.state is not State.RUNNING:
                raise InjectError(f"{ref} is not running yet ({report.state.value}); "
                                  "no node to lose")
            status = self.disk.read_status(ref)
            if isinstance(status, ObjectStatus) and any(
                    n.index == index and n.lost_at is not None for n in status.nodes):
                raise InjectError(f"{ref}: {node_name(index)} is already lost")
            self._write_request(ref, f"{LOSE_NODE}{index}", None)
        self._wake(ref)
        return ref

    def runner_log(self, ref: str) -> Path:
        self.disk.marker()
        if not self._exists(ref):
            raise NoSuchObject(ref, self.root)
        return self.objects_dir / ref / RUNNER_LOG

    def object_dir(self, ref: str) -> Path:
        return self.objects_dir / ref

    def prune(self, older_than: timedelta, now: datetime | None = None) -> list[str]:
        """Remove ended objects that ended more than ``older_than`` ago (and abandoned
        staging directories); returns the refs removed. Live objects are never touched."""
        now = now or utcnow()
        self.disk.marker()
        removed: list[str] = []
        for ref in self.disk.scan():
            report = self._report(ref)
            if report is None or not report.ended:
                continue
            end = ended_at(report)
            if end is None or now - end < older_than:
                continue
            if not self.disk.remove(ref):
                continue
            note_change(self.root, ref)
            self._ended.pop(ref, None)
            removed.append(ref)
        self.disk.sweep_staging(max(older_than.total_seconds(), 2 * PUBLISH_WAIT_S))
        return removed

    # ------------------------------------------------------------ looking

    def _meta(self, ref: str) -> ObjectMeta:
        meta = self.disk.load_meta(ref)
        assert isinstance(meta, ObjectMeta)
        return meta

    def _runner_alive(self, ref: str) -> bool:
        info = self.disk.load_runner(ref)
        return (info is not None and info.boot_id == self._boot_id
                and process_alive(info.pid, info.start_ticks))

    def _report(self, ref: str) -> ObjectReport | None:
        """The report of one object, or None when there is no such object (the root is
        checked first: an absent root raises SchedulerUnreachable)."""
        self.disk.marker()
        if not self._exists(ref):
            return None
        meta = self.disk.load_meta(ref)
        if isinstance(meta, str):
            return unreadable(ref, None, f"meta.json unreadable: {meta}")
        return self._look(ref, meta, utcnow())

    def _look(self, ref: str, meta: ObjectMeta, now: datetime) -> ObjectReport:
        ended = self._ended.get(ref)
        if ended is not None:
            return ended
        status = self.disk.read_status(ref)
        if isinstance(status, ObjectStatus) and status.final:
            return self._remember_end(ref, from_status(status, self.objects_dir / ref))
        if self._runner_alive(ref):
            if status is None:
                # The runner is starting and has not written its first status yet.
                return ObjectReport(ref=ref, token=meta.token, state=State.PENDING,
                                    cause=Cause(kind=CauseKind.NONE), gated=meta.gated)
            if isinstance(status, str):
                return unreadable(ref, meta.token, f"status.json unreadable: {status}")
            return from_status(status, self.objects_dir / ref)
        # The runner is gone. It may have written its final status since we read it.
        status = self.disk.read_status(ref)
        if isinstance(status, ObjectStatus) and status.final:
            return self._remember_end(ref, from_status(status, self.objects_dir / ref))
        verdict = self.disk.read_status(ref, VANISHED)
        if isinstance(verdict, ObjectStatus):
            return self._remember_end(ref, from_status(verdict))
        return self._remember_end(ref, self._vanished(ref, meta, status, now))

    def _remember_end(self, ref: str, report: ObjectReport) -> ObjectReport:
        if not report.ended:
            return report  # a verdict not yet written: looked at again next time
        self._ended[ref] = report
        return report

    def _vanished(self, ref: str, meta: ObjectMeta, status: ObjectStatus | str | None,
                  now: datetime) -> ObjectReport:
        """The runner died without a final status: kill what it left behind (found by
        session and by the object's mark), then say the object ended with an unknown cause
        (never a guess at why). The first reader's verdict is the one on disk."""
        verdict = vanished(ref, meta, status, self.disk.load_runner(ref),
                           self.objects_dir / ref / RUNNER_LOG, now)
        try:
            written = create_exclusive(self.objects_dir / ref / VANISHED,
                                       msgspec.json.encode(verdict))
        except OSError as err:
            # Said only once it is on disk (every reader must read the same verdict): until
            # then the object is unknown, never ended on what could not be written.
            return unreadable(ref, meta.token, f"the local runner is gone and its verdict "
                                               f"cannot be written yet: {err}")
        if written:
            note_change(self.root, ref)
        if not written:
            winner = self.disk.read_status(ref, VANISHED)
            if isinstance(winner, ObjectStatus):
                verdict = winner
        return from_status(verdict)

    def _exists(self, ref: str) -> bool:
        # A ref is one directory name under objects/; never a path that leaves it.
        return _REF.fullmatch(ref) is not None and (self.objects_dir / ref).is_dir()

    def _resolve(self, target: str) -> str:
        self.disk.marker()
        if self._exists(target):
            return target
        by_token = self.disk.find(lambda m: m.token == target)
        candidates = by_token or self.disk.find(lambda m: m.job_id == target)
        if not candidates:
            raise NoSuchObject(target, self.root)
        alive = [r for r in candidates if (rep := self._report(r)) is not None and rep.alive]
        pool = alive or candidates
        return max(pool, key=lambda r: (self._meta(r).submission, self._meta(r).created_at))

    # ------------------------------------------------------------ acting

    def _request_end(self, ref: str, request: str, actor: str) -> None:
        report = self._report(ref)
        if report is None or report.ended:
            return  # nothing of it runs: stopping or cancelling it again is a no-op
        self._write_request(ref, request, actor)
        self._wake(ref)

    def _write_request(self, ref: str, name: str, actor: str | None) -> None:
        try:
            write_request(self.objects_dir / ref / CONTROL, name,
                          msgspec.json.encode(ControlRequest(actor=actor, at=utcnow())))
        except OSError as err:
            raise unwritable(f"cannot write the request {name} for {ref}", err) from None

    def _wake(self, ref: str) -> None:
        """Nudge the runner (it also looks by itself every half second). Only once it wrote
        its first status: before that SIGUSR1 could still have its default, deadly action."""
        info = self.disk.load_runner(ref)
        if info is None or not (self.objects_dir / ref / STATUS).exists():
            return
        if self._runner_alive(ref):
            try:
                os.kill(info.pid, signal.SIGUSR1)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap_exited(self) -> None:
        """Reap the runners this process started that exited, peeking at each exit first
        (waitid WNOWAIT): another child's exit (a tool's) is left to its own waiter."""
        while self._children:
            try:
                exited = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            ref = self._child_of.get(exited.si_pid) if exited is not None else None
            if ref is None:
                return
            self._reap_runners([ref])
            if ref in self._children:
                return  # not reaped after all: looked at again next time

    def _reap_runners(self, refs: Iterable[str] | None = None) -> None:
        """Reap the runners this process started that ended (among ``refs``: those found
        dead; None: all of them)."""
        for ref in list(self._children) if refs is None else refs:
            proc = self._children.get(ref)
            if proc is not None and proc.poll() is not None:
                del self._children[ref]
                self._child_of.pop(proc.pid, None)

    def _new_ref(self, root_id: str) -> str:
        while True:
            ref = new_ref(root_id)
            if not (self.objects_dir / ref).exists():
                return ref

