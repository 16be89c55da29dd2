"""Backends by name, built from the environment. Imports are lazy so that the local default
never pays for a Kubernetes client, and a missing optional dependency names itself."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

from dispatch.backends.base import Backend
from dispatch.core.policy import Declarations
from dispatch.core.spec import parse_duration
from dispatch.errors import BackendError


class BackendConfigError(BackendError, ValueError):
    pass


def _window(var: str, default: str) -> timedelta:
    text = os.environ.get(var, default)
    try:
        return timedelta(seconds=parse_duration(text))
    except ValueError as err:
        raise BackendConfigError(f"{var}: {err}") from None


def make_backend(name: str) -> Backend:
    if name == "local":
        from dispatch.backends.local import LocalBackend, default_root

        # The root is under dispatch.paths.state_home() unless the operator names one.
        root = Path(os.environ.get("DISPATCH_LOCAL_ROOT") or default_root())
        return LocalBackend(root, node_loss_window=_window("DISPATCH_LOCAL_NODE_LOSS_WINDOW",
                                                            "5s"))
    if name == "slurm":
        from dispatch.backends.slurm.backend import SlurmBackend

        return SlurmBackend(node_loss_window=_window("DISPATCH_SLURM_NODE_LOSS_WINDOW", "60s"))
    if name == "kubeflow":
        from dispatch.backends.kubeflow.backend import KubeflowBackend

        namespace = os.environ.get("DISPATCH_K8S_NAMESPACE")
        return KubeflowBackend(
            kubeconfig=os.environ.get("DISPATCH_KUBECONFIG") or None,
            namespaces=[namespace] if namespace else (),
            node_loss_window=_window("DISPATCH_KUBEFLOW_NODE_LOSS_WINDOW", "300s"),
            # restart is native only where the cluster's runtime has a JobSet failurePolicy
            # that restarts: the operator says so, the spec cannot.
            restart_native=os.environ.get("DISPATCH_KUBEFLOW_RESTART_NATIVE") == "1")
    raise BackendConfigError(f"unknown backend {name!r} (local, slurm, kubeflow)")


class BackendCache:
    """One backend instance per name for a process: backends keep per-tick caches."""

    def __init__(self) -> None:
        self._made: dict[str, Backend] = {}

    def __call__(self, name: str) -> Backend:
        if name not in self._made:
            self._made[name] = make_backend(name)
        return self._made[name]


def declarations_for(name: str) -> Declarations:
    """What a backend declares, as configured here; constructing a backend reaches no
    scheduler, so `dispatch policy check --backend` needs none."""
    return make_backend(name).declarations()
