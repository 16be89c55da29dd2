"""The backend contract suite: what every backend must do (backends/base.py's protocol),
checked against its real scheduler. Stores have theirs (tests/integration/stores); this is the
backends'. A new backend is run against it first.

Each lane builds a ``Harness`` for its backend and runs every check in ``CHECKS`` (one test
each): local and every backend that reuses LocalBackend here (test_backend_contract.py),
Slurm in each version's lane (tests/integration/slurm/test_slurm_contract.py), Kubeflow on
the stand-in and, in the k8s lane, on the real control plane
(tests/integration/kubeflow/test_kubeflow_contract.py). ``LANES`` says where each registered
backend runs; the registry walk (test_registry_walk.py) fails for a backend that has none.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from dispatch.backends.base import Backend, DryRun, Submission
from dispatch.backends.registry import REGISTRY
from dispatch.core.model import ObjectReport, SchedulerUnreachable, State, token_for
from dispatch.core.spec import JobSpec
from dispatch.errors import BadInput

# Where each backend's contract runs (a test module, relative to the repository root). A
# backend that reuses LocalBackend needs no lane of its own: test_backend_contract.py runs it.
LANES = {
    "local": "tests/integration/backends/test_backend_contract.py",
    "slurm": "tests/integration/slurm/test_slurm_contract.py",
    "kubeflow": "tests/integration/kubeflow/test_kubeflow_contract.py",
}
WORD = "contract-says-hello"


@dataclass
class Harness:
    """A backend under test on its scheduler, and what the checks need around it."""

    name: str
    backend: Backend
    # A second instance over the same scheduler (knows no ref the first one made).
    fresh: Callable[[], Backend]
    # An instance whose scheduler cannot be asked (a root not there, no controller, no API).
    unreachable: Callable[[], Backend]
    # A spec this backend runs: ``command`` with whatever its section needs.
    spec: Callable[[tuple[str, ...]], JobSpec]
    long: tuple[str, ...]  # runs until stopped
    short: tuple[str, ...]  # prints WORD and exits 0
    # False on a stand-in scheduler that runs no command (the Kubeflow API stand-in).
    runs_commands: bool = True
    wait_s: float = 120.0  # a bound for a loaded machine, never a timing assertion
    refs: list[str] = field(default_factory=list)

    def submission(self, command: tuple[str, ...], *, gated: bool = False) -> Submission:
        job = f"contract-{uuid.uuid4().hex[:10]}"
        return Submission(job_id=job, number=1, token=token_for(job, 1),
                          spec=self.spec(command), gated=gated)

    def submit(self, sub: Submission) -> str:
        ref = self.backend.submit(sub)
        self.refs.append(ref)
        return ref

    def look(self, sub: Submission, ref: str | None = None,
             backend: Backend | None = None) -> list[ObjectReport]:
        found = (backend or self.backend).discover([sub.token], [ref] if ref else [])
        return [o for o in found.objects if o.token == sub.token or o.ref == ref]

    def wait(self, sub: Submission, ref: str, until: Callable[[ObjectReport], bool],
             what: str) -> ObjectReport:
        """Until the object's committed report satisfies ``until`` (bounded)."""
        deadline = time.monotonic() + self.wait_s
        last: list[ObjectReport] = []
        while time.monotonic() < deadline:
            last = self.look(sub, ref)
            if len(last) == 1 and until(last[0]):
                return last[0]
            time.sleep(0.5)
        raise AssertionError(f"{self.name}: {what} not seen within {self.wait_s:g}s; "
                             f"last look: {last}")

    def clean_up(self) -> None:
        for ref in self.refs:
            with contextlib.suppress(Exception):
                self.backend.cancel(ref)
        with contextlib.suppress(Exception):
            self.backend.close()


def check_declarations(h: Harness) -> None:
    """The backend calls itself by its registered name, declares a node-loss window, and
    says how long a submit can still create an object after its process is gone."""
    assert h.backend.name == h.name
    declared = h.backend.declarations()
    assert declared.backend == h.name
    assert declared.node_loss_window > timedelta(0)
    assert isinstance(h.backend.submit_in_flight, timedelta)
    assert h.backend.submit_in_flight >= timedelta(0)


