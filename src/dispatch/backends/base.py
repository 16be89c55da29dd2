"""The one contract every backend implements (the shape of TorchX's schedulers).

A backend reports objects; it never computes a job's state (docs/semantics.md#s10). Every call
that cannot reach its scheduler raises ``SchedulerUnreachable`` (an error, never a state).

The contract, in the order a job meets it:

- ``validate(spec)``: refuse a spec this backend cannot run (its own section included), before
  anything is recorded; raises ``SpecError`` (or another ``BadInput``: exit 2) naming the
  key. ``ready()``: refuse when the backend cannot be used from here at all (no config), also
  before anything is recorded.
- ``dry_run(submission)``: exactly what ``submit`` would send, built without side effects
  (TorchX's ``submit_dryrun`` beside ``schedule``).
- ``submit`` / ``discover`` / ``stop`` / ``cancel`` / ``open_gate``: the supervisor's calls.
- ``logs(ref)``: where the object's output lies (files, or readers of logs kept elsewhere);
  ``close()``: release clients and threads.
- ``declarations()``: what the backend carries out natively and its node-loss window.
- optionally ``reports_changes = True``: each ``discover`` sets ``Discovery.changes``, the
  backend's objects (any, not only those asked for) that appeared, changed or went away
  since its previous look, numbered by ``next_look()``; the supervisor then skips a quiet
  job none of whose objects changed without comparing them (supervise/loop.py). A backend
  without it (or a look with ``changes`` None) keeps the compare-everything path.
- optionally ``refused_reads()``: the reads its scheduler refuses now (core/refusals.py;
  kubeflow's RBAC 403s), which the active supervisor publishes (``refusals_of``).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import NamedTuple, Protocol

import msgspec

from dispatch.core.model import Changes, Discovery
from dispatch.core.policy import Declarations
from dispatch.core.refusals import Refusal
from dispatch.core.spec import JobSpec
from dispatch.errors import BackendError


class Submission(msgspec.Struct, frozen=True, kw_only=True):
    """One submission of a job: the backend stores ``token`` with the object it creates."""

    job_id: str
    number: int
    token: str
    spec: JobSpec
    gated: bool = False
    # Nodes to keep this submission off (the job's segment-health exclusions): Slurm --exclude.
    exclude_nodes: tuple[str, ...] = ()


class DryRun(msgspec.Struct, frozen=True, kw_only=True):
    """What ``submit`` would send to the scheduler, and nothing sent.

    ``argv``: the command the backend would run (``sbatch ...``), when it runs one;
    ``documents``: (title, text) pairs of what it would write or send (a batch script, a
    TrainJob manifest, the local runner's plan)."""

    backend: str
    argv: tuple[str, ...] = ()
    documents: tuple[tuple[str, str], ...] = ()

    def render(self) -> str:
        parts = []
        if self.argv:
            parts.append("# argv: " + " ".join(self.argv))
        for title, text in self.documents:
            parts.append(f"# {title}\n{text.rstrip()}")
        return "\n".join(parts) + "\n"


class SubmitRejected(BackendError):
    """The scheduler answered and refused the object (e.g. sbatch error). Carries its words."""

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class LogRead(NamedTuple):
    """What one ``LogReader.read`` found: ``data``, the text written after the cursor it was
    given, in whole lines (a last line without its end only when the read was ``final``);
    ``cursor``, where the next read starts; ``more``, the read stopped at its size bound and
    the stream holds more now (the follower reads again at once: a long log comes in pieces,
    never whole in memory)."""

    data: bytes
    cursor: str | None
    more: bool = False


class LogReader(Protocol):
    """Output that is not a file dispatch can open (a pod's log, kept by the API server).

    The follower keeps one cursor per ``key`` across calls of ``Backend.logs`` (each call may
    return new reader objects; the key says which are the same stream), so that following
    never prints a line twice. A stream that has nothing to give yet (a pod not started, a
    pod already gone) reads as empty, not as an error; a scheduler that cannot be asked
    raises ``SchedulerUnreachable``."""

    @property
    def key(self) -> str:
        """Names the stream, the same across calls and distinct from every other stream."""
        ...

    @property
    def label(self) -> str:
        """A short name for the stream, put before its lines when there are several."""
        ...

    def read(self, cursor: str | None, *, final: bool) -> LogRead:
        """What the stream holds after ``cursor`` (None: from its start). Whole lines only,
        unless ``final``: then a last line still being written comes too."""
        ...


# One stream of a job's output: a file (read by offset, a line still being written waits for
# its end) or a reader of output kept elsewhere.
LogSource = Path | LogReader


class Backend(Protocol):
    name: str
    # Declared beside declarations() and never recorded (it is this process's tool setting,
    # not the job's): how long a submit call can still create an object after the process
    # that made it is gone. A supervisor that takes a scope over retries the previous
    # holder's unbound submit this long after the takeover (decide.Takeover, R1).
    submit_in_flight: timedelta

    def declarations(self) -> Declarations: ...

    def validate(self, spec: JobSpec) -> None:
        """Raise ``SpecError`` (or another ``BadInput``), naming the key, for a spec this
        backend cannot run."""
        ...

    def ready(self) -> None:
        """Raise ``BackendError`` when this backend cannot be used from here at all (e.g. no
        usable Kubernetes config); reaches no scheduler. Checked before a job is recorded."""
        ...

    def admit(self, spec: JobSpec) -> None:
        """Raise ``SpecError`` when the scheduler itself refuses the spec's object (e.g. a
        Kubernetes admission webhook, asked by a server-side dry run), so a bad spec is refused
        before it is recorded (exit 2 with the scheduler's words). Checked after ``ready``; a
        scheduler that cannot be reached is no refusal (the supervisor's submit retries)."""
        ...

    def dry_run(self, submission: Submission) -> DryRun:
        """What ``submit`` would send; no side effects, reaches no scheduler."""
        ...

    def submit(self, submission: Submission) -> str:
        """Create the object and return its ref. Must be safe to call again with the same
        token only after discovery showed no object carrying it."""
        ...

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        """One batched look at every object of the tick: the objects carrying any of
        ``tokens`` (found even when the record never learnt their ref) and the objects
        ``refs``. A ref the scheduler positively no longer knows is reported ended; a
        scheduler that cannot say is ``SchedulerUnreachable`` (absent is not ended)."""
        ...

    def stop(self, ref: str) -> None:
        """Stop the object on the supervisor's behalf (fence, duplicate, spent budget)."""
        ...

    def cancel(self, ref: str) -> None:
        """Cancel the object because a person asked to."""
        ...

    def open_gate(self, ref: str) -> None:
        """Let a gated object start (Slurm: scontrol release; TrainJob: suspend false)."""
        ...

    def logs(self, ref: str) -> Sequence[LogSource]:
        """The object's output streams that exist now (node 0 first): files (local, Slurm) or
        readers (kubeflow: each pod's log through the API server)."""
        ...

    def close(self) -> None:
        """Release what the backend holds (clients, watch threads)."""
        ...


def refusals_of(backend: object) -> list[Refusal]:
    """The reads ``backend``'s scheduler refuses now: its ``refused_reads()``, for a backend
    that has one (none has to: a scheduler that refuses nothing by identity has none)."""
    report = getattr(backend, "refused_reads", None)
    return list(report()) if callable(report) else []


_LOOKS = itertools.count(1)


def next_look() -> int:
    """A look number never given before in this process (Discovery.changes): a backend
    built again never repeats one its predecessor gave, so a supervisor never takes one
    backend's changes for another's."""
    return next(_LOOKS)


class ChangeJournal:
    """What a backend that reports changes keeps between looks: the refs and tokens of its
    objects that appeared, changed or went away since its previous look (``note``), handed
    out once per look as Discovery.changes (``take``: None on the first look, which the
    supervisor reads as "cannot tell")."""

    def __init__(self) -> None:
        self.keys: set[str] = set()
        self.last_look: int | None = None

    def note(self, *keys: str | None) -> None:
        self.keys.update(k for k in keys if k is not None)

    def take(self) -> Changes | None:
        look = next_look()
        changes = (None if self.last_look is None else
                   Changes(since=self.last_look, look=look, keys=frozenset(self.keys)))
        self.keys.clear()
        self.last_look = look
        return changes
