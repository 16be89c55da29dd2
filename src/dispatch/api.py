"""The Python API: submit a job, read its state and cause, wait for it, act on it.

    import dispatch

    job = dispatch.submit("job.yaml")          # a path, a dict parsed from YAML, or a JobSpec
    status = job.wait(timeout=600)             # supervises the job itself until its outcome
    print(status.state, status.cause)

A thin layer over ``dispatch.service.Service``, like the CLI: every call opens the record
store it names (``store=``: a SQLite path or ``postgresql://`` URL; default as the CLI:
$DISPATCH_STORE, else the SQLite file under $XDG_STATE_HOME/dispatch), does one operation
and closes it again, so a ``Job`` is only a job id and a store and can be kept for as long as
you like. Errors are the CLI's: ``DispatchError`` subclasses (``BadInput``, ``NotFound``,
``Unreachable``, ``StoreUnusable``, ``StateConflict``, ``BackendError``).
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from dispatch.backends.registry import traits
from dispatch.core import events as ev
from dispatch.core.model import CauseKind, State, Status
from dispatch.core.record import Job as RecordJob
from dispatch.core.spec import JobSpec, SpecError, parse_spec
from dispatch.core.status import plain
from dispatch.errors import EXIT_FAILED, BadInput, DispatchError
from dispatch.service import Service
from dispatch.service.logs import Follow, Piece, check_count
from dispatch.service.views import cause_text
from dispatch.support.tails import text_of

E = TypeVar("E", bound=StrEnum)

__all__ = ["BadArgument", "HistoryLine", "Job", "LogLine", "get", "jobs", "submit"]

Store = str | os.PathLike[str] | None
SpecLike = str | os.PathLike[str] | Mapping[str, Any] | JobSpec

# Seconds between log reads when following, and the default between ticks in wait().
FOLLOW_POLL_S = 0.5
WAIT_POLL_S = 1.0


class BadArgument(BadInput, ValueError):
    """An argument of the Python API that cannot be used (wrong type or value); names the
    parameter and what was given (exit code 2, as every BadInput)."""

    def __init__(self, parameter: str, wanted: str, given: object) -> None:
        self.parameter = parameter
        super().__init__(f"{parameter}: expected {wanted}, got {_shown(given)}")


def _shown(value: object) -> str:
    text = repr(value)
    return f"{type(value).__name__} {text[:60]}{'...' if len(text) > 60 else ''}"


def _store_url(store: object) -> str | None:
    if store is None:
        return None
    if isinstance(store, str | os.PathLike):
        url = os.fspath(store)
        if isinstance(url, str) and url:
            return url
    raise BadArgument("store", "a SQLite path or postgresql:// URL (str or os.PathLike), or "
                               "None for the default", store)


def _job_ref(job: object, parameter: str = "job") -> str:
    if isinstance(job, str) and job:
        return job
    raise BadArgument(parameter, "a job id or name (a non-empty str)", job)


def _open(store: Store) -> Service:
    return Service.open(_store_url(store))


def _spec(spec: SpecLike) -> JobSpec:
    if isinstance(spec, JobSpec):
        return spec
    if isinstance(spec, Mapping):
        return parse_spec(dict(spec), "<dict>", backends=traits())
    if isinstance(spec, (str, os.PathLike)):
        from dispatch.service.specfile import load_spec

        return load_spec(Path(spec))
    raise SpecError("<spec>", "", f"a spec is a path, a mapping or a JobSpec, not "
                                  f"{type(spec).__name__}")


def submit(spec: SpecLike, *, store: Store = None) -> Job:
    """Record a job and make its first submission; returns at once (``Job.wait`` or a
    running ``dispatch supervise`` / ``dispatch serve`` carries it on).

    ``spec``: a path to a YAML spec, a mapping as parsed from YAML (same keys, same
    checks), or a ``JobSpec``. A relative command path means what it means in the current
    directory (the spec's ``workdir`` defaults to it). Rules nobody will enforce on the
    job's backend are reported as ``UserWarning`` (like the CLI's warnings).

    Raises ``BadInput`` (``SpecError``, ``PolicyError``) for a spec that cannot be used,
    ``StoreUnusable`` for a record store that cannot be used."""
    _store_url(store)  # a bad store is named before the spec is read
    parsed = _spec(spec)
    with _open(store) as service:
        _, plan = service.prepare(parsed)
        for line in plan.unenforced():
            warnings.warn(f"{line} (an execution ending with it fails the job)",
                          UserWarning, stacklevel=2)
        job_id = service.submit(parsed)
    return Job(job_id, store=store)


def get(job: str, *, store: Store = None) -> Job:
    """The job ``job`` means, as on the command line: an id, a unique id prefix (4
    characters or more), or a name (the newest job of its supersede chain). ``NotFound``
    when there is none, or when unrelated jobs share the name (the message lists them)."""
    ref = _job_ref(job)
    with _open(store) as service:
        job_id = service.resolve(ref)
    return Job(job_id, store=store)


def jobs(all: bool = False, *, state: str | State | None = None,  # noqa: A002 - --all
         name: str | None = None, cause: str | CauseKind | None = None,
         since: str | datetime | None = None, backend: str | None = None,
         store: Store = None) -> list[Job]:
    """The unfinished jobs, oldest first; with ``all``, the finished ones too. The filters
    are ``dispatch ls``'s and mean what they mean there: ``state`` a state or ``"live"``
    (a finished state implies ``all``), ``name`` a name or a shell-style pattern
    (``"sweep-*"``), ``cause`` the job's cause or any cause of its committed history
    (implies ``all``), ``since`` created at or after (a datetime, an ISO 8601 text, or an
    age: ``"2h"``, ``"7d"``), ``backend``. The store's index answers them (its jobs table,
    and the causes each history holds); only a state or a cause folds the jobs left, all
    together, never a record read per job. ``BadInput`` for a filter that is not one."""
    from dispatch.service.names import check_pattern
    from dispatch.service.pages import parse_since, select_jobs
    from dispatch.stores.base import sort_key_us
    from dispatch.support.clock import utcnow

    live = state == "live"
    chosen = None if state is None or live else _enum(State, state, "state")
    why = None if cause is None else _enum(CauseKind, cause, "cause")
    if name is not None:
        check_pattern(name, "name")
    since_us = None
    if isinstance(since, datetime):
        if since.tzinfo is None:
            raise BadInput("since: a datetime with its zone (e.g. datetime.now(UTC))")
        since_us = sort_key_us(since)
    elif since is not None:
        since_us = parse_since(since, utcnow(), option="since")
    with _open(store) as service:
        ids = select_jobs(service, finished=all, state=chosen, live=live, cause=why,
                          backend=backend, name=name, since_us=since_us)
    return [Job(job_id, store=store) for job_id in ids]


def _enum(kind: type[E], value: str, what: str) -> E:
    """``value`` as a member of ``kind`` (itself, or its word); BadInput naming the words."""
    try:
        return kind(value)
    except ValueError:
        words = ", ".join(m.value for m in kind)
        extra = "live, " if kind is State else ""
        raise BadInput(f"{what}: {value!r} is not a {what}; one of {extra}{words}") from None


class JobFailed(DispatchError):
    """``Job.wait(check=True)``: the job's committed outcome is failed. ``status`` is its
    final Status; ``error`` the application's own error of its last end (its first failing
    rank and words), when one was captured; the message carries both voices."""

    exit_code = EXIT_FAILED
    error_code = "job-failed"

    def __init__(self, status: Status) -> None:
        from dispatch.core.app_error import one_line

        self.status = status
        self.error = status.error
        words = f"job {status.job} ({status.name}) failed: {cause_text(status.cause)}"
        if status.cause is not None and status.cause.detail:
            words += f" — {status.cause.detail}"
        if status.error is not None:
            words += f"; application error: {one_line(status.error)}"
        super().__init__(words)


class HistoryLine(NamedTuple):
    """One committed event of a job's story and its line of text (as ``dispatch history``
    prints it)."""

    event: ev.Event
    text: str

    @property
    def seq(self) -> int:
        return self.event.seq

    @property
    def at(self) -> datetime:
        return self.event.at


@dataclass(frozen=True)
class Job:
    """A handle on one recorded job: its id and the store its record lives in. Every method
    reads or appends to the record when called; nothing is cached."""

    id: str
    store: Store = None

    def __post_init__(self) -> None:
        _job_ref(self.id, "id")
        _store_url(self.store)

    def __repr__(self) -> str:
        return f"Job({self.id!r})"

    @property
    def name(self) -> str:
        with _open(self.store) as service:
            return service.job(self.id).name

    def status(self) -> Status:
        """The job's state and cause now (its scheduler asked, like ``dispatch status``).

        Raises ``SchedulerUnreachable`` (an ``Unreachable``) when the scheduler cannot be
        asked: never a state. ``record()`` reads the record alone."""
        with _open(self.store) as service:
            return plain(service.status(self.id))

    def record(self) -> Status:
        """The job's state as its record alone says (no scheduler asked)."""
        with _open(self.store) as service:
            view = service.view(self.id, ask_scheduler=False)
        if view.status is None:
            assert view.error is not None
            raise view.error
        return plain(view.status)

    def wait(self, timeout: float | None = None, *, poll: float = WAIT_POLL_S,
             supervise: bool = True, check: bool = False) -> Status:
        """Block until the job's outcome is committed; return its final Status (whatever
        the outcome; with ``check``, a failed one raises ``JobFailed`` carrying the status
        and the application's error).

        With ``supervise`` (the default) this process supervises the job's scope while it
        waits, exactly as ``dispatch run`` does, under the scope's lease: when no supervisor
        is active there it takes the lease and ticks every ``poll`` seconds (submit, recover
        by cause, commit); when ``dispatch supervise`` or ``dispatch serve`` is active there,
        it only watches the record while that one acts, and takes over if it stops. So a
        waiter never makes a second active supervisor. Escalations decided by this process
        go to the record (``history()``, ``status().escalations``), not to another
        supervisor's webhook; ``supervise=False`` only watches the record.

        Raises ``TimeoutError`` when ``timeout`` seconds pass first (the job goes on);
        ``BadInput`` for a ``timeout`` that is not None or a finite number of seconds, 0 or
        more (nan would wait for ever), or a ``poll`` outside 0.05 s to 10 min."""
        from dispatch.support.durations import poll_seconds, timeout_seconds

        timeout = timeout_seconds(timeout, "Job.wait timeout")
        poll = poll_seconds(poll, "Job.wait poll")
        final = self._wait(timeout, poll, supervise)
        if check and final.state is State.FAILED:
            raise JobFailed(final)
        return final

    def _wait(self, timeout: float | None, poll: float, supervise: bool) -> Status:
        deadline = None if timeout is None else time.monotonic() + timeout
        with _open(self.store) as service:
            if not supervise:
                return self._watch(service, deadline, timeout, poll)
            sup, scope = service.supervision_of(self.id, poll=poll)
            committed_at: list[float] = []

            def done() -> bool:
                past = deadline is not None and time.monotonic() >= deadline
                if service.job(self.id).outcome is None:
                    return past
                # A stop asked for in the committing tick is carried until nothing of the
                # job runs (bounded: a few more passes, never past the deadline).
                committed_at.append(time.monotonic())
                chasing = self.id in sup.supervisors[scope].chasing
                return not chasing or past or len(committed_at) > 10

            sup.serve_until(done)
            if not committed_at:
                raise TimeoutError(f"job {self.id} has no committed outcome after "
                                   f"{timeout} s (it goes on)")
            return plain(service.view(self.id, ask_scheduler=False).checked())

    def _watch(self, service: Service, deadline: float | None, timeout: float | None,
               poll: float) -> Status:
        while True:
            if service.job(self.id).outcome is not None:
                return plain(service.view(self.id, ask_scheduler=False).checked())
            wait = poll
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {self.id} has no committed outcome after "
                                       f"{timeout} s (it goes on)")
                wait = min(wait, left)
            time.sleep(wait)

    # ---- person requests: recorded now, carried out by the next supervisor tick ----------
    def cancel(self) -> Status:
        """Ask for the job to be cancelled; ``StateConflict`` if it is already finished."""
        return self._request("cancel")

    def resubmit(self) -> Status:
        """Resolve a recovery hold by submitting again (spends no budget);
        ``StateConflict`` unless the job is held."""
        return self._request("resubmit")

    def give_up(self) -> Status:
        """Resolve a recovery hold by failing the job; ``StateConflict`` unless held."""
        return self._request("give_up")

    def _request(self, what: str) -> Status:
        with _open(self.store) as service:
            view = getattr(service, what)(self.id)
        if view.status is None:
            raise view.error
        return plain(view.status)

    def supersede(self) -> Job:
        """Run a finished job again: a new job that names this one, submitted.
        ``StateConflict`` if this job is not finished or already superseded."""
        with _open(self.store) as service:
            new_id = service.supersede(self.id)
        return Job(new_id, store=self.store)

    def history(self) -> list[HistoryLine]:
        """The job's story: every committed event with its line of text."""
        with _open(self.store) as service:
            return [HistoryLine(e, text) for e, text in service.history(self.id)]

    def logs(self, follow: bool = False, *, submission: int | None = None,
             tail: int | None = None) -> Iterator[str]:
        """The job's output, line by line (without line ends): local and Slurm from their
        output files, kubeflow from its pods' logs through the Kubernetes API.

        Without ``follow``: what the latest submission (or ``submission``) wrote so far;
        ``NotFound`` when it has no scheduler object yet. With ``follow``: keep reading,
        move on to each new submission (a line ``== dispatch: submission N after CAUSE``
        marks it) and end once the job's outcome is committed. Following only reads: a
        supervisor (``wait()`` in another thread, ``dispatch supervise``) moves the job.

        ``tail``: only the last ``tail`` lines of each stream of the submission read first
        (a file is read from its end, never whole); following goes on from there.
        Output is read in pieces, so a log of any size takes little memory; a line longer
        than a MiB comes in pieces.

        Raises ``BadArgument`` (a ``BadInput``) for a ``submission`` that is not a whole
        number from 1."""
        if submission is not None and (isinstance(submission, bool)
                                       or not isinstance(submission, int) or submission < 1):
            raise BadArgument("submission", "a submission number (int, 1 or more) or None",
                              submission)
        _store_url(self.store)
        return follow_logs(self.store, self.id, submission=submission, follow=follow,
                           tail=tail)


