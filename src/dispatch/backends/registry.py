"""Backends by name, in one table: each backend's entry is the one place that says what the
rest of dispatch needs to know about it (how to build it, its scope, whether the scope asks a
scheduler, the variable naming its root, its spec section, what it enforces). Every other list
is derived from here: the CLI's ``--backend`` choices (``names()``), the spec language's
backends and rules (``traits()``, handed to the pure core), the scopes a supervisor serves
(supervise/scopes.py), the path variables checked at start (``path_variables()``).
Builders import lazily, so that the local default never pays for a Kubernetes client, and a
missing optional dependency names itself.

A newcomer adds a backend here (one entry) and in ``backends/<package>/`` (the name with
``-`` as ``_``): docs/architecture.md#a-backend has the checklist.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import msgspec

from dispatch.core.backend_traits import BackendTraits, Enforces
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec, parse_duration
from dispatch.errors import BackendError
from dispatch.support.paths import K8S_CONTEXT, STORE, env_path

if TYPE_CHECKING:  # the protocol's module is loaded by the backends, when one is made
    from dispatch.backends.base import Backend


class BackendConfigError(BackendError, ValueError):
    """A backend that cannot be built from this environment (names the variable)."""


def _window(var: str, default: str) -> timedelta:
    text = os.environ.get(var, default)
    try:
        return timedelta(seconds=parse_duration(text))
    except ValueError as err:
        raise BackendConfigError(f"{var}: {err}") from None


LOCAL_ROOT = "DISPATCH_LOCAL_ROOT"
SLURM_OUTPUT_DIR = "DISPATCH_SLURM_OUTPUT_DIR"
KUBECONFIG = "DISPATCH_KUBECONFIG"


def _local() -> Backend:
    from dispatch.backends.local import LocalBackend, default_root

    root = env_path(LOCAL_ROOT) or default_root()
    return LocalBackend(root, node_loss_window=_window("DISPATCH_LOCAL_NODE_LOSS_WINDOW", "5s"),
                        root_variable=LOCAL_ROOT)


def _slurm() -> Backend:
    from dispatch.backends.slurm.backend import SlurmBackend

    window = _window("DISPATCH_SLURM_NODE_LOSS_WINDOW", "60s")
    interval = (_window("DISPATCH_SLURM_NODE_INTERVAL", "")  # unset: the backend's default
                if "DISPATCH_SLURM_NODE_INTERVAL" in os.environ else None)
    return SlurmBackend(node_loss_window=window, node_interval=interval)


def _kubeflow() -> Backend:
    from dispatch.backends.kubeflow.backend import KubeflowBackend

    namespace = os.environ.get("DISPATCH_K8S_NAMESPACE")
    return KubeflowBackend(
        kubeconfig=str(kubeconfig) if (kubeconfig := env_path(KUBECONFIG)) else None,
        context=os.environ.get(K8S_CONTEXT) or None,
        namespaces=[namespace] if namespace else (),
        node_loss_window=_window("DISPATCH_KUBEFLOW_NODE_LOSS_WINDOW", "300s"),
        # restart is native only where the cluster's runtime has a JobSet failurePolicy
        # that restarts: the operator says so, the spec cannot.
        restart_native=os.environ.get("DISPATCH_KUBEFLOW_RESTART_NATIVE") == "1")


def local_scope(name: str, backend: Backend) -> str:
    """The scope function of local and of every backend that reuses LocalBackend."""
    from dispatch.backends.local.scope import scope_of

    return scope_of(name, backend)


def _slurm_scope(name: str, backend: Backend) -> str:
    from dispatch.backends.slurm.scope import slurm_scope

    return slurm_scope(name, backend)


def _kubeflow_scope(name: str, backend: Backend) -> str:
    from dispatch.backends.kubeflow.scope import kubeflow_scope

    return kubeflow_scope(name, backend)


def _kubeflow_scope_aliases(name: str, backend: Backend) -> tuple[str, ...]:
    from dispatch.backends.kubeflow.scope import kubeflow_scope_aliases

    return kubeflow_scope_aliases(name, backend)


# A backend's name: lower-case words joined by "-" (its package joins them by "_").
_NAME = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")
# The JobSpec keys that are backends' free-form sections (a mapping of any values; not env).
_SECTIONS = frozenset(f.name for f in msgspec.structs.fields(JobSpec)
                      if f.type == dict[str, Any])


@dataclass(frozen=True, kw_only=True)
class BackendEntry:
    """One backend, everything the rest of dispatch needs to know about it."""

    name: str
    make: Callable[[], Backend]
    summary: str  # one line for --help
    # The scope of a job recorded now through the backend, given its name and the backend
    # (supervise/scopes.py): ``name`` or ``name:cluster``; SchedulerUnreachable (or
    # BackendError) when it cannot be told now.
    scope: Callable[[str, Backend], str]
    # False: ``scope`` takes only this machine's time (no scheduler is asked), so a supervisor
    # waits for it at start and serves the backend without being asked to.
    asks_scheduler: bool = True
    # The other scopes this machine's cluster of the backend may have recorded its jobs under
    # (an older form of its scope), served by its supervisor too when a live job has one or
    # --scope names it; asked after ``scope`` answered. None: none.
    aliases: Callable[[str, Backend], tuple[str, ...]] | None = None
    # The environment variable naming the path it keeps its objects or output under; refused
    # at start when relative (support/paths.py).
    root_variable: str | None = None
    # The JobSpec key of its free-form options (None: it takes none). A new section is a new
    # JobSpec field: docs/architecture.md says what that costs.
    section: str | None = None
    # The spec keys only some backends carry out that this one does (core/backend_traits.py).
    enforces: frozenset[Enforces] = frozenset()

    @property
    def package(self) -> str:
        """``dispatch.backends.<package>``: the name with "-" as "_"."""
        return self.name.replace("-", "_")

    def traits(self) -> BackendTraits:
        return BackendTraits(name=self.name, section=self.section, enforces=self.enforces)


def check_entry(entry: BackendEntry) -> None:
    """Refuse an entry the rest of dispatch could not use (a programming error)."""
    if not _NAME.fullmatch(entry.name):
        raise BackendConfigError(f"backend name {entry.name!r}: lower-case words joined by -")
    if entry.section is not None and entry.section not in _SECTIONS:
        raise BackendConfigError(f"backend {entry.name}: section {entry.section!r} is no "
                                 "JobSpec section (a section is a JobSpec field of "
                                 "dict[str, Any])")
    if entry.root_variable is not None and not entry.root_variable.startswith("DISPATCH_"):
        raise BackendConfigError(f"backend {entry.name}: root variable "
                                 f"{entry.root_variable!r} does not start with DISPATCH_")


_LOCAL_ENFORCES = frozenset({Enforces.OUTPUT_BOUND, Enforces.LOG_PROGRESS})

REGISTRY: dict[str, BackendEntry] = {e.name: e for e in (
    BackendEntry(name="local", make=_local,
                 summary="N node processes on this machine (the embedded default)",
                 scope=local_scope, asks_scheduler=False, root_variable=LOCAL_ROOT,
                 section="local", enforces=_LOCAL_ENFORCES),
    BackendEntry(name="slurm", make=_slurm,
                 summary="Slurm through its CLI tools (sbatch, squeue, sacct, ...)",
                 scope=_slurm_scope, root_variable=SLURM_OUTPUT_DIR, section="slurm",
                 enforces=frozenset({Enforces.SEGMENT_HEALTH})),
    BackendEntry(name="kubeflow", make=_kubeflow,
                 summary="Kubeflow Trainer TrainJobs on Kubernetes",
                 scope=_kubeflow_scope, aliases=_kubeflow_scope_aliases,
                 root_variable=KUBECONFIG, section="kubeflow"),
)}
for _entry in REGISTRY.values():
    check_entry(_entry)


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def entry(name: str) -> BackendEntry:
    found = REGISTRY.get(name)
    if found is None:
        raise BackendConfigError(f"unknown backend {name!r} ({', '.join(REGISTRY)})")
    return found


def traits() -> dict[str, BackendTraits]:
    """What the spec language needs of every backend (handed to core/spec.py)."""
    return {name: e.traits() for name, e in REGISTRY.items()}


def path_variables() -> tuple[str, ...]:
    """Every environment variable that names a path: each backend's root, and the store."""
    return (*(e.root_variable for e in REGISTRY.values() if e.root_variable), STORE)



@contextmanager
def registered(new: BackendEntry) -> Iterator[BackendEntry]:
    """``new`` in the table for the duration (a test's throwaway backend, or a plugin run in
    one process): every derived list sees it, and none does after."""
    check_entry(new)
    if new.name in REGISTRY:
        raise BackendConfigError(f"backend {new.name!r} is registered already")
    REGISTRY[new.name] = new
    try:
        yield new
    finally:
        del REGISTRY[new.name]


def make_backend(name: str) -> Backend:
    return entry(name).make()


class Backends:
    """One backend instance per name for a process (backends keep per-tick caches)."""

    def __init__(self, make: Callable[[str], Backend] = make_backend) -> None:
        self._make = make
        self._made: dict[str, Backend] = {}

    def __call__(self, name: str) -> Backend:
        if name not in self._made:
            self._made[name] = self._make(name)
        return self._made[name]

    def close(self) -> None:
        made, self._made = self._made, {}
        for backend in made.values():
            backend.close()


def declarations_for(name: str) -> Declarations:
    """What a backend declares, as configured here; constructing a backend reaches no
    scheduler, so `dispatch policy check --backend` needs none."""
    return make_backend(name).declarations()
