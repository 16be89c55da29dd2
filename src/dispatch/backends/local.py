"""The local backend: a job's command as N node processes on this machine (the embedded default).

Each object is a directory ``<root>/objects/<ref>/``:

- ``meta.json``   what submit wrote (token, argv, env, limits, gated); never changes;
- ``runner.json`` the runner process (pid + start time + boot id, so a reused pid is not
  mistaken for it);
- ``status.json`` what the runner sees, rewritten atomically on every change;
- ``gate``, ``control/<request>``  requests to the runner, each file written atomically;
- ``node<i>.log``, ``runner.log``  output;
- ``vanished.json`` the backend's verdict on an object whose runner died without a final
  status (created once, exclusively, by whoever sees it first).

One detached runner process per object (``local_runner.py``) is the object's scheduler: it
starts the nodes, enforces the limits and writes the status. Everything here is found from
those files, never from memory, so a restarted supervisor (a new ``LocalBackend``) sees the
objects an earlier one created. The backend reports objects only; it never computes a job's
state (S10).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Literal

import msgspec

import dispatch
from dispatch.backends.base import DryRun, Submission, SubmitRejected
from dispatch.backends.local_runner import (
    CANCEL,
    CONTROL,
    GATE,
    LOSE_NODE,
    META,
    ORIGINAL_PYTHONPATH,
    PREEMPT,
    PUBLISH_WAIT_S,
    RUNNER,
    RUNNER_LOG,
    SET_PREFIX,
    STATUS,
    STOP,
    SUPERVISOR_ACTOR,
    UNSET,
    VANISHED,
    ControlRequest,
    NodeStatus,
    ObjectMeta,
    ObjectStatus,
    RunnerInfo,
    boot_id,
    create_exclusive,
    fsync_dir,
    node_name,
    process_alive,
    read_proc_stat,
    scan_procs,
    utcnow,
    write_atomic,
)
from dispatch.core.model import (
    Cause,
    CauseKind,
    Discovery,
    Execution,
    ObjectReport,
    Provenance,
    SchedulerUnreachable,
    State,
)
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec, SpecError
from dispatch.errors import NotFound, StateConflict

NO_SUCH_OBJECT = "no such local object"
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
Injection = Literal["preempt", "lose-node"]


class NoSuchObject(NotFound, LookupError):
    """A ref (or token, or job) that names no local object under this root."""

    def __init__(self, what: str, root: Path) -> None:
        super().__init__(f"{NO_SUCH_OBJECT}: {what} (under {root})")
        self.what = what
        self.root = root


class InjectError(StateConflict, ValueError):
    """An injection that cannot be made (the object is not running, no such node, ...)."""


def default_root() -> Path:
    """``$XDG_STATE_HOME/dispatch/local``, falling back to ``~/.local/state/dispatch/local``."""
    state_home = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state_home) / "dispatch" / "local"


def _read(path: Path) -> bytes:
    """Every file the backend reads goes through here (tests count the reads)."""
    return path.read_bytes()


def _decode_meta(raw: bytes) -> ObjectMeta:
    return msgspec.json.decode(raw, type=ObjectMeta, strict=True)


def _decode_status(raw: bytes) -> ObjectStatus:
    return msgspec.json.decode(raw, type=ObjectStatus, strict=True)


class LocalBackend:
    """The Backend protocol (backends/base.py) over local processes."""

    name = "local"

    def __init__(self, root: Path | str | None = None,
                 node_loss_window: timedelta = timedelta(seconds=5), *,
                 kill_grace: float = 3.0, python: str = sys.executable) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.node_loss_window = node_loss_window
        self.kill_grace = kill_grace
        self.python = python
        self.objects_dir = self.root / "objects"
        self.staging_dir = self.root / "staging"
        # Caches of files that never change once written: meta.json, runner.json, and the
        # report of an ended object. They save reads, never stand in for the disk.
        self._meta: dict[str, ObjectMeta] = {}
        self._runner: dict[str, RunnerInfo] = {}
        self._ended: dict[str, ObjectReport] = {}
        # Runners this process started, kept only to reap them when they exit.
        self._children: dict[str, subprocess.Popen[bytes]] = {}
        self._boot_id = boot_id()  # a pid is only this boot's pid

    # ------------------------------------------------------------ Backend protocol

    def declarations(self) -> Declarations:
        return Declarations(backend="local", native_actions=frozenset(),
                            node_loss_window=self.node_loss_window)

    def validate(self, spec: JobSpec) -> None:
        if spec.local:
            raise SpecError("<spec>", f"local.{sorted(spec.local)[0]}",
                            "the local backend takes no options")

    def dry_run(self, submission: Submission) -> DryRun:
        spec = submission.spec
        plan = json.dumps({"nodes": spec.nodes, "argv": list(spec.command),
                           "time_limit": spec.time_limit, "memory": spec.memory,
                           "env": spec.env, "gated": submission.gated}, indent=2)
        return DryRun(backend="local", documents=(("local runner plan", plan),))

    def close(self) -> None:
        """Nothing to release: objects live on disk, runners are detached."""

    def ready(self) -> None:
        """Nothing to check before the first submit creates the root."""

    def submit(self, submission: Submission) -> str:
        """Create the object and start its runner; the ref of an object already carrying
        ``submission.token`` when there is one (idempotent)."""
        existing = self._find(lambda m: m.token == submission.token)
        if existing:
            return min(existing, key=lambda ref: (self._meta[ref].created_at, ref))
        spec = submission.spec
        if spec.local:
            raise SubmitRejected(
                f"the local backend takes no options; unknown keys in local: "
                f"{', '.join(sorted(spec.local))}")
        try:
            self.objects_dir.mkdir(parents=True, exist_ok=True)
            self.staging_dir.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise SchedulerUnreachable("local", f"cannot create {self.root}: {err}") from None
        ref = self._new_ref()
        final = self.objects_dir / ref
        stage = self.staging_dir / f"{ref}.{secrets.token_hex(4)}"
        meta = ObjectMeta(
            ref=ref, token=submission.token, job_id=submission.job_id,
            submission=submission.number, name=spec.name, nodes=spec.nodes,
            argv=tuple(spec.command), env=dict(spec.env),
            workdir=str(Path(spec.workdir).resolve()) if spec.workdir else os.getcwd(),
            time_limit=float(spec.time_limit) if spec.time_limit is not None else None,
            memory=spec.memory, gated=submission.gated, kill_grace=self.kill_grace,
            created_at=utcnow())
        stage.mkdir()
        (stage / CONTROL).mkdir()
        write_atomic(stage / META, msgspec.json.encode(meta))
        # The runner starts first and waits for the object to be published; so every
        # published object has had a runner (a submit that crashes before the rename leaves
        # only a staging directory, and its runner leaves after PUBLISH_WAIT_S).
        try:
            with open(stage / RUNNER_LOG, "ab") as log:
                proc = subprocess.Popen(  # noqa: S603 - an argv list, never a shell
                    [self.python, "-m", "dispatch.backends.local_runner", str(final)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                    cwd=self.root, env=self._runner_env(), start_new_session=True,
                    close_fds=True)
        except OSError as err:
            shutil.rmtree(stage, ignore_errors=True)
            raise SubmitRejected(f"cannot start the local runner: {err}") from None
        st = read_proc_stat(proc.pid)
        info = RunnerInfo(pid=proc.pid, start_ticks=st.start_ticks if st else -1,
                          boot_id=self._boot_id)
        write_atomic(stage / RUNNER, msgspec.json.encode(info))
        fsync_dir(stage)
        try:
            os.rename(stage, final)
        except OSError as err:
            proc.kill()
            proc.wait()
            shutil.rmtree(stage, ignore_errors=True)
            raise SubmitRejected(f"cannot publish local object {ref}: {err}") from None
        fsync_dir(self.objects_dir)
        self._meta[ref] = meta
        self._runner[ref] = info
        self._children[ref] = proc
        return ref

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        """One scan of ``<root>/objects``: every object carrying one of ``tokens`` and every
        object in ``refs``. A ref with no object on disk is reported ended (unknown)."""
        wanted_tokens = set(tokens)
        wanted_refs = set(refs)
        now = utcnow()
        self._reap_runners()
        reports: list[ObjectReport] = []
        seen: set[str] = set()
        for ref in self._scan():
            meta = self._load_meta(ref)
            if isinstance(meta, str):
                if ref in wanted_refs:
                    seen.add(ref)
                    reports.append(_unreadable(ref, None, f"meta.json unreadable: {meta}"))
                continue
            if meta.token in wanted_tokens or ref in wanted_refs:
                seen.add(ref)
                reports.append(self._look(ref, meta, now))
        for ref in sorted(wanted_refs - seen):
            reports.append(self._missing(ref, now))
        return Discovery(at=now, objects=tuple(reports), complete=True)

    def stop(self, ref: str) -> None:
        """Stop on the supervisor's behalf: the object ends cancelled, actor "dispatch"."""
        self._request_end(ref, STOP, SUPERVISOR_ACTOR)

    def cancel(self, ref: str, actor: str | None = None) -> None:
        """Cancel because a person asked: the object ends cancelled with ``actor`` (by default
        the user this process runs as)."""
        self._request_end(ref, CANCEL, actor or _whoami())

    def open_gate(self, ref: str) -> None:
        report = self._report(ref)
        if report is None or report.ended:
            return
        objdir = self.objects_dir / ref
        write_atomic(objdir / GATE, utcnow().isoformat().encode())
        self._wake(ref)

    # ------------------------------------------------------------ beyond the protocol

    def inject(self, target: str, what: Injection, node: int | None = None) -> str:
        """Make the scheduler-side event ``what`` happen to a running object; returns its ref.

        ``target`` is a ref, a submission token, or a job id (then the job's live object with
        the highest submission number). ``preempt`` ends the object preempted; ``lose-node``
        kills node ``node`` (default: the last node) and leaves the object running with cause
        node-lost until it is stopped.
        """
        ref = self._resolve(target)
        report = self._report(ref)
        if report is None:
            raise NoSuchObject(target, self.root)
        if report.ended:
            raise InjectError(f"{ref} has already ended ({report.state.value})")
        meta = self._load_meta(ref)
        if isinstance(meta, str):
            raise InjectError(f"{ref}: meta.json unreadable: {meta}")
        if what == "preempt":
            if node is not None:
                raise InjectError("preempt takes no node")
            self._write_request(ref, PREEMPT, None)
        elif what == "lose-node":
            if report.state is not State.RUNNING:
                raise InjectError(f"{ref} is not running yet ({report.state.value}); "
                                  "no node to lose")
            index = meta.nodes - 1 if node is None else node
            if not 0 <= index < meta.nodes:
                raise InjectError(f"{ref} has nodes 0..{meta.nodes - 1}; no node {index}")
            status = self._read_status(ref)
            if isinstance(status, ObjectStatus) and any(
                    n.index == index and n.lost_at is not None for n in status.nodes):
                raise InjectError(f"{ref}: {node_name(index)} is already lost")
            self._write_request(ref, f"{LOSE_NODE}{index}", None)
        else:
            raise InjectError(f"unknown injection {what!r} (preempt or lose-node)")
        self._wake(ref)
        return ref

    def logs(self, ref: str) -> list[Path]:
        """The node logs of an object, node 0 first (only those that exist yet)."""
        objdir = self.objects_dir / ref
        meta = self._load_meta(ref) if self._exists(ref) else None
        if meta is None:
            raise NoSuchObject(ref, self.root)
        count = meta.nodes if isinstance(meta, ObjectMeta) else 0
        paths = [objdir / f"{node_name(i)}.log" for i in range(count)]
        return [p for p in paths if p.exists()]

    def runner_log(self, ref: str) -> Path:
        path = self.objects_dir / ref / RUNNER_LOG
        if not self._exists(ref):
            raise NoSuchObject(ref, self.root)
        return path

    def object_dir(self, ref: str) -> Path:
        return self.objects_dir / ref

    def prune(self, older_than: timedelta, now: datetime | None = None) -> list[str]:
        """Remove ended objects that ended more than ``older_than`` ago (and abandoned
        staging directories); returns the refs removed. Live objects are never touched."""
        now = now or utcnow()
        removed: list[str] = []
        for ref in self._scan():
            report = self._report(ref)
            if report is None or not report.ended:
                continue
            ended_at = _ended_at(report)
            if ended_at is None or now - ended_at < older_than:
                continue
            # Out of objects/ first, in one rename: a reader never sees half an object.
            trash = self.staging_dir / f".trash-{ref}-{secrets.token_hex(4)}"
            try:
                self.staging_dir.mkdir(parents=True, exist_ok=True)
                os.rename(self.objects_dir / ref, trash)
            except OSError:
                continue
            shutil.rmtree(trash, ignore_errors=True)
            self._meta.pop(ref, None)
            self._runner.pop(ref, None)
            self._ended.pop(ref, None)
            removed.append(ref)
        abandoned_after = max(older_than.total_seconds(), 2 * PUBLISH_WAIT_S)
        try:
            stages = list(os.scandir(self.staging_dir))
        except OSError:
            stages = []
        for entry in stages:
            try:
                age = time.time() - entry.stat(follow_symlinks=False).st_mtime
            except OSError:
                continue
            if age >= abandoned_after:
                shutil.rmtree(entry.path, ignore_errors=True)
        return removed

    # ------------------------------------------------------------ looking

    def _scan(self) -> list[str]:
        try:
            with os.scandir(self.objects_dir) as it:
                return sorted(e.name for e in it if not e.name.startswith("."))
        except FileNotFoundError:
            return []
        except OSError as err:
            raise SchedulerUnreachable("local", f"cannot read {self.objects_dir}: {err}") \
                from None

    def _find(self, match: Callable[[ObjectMeta], bool]) -> list[str]:
        out = []
        for ref in self._scan():
            meta = self._load_meta(ref)
            if isinstance(meta, ObjectMeta) and match(meta):
                out.append(ref)
        return out

    def _load_meta(self, ref: str) -> ObjectMeta | str:
        """The object's meta (cached: it never changes), or why it cannot be read."""
        cached = self._meta.get(ref)
        if cached is not None:
            return cached
        try:
            meta = _decode_meta(_read(self.objects_dir / ref / META))
        except FileNotFoundError:
            return "missing"
        except (OSError, msgspec.DecodeError) as err:
            return str(err)
        self._meta[ref] = meta
        return meta

    def _load_runner(self, ref: str) -> RunnerInfo | None:
        cached = self._runner.get(ref)
        if cached is not None:
            return cached
        try:
            info = msgspec.json.decode(_read(self.objects_dir / ref / RUNNER), type=RunnerInfo,
                                       strict=True)
        except (OSError, msgspec.DecodeError):
            return None
        self._runner[ref] = info
        return info

    def _read_status(self, ref: str, name: str = STATUS) -> ObjectStatus | str | None:
        try:
            return _decode_status(_read(self.objects_dir / ref / name))
        except FileNotFoundError:
            return None
        except (OSError, msgspec.DecodeError) as err:
            return str(err)

    def _runner_alive(self, ref: str) -> bool:
        info = self._load_runner(ref)
        return (info is not None and info.boot_id == self._boot_id
                and process_alive(info.pid, info.start_ticks))

    def _report(self, ref: str) -> ObjectReport | None:
        """The report of one object, or None when there is no such object."""
        if not self._exists(ref):
            return None
        meta = self._load_meta(ref)
        if isinstance(meta, str):
            return _unreadable(ref, None, f"meta.json unreadable: {meta}")
        return self._look(ref, meta, utcnow())

    def _look(self, ref: str, meta: ObjectMeta, now: datetime) -> ObjectReport:
        ended = self._ended.get(ref)
        if ended is not None:
            return ended
        status = self._read_status(ref)
        if isinstance(status, ObjectStatus) and status.final:
            return self._remember_end(ref, _from_status(status))
        if self._runner_alive(ref):
            if status is None:
                # The runner is starting and has not written its first status yet.
                return ObjectReport(ref=ref, token=meta.token, state=State.PENDING,
                                    cause=Cause(kind=CauseKind.NONE), gated=meta.gated)
            if isinstance(status, str):
                return _unreadable(ref, meta.token, f"status.json unreadable: {status}")
            return _from_status(status)
        # The runner is gone. It may have written its final status since we read it.
        status = self._read_status(ref)
        if isinstance(status, ObjectStatus) and status.final:
            return self._remember_end(ref, _from_status(status))
        verdict = self._read_status(ref, VANISHED)
        if isinstance(verdict, ObjectStatus):
            return self._remember_end(ref, _from_status(verdict))
        return self._remember_end(ref, self._vanished(ref, meta, status, now))

    def _remember_end(self, ref: str, report: ObjectReport) -> ObjectReport:
        self._ended[ref] = report
        return report

    def _vanished(self, ref: str, meta: ObjectMeta, status: ObjectStatus | str | None,
                  now: datetime) -> ObjectReport:
        """The runner died without a final status: kill what it left behind, then say the
        object ended with an unknown cause (never a guess at why)."""
        info = self._load_runner(ref)
        killed = _kill_leftovers(status.nodes if isinstance(status, ObjectStatus) else ())
        words = [f"the local runner (pid {info.pid if info else '?'}) vanished without "
                 "writing a final status"]
        if isinstance(status, ObjectStatus):
            words.append(f"its last status said {status.state.value}")
            if status.ending is not None:
                words.append(f"while ending with {status.ending.kind.value} "
                             f"({status.ending.detail})")
        elif status is None:
            words.append("it never wrote a status")
        else:
            words.append(f"its status was unreadable: {status}")
        if killed:
            words.append(f"killed left-over node processes {sorted(killed)}")
        last = _last_line(self.objects_dir / ref / RUNNER_LOG)
        if last:
            words.append(f"runner log ends: {last}")
        cause = Cause(kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
                      detail="; ".join(words), at=now)
        executions: tuple[Execution, ...] = ()
        nodes: tuple[NodeStatus, ...] = ()
        lost_since = None
        if isinstance(status, ObjectStatus):
            executions = tuple(
                ex if ex.ended else msgspec.structs.replace(ex, ended_at=now, cause=cause)
                for ex in status.executions)
            nodes = status.nodes
            lost_since = status.lost_since
        verdict = ObjectStatus(ref=ref, token=meta.token, state=State.FAILED, cause=cause,
                               executions=executions, nodes=nodes, lost_since=lost_since,
                               runner_pid=info.pid if info else None, updated_at=now,
                               heartbeat_at=now)
        path = self.objects_dir / ref / VANISHED
        if not create_exclusive(path, msgspec.json.encode(verdict)):
            # Another reader (another supervisor) pronounced it first: its words stand.
            winner = self._read_status(ref, VANISHED)
            if isinstance(winner, ObjectStatus):
                verdict = winner
        return _from_status(verdict)

    def _missing(self, ref: str, now: datetime) -> ObjectReport:
        # Nothing of it exists here, so nothing of it can run: it is reported ended
        # (base.py: "a ref the scheduler no longer knows must still be reported (ended)").
        return ObjectReport(ref=ref, token=None, state=State.FAILED, cause=Cause(
            kind=CauseKind.UNKNOWN, provenance=Provenance.SCHEDULER,
            detail=f"{NO_SUCH_OBJECT} {ref} under {self.objects_dir}", at=now))

    def _exists(self, ref: str) -> bool:
        # A ref is one directory name under objects/; never a path that leaves it.
        return _REF.fullmatch(ref) is not None and (self.objects_dir / ref).is_dir()

    def _resolve(self, target: str) -> str:
        if self._exists(target):
            return target
        by_token = self._find(lambda m: m.token == target)
        candidates = by_token or self._find(lambda m: m.job_id == target)
        if not candidates:
            raise NoSuchObject(target, self.root)
        alive = [r for r in candidates if (rep := self._report(r)) is not None and rep.alive]
        pool = alive or candidates
        return max(pool, key=lambda r: (self._meta[r].submission, self._meta[r].created_at))

    # ------------------------------------------------------------ acting

    def _request_end(self, ref: str, request: str, actor: str) -> None:
        report = self._report(ref)
        if report is None or report.ended:
            return  # nothing of it runs: stopping or cancelling it again is a no-op
        self._write_request(ref, request, actor)
        self._wake(ref)

    def _write_request(self, ref: str, name: str, actor: str | None) -> None:
        control = self.objects_dir / ref / CONTROL
        control.mkdir(exist_ok=True)
        write_atomic(control / name, msgspec.json.encode(ControlRequest(actor=actor,
                                                                        at=utcnow())))

    def _wake(self, ref: str) -> None:
        """Nudge the runner (it also looks by itself every half second). Only once it wrote
        its first status: before that SIGUSR1 could still have its default, deadly action."""
        info = self._load_runner(ref)
        if info is None or not (self.objects_dir / ref / STATUS).exists():
            return
        if self._runner_alive(ref):
            try:
                os.kill(info.pid, signal.SIGUSR1)
            except (ProcessLookupError, PermissionError):
                pass

    def _reap_runners(self) -> None:
        for ref, proc in list(self._children.items()):
            if proc.poll() is not None:
                del self._children[ref]

    def _runner_env(self) -> dict[str, str]:
        """The submitter's environment, plus what the runner needs to import dispatch; the
        runner gives the nodes the original PYTHONPATH back."""
        env = dict(os.environ)
        package_parent = str(Path(dispatch.__file__).resolve().parent.parent)
        original = env.get("PYTHONPATH")
        env[ORIGINAL_PYTHONPATH] = SET_PREFIX + original if original is not None else UNSET
        env["PYTHONPATH"] = package_parent + (os.pathsep + original if original else "")
        return env

    def _new_ref(self) -> str:
        while True:
            ref = f"l-{secrets.token_hex(4)}"
            if not (self.objects_dir / ref).exists():
                return ref


