"""Backends by name, in one table. Each entry builds its backend from the environment;
imports are lazy so that the local default never pays for a Kubernetes client, and a missing
optional dependency names itself. The CLI's ``--backend`` choices come from ``names()``.

A newcomer adds a backend here (one entry) and in ``backends/<name>/``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING

from dispatch.core.policy import Declarations
from dispatch.core.spec import BACKENDS, parse_duration
from dispatch.errors import BackendError
from dispatch.support.paths import K8S_CONTEXT, KUBECONFIG, LOCAL_ROOT, env_path

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


def _local() -> Backend:
    from dispatch.backends.local import LocalBackend, default_root

    root = env_path(LOCAL_ROOT) or default_root()
    return LocalBackend(root, node_loss_window=_window("DISPATCH_LOCAL_NODE_LOSS_WINDOW", "5s"))


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


@dataclass(frozen=True)
class BackendEntry:
    name: str
    make: Callable[[], Backend]
    summary: str


REGISTRY: dict[str, BackendEntry] = {e.name: e for e in (
    BackendEntry("local", _local, "N node processes on this machine (the embedded default)"),
    BackendEntry("slurm", _slurm, "Slurm through its CLI tools (sbatch, squeue, sacct, ...)"),
    BackendEntry("kubeflow", _kubeflow, "Kubeflow Trainer TrainJobs on Kubernetes"),
)}
assert tuple(REGISTRY) == BACKENDS, "the spec language and the registry name the same backends"


def names() -> tuple[str, ...]:
    return tuple(REGISTRY)


def make_backend(name: str) -> Backend:
    entry = REGISTRY.get(name)
    if entry is None:
        raise BackendConfigError(f"unknown backend {name!r} ({', '.join(REGISTRY)})")
    return entry.make()


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