def follow_logs(store: Store, job_id: str, *, submission: int | None = None,
                follow: bool = False, poll: float = FOLLOW_POLL_S,
                stop: threading.Event | None = None,
                from_first: bool = False, tail: int | None = None) -> Iterator[str]:
    """Lines of a job's output (without line ends); see ``Job.logs`` and ``follow_log_text``.
    """
    pieces = follow_log_text(store, job_id, submission=submission, follow=follow, poll=poll,
                             stop=stop, from_first=from_first, tail=tail)
    return (line for text in pieces for line in text.splitlines())


def follow_log_text(store: Store, job_id: str, *, submission: int | None = None,
                    follow: bool = False, poll: float = FOLLOW_POLL_S,
                    stop: threading.Event | None = None,
                    from_first: bool = False,
                    tail: int | None = None,
                    on_poll: Callable[[RecordJob], None] | None = None
                    ) -> Generator[str, None, None]:
    """A job's output as text in pieces of whole lines, each line ending with ``\n`` (at most
    a few MiB a piece, whatever the log's size). Used by ``dispatch logs``, the HTTP API's log
    stream and ``dispatch run --logs``; ``follow_logs`` splits it into lines.

    Following starts at the newest submission (``from_first``: at the first, as ``run --logs``
    wants whenever its reader starts) and then reads every later submission in turn, each
    to its end before the marker line of the next.

    Following, a scheduler that cannot be asked this poll (a pod log the API server cannot
    give now) is asked again at the next one, and no line is lost or repeated: each stream
    keeps its place. The last read, once the outcome is committed, raises it instead.
    ``stop``: once set, following ends after one more read (whole lines only).
    ``tail``: the first read gives only the last ``tail`` lines of each stream.
    ``on_poll``: given the job as the record says it at each poll.

    ``BadInput`` at once for a ``submission`` or ``tail`` that is not a whole number."""
    check_count("submission", submission, least=1)
    check_count("tail", tail, least=0)
    return _log_text(store, job_id, submission, follow, poll, stop, from_first, tail, on_poll)