def check_validate_ready_admit(h: Harness) -> None:
    """A spec it runs passes validate, ready and admit; an unknown key in its own section is
    refused as bad input (exit 2: SpecError, or the backend's own BadInput, as Kubeflow's
    KubeflowSpecError), naming the key, before anything is recorded."""
    good = h.spec(h.long)
    h.backend.validate(good)
    h.backend.ready()
    h.backend.admit(good)
    section = REGISTRY[h.name].section
    if section is not None:
        options = {**getattr(good, section), "no_such_option": 1}
        bad = JobSpec(**{**{f: getattr(good, f) for f in JobSpec.__struct_fields__},
                         section: options})
        with pytest.raises(BadInput, match=f"{section}.no_such_option|no_such_option"):
            h.backend.validate(bad)


def check_dry_run_is_pure(h: Harness) -> None:
    """The dry run says what submit would send, under the backend's own name, and sends
    nothing: no object carries its token afterwards."""
    sub = h.submission(h.long)
    dry = h.backend.dry_run(sub)
    assert isinstance(dry, DryRun) and dry.backend == h.name
    assert dry.render().strip()
    assert h.look(sub) == []
    assert h.look(sub, backend=h.fresh()) == []


def check_submit_discover_stop(h: Harness) -> None:
    """Submit, then found by its token (also by an instance that never learnt the ref) and by
    its ref, alive; stopped on the supervisor's behalf, it ends cancelled."""
    sub = h.submission(h.long)
    ref = h.submit(sub)
    (by_token,) = h.look(sub)
    assert (by_token.ref, by_token.token) == (ref, sub.token)
    (by_ref,) = [o for o in h.backend.discover([], [ref]).objects if o.ref == ref]
    assert by_ref.token == sub.token and by_ref.alive
    h.backend.stop(ref)
    ended = h.wait(sub, ref, lambda o: o.ended, "the end of a stopped object")
    assert ended.state is State.CANCELLED


def check_cancel(h: Harness) -> None:
    """Cancelled because a person asked, it ends cancelled; a second cancel is no error."""
    sub = h.submission(h.long)
    ref = h.submit(sub)
    h.backend.cancel(ref)
    h.backend.cancel(ref)
    ended = h.wait(sub, ref, lambda o: o.ended, "the end of a cancelled object")
    assert ended.state is State.CANCELLED


def check_logs(h: Harness) -> None:
    """logs(ref) gives the object's output streams (files, or readers of output kept
    elsewhere), node 0 first; a command's output is in them once it has ended."""
    sub = h.submission(h.short)
    ref = h.submit(sub)
    if h.runs_commands:
        done = h.wait(sub, ref, lambda o: o.ended, "the end of a short command")
        assert done.state is State.SUCCEEDED, done
    sources: Sequence[object] = h.backend.logs(ref)
    for source in sources:
        assert isinstance(source, Path) or (hasattr(source, "read") and hasattr(source, "key"))
    if h.runs_commands:
        text = "".join(s.read_text(errors="replace") if isinstance(s, Path)
                       else s.read(None, final=True).data.decode(errors="replace")  # type: ignore[attr-defined]
                       for s in sources)
        assert WORD in text, (sources, text)


def check_found_by_token_alone(h: Harness) -> None:
    """What makes a submit safe to repeat (the protocol: only after discovery showed no object
    carrying the token): an instance that never learnt the ref finds exactly one object
    carrying the token, the one submit made."""
    sub = h.submission(h.long)
    ref = h.submit(sub)
    fresh = h.fresh()
    try:
        found = h.look(sub, backend=fresh)
    finally:
        fresh.close()
    assert [(o.ref, o.token) for o in found] == [(ref, sub.token)]


def check_absent_is_not_ended(h: Harness) -> None:
    """A scheduler that cannot be asked is an error, never a verdict: a look at an object
    through it raises SchedulerUnreachable, it does not report the object ended."""
    sub = h.submission(h.long)
    ref = h.submit(sub)
    cut_off = h.unreachable()
    try:
        with pytest.raises(SchedulerUnreachable):
            cut_off.discover([sub.token], [ref])
    finally:
        cut_off.close()


CHECKS = (check_declarations, check_validate_ready_admit, check_dry_run_is_pure,
          check_submit_discover_stop, check_cancel, check_logs, check_found_by_token_alone,
          check_absent_is_not_ended)
CHECK_IDS = [c.__name__.removeprefix("check_") for c in CHECKS]


@contextlib.contextmanager
def running(h: Harness) -> Iterator[Harness]:
    try:
        yield h
    finally:
        h.clean_up()