# ---------------------------------------------------------------- pure helpers


def _from_status(status: ObjectStatus) -> ObjectReport:
    return ObjectReport(ref=status.ref, token=status.token, state=status.state,
                        cause=status.cause, executions=status.executions,
                        nodes=tuple(n.name for n in status.nodes),
                        lost_since=status.lost_since, gated=status.gated)


def _unreadable(ref: str, token: str | None, detail: str) -> ObjectReport:
    # We cannot tell whether it still runs: unknown, and alive (never "ended" on a guess).
    return ObjectReport(ref=ref, token=token, state=State.UNKNOWN,
                        cause=Cause(kind=CauseKind.UNKNOWN, detail=detail))


def _ended_at(report: ObjectReport) -> datetime | None:
    for ex in reversed(report.executions):
        if ex.ended_at is not None:
            return ex.ended_at
    return report.cause.at


def _last_line(path: Path) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 4096))
            tail = f.read().decode(errors="replace")
    except OSError:
        return ""
    lines = [line for line in tail.splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _kill_leftovers(nodes: Iterable[NodeStatus]) -> set[int]:
    """SIGKILL what is left of the nodes of a vanished runner: each node led its own session,
    so its processes are found by session id (only while its leader, if still there, is the
    very process the runner started)."""
    sessions: set[int] = set()
    for node in nodes:
        if node.pid is None or node.start_ticks is None:
            continue
        leader = read_proc_stat(node.pid)
        if leader is not None and leader.start_ticks != node.start_ticks:
            continue  # the pid now belongs to someone else
        sessions.add(node.pid)
    if not sessions:
        return set()
    killed: set[int] = set()
    for st in scan_procs().values():
        if st.sid in sessions and st.state not in ("Z", "X"):
            try:
                os.kill(st.pid, signal.SIGKILL)
                killed.add(st.pid)
            except (ProcessLookupError, PermissionError):
                pass
    return killed


def _whoami() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid {os.getuid()}"


__all__ = [
    "InjectError",
    "LocalBackend",
    "NoSuchObject",
    "default_root",
]