class LogLine(NamedTuple):
    """One line of a job's output: its ``submission``, the stream (``node``: a node's log
    file or a pod; None for dispatch's own ``== dispatch: submission N`` line) and the
    ``line`` without its end."""

    submission: int
    node: str | None
    line: str


def follow_log_lines(store: Store, job_id: str, *, submission: int | None = None,
                     follow: bool = False, poll: float = FOLLOW_POLL_S,
                     stop: threading.Event | None = None, tail: int | None = None,
                     on_poll: Callable[[RecordJob], None] | None = None
                     ) -> Generator[LogLine, None, None]:
    """``follow_log_text`` as ``LogLine``s, each saying where it came from (``dispatch logs
    --json``); read in the same bounded pieces. ``on_poll`` is given the job as the record
    says at each poll (``dispatch logs -f`` says so when it is held)."""
    check_count("submission", submission, least=1)
    check_count("tail", tail, least=0)
    for n, node, data, _ in _log_pieces(store, job_id, submission, follow, poll, stop, False,
                                        tail, on_poll):
        for line in data.decode(errors="replace").splitlines():
            yield LogLine(n, node, line)


def _log_text(store: Store, job_id: str, submission: int | None, follow: bool, poll: float,
              stop: threading.Event | None, from_first: bool, tail: int | None,
              on_poll: Callable[[RecordJob], None] | None) -> Generator[str, None, None]:
    for _, node, data, many in _log_pieces(store, job_id, submission, follow, poll, stop,
                                           from_first, tail, on_poll):
        yield text_of(data, f"[{node}] " if many else "")


def _log_pieces(store: Store, job_id: str, submission: int | None, follow: bool, poll: float,
                stop: threading.Event | None, from_first: bool, tail: int | None,
                on_poll: Callable[[RecordJob], None] | None
                ) -> Generator[Piece, None, None]:
    """The follower's loop (service/logs.py's looks), sleeping ``poll`` between looks."""
    follower = Follow(job_id, submission=submission, follow=follow, from_first=from_first,
                      tail=tail, on_poll=on_poll)
    with _open(store) as service:
        while True:
            stopping = stop is not None and stop.is_set()
            yield from follower.look(service)
            if follower.done or stopping:
                return
            if stop is not None:
                stop.wait(poll)
            else:
                time.sleep(poll)
