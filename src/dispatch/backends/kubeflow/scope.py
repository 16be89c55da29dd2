"""The scope of the Kubeflow backend: ``kubeflow:<context>/<namespace>``, from the kubeconfig
this process uses (no API call)."""

from __future__ import annotations

import os

from dispatch.backends.base import Backend
from dispatch.errors import BackendError
from dispatch.support.paths import K8S_CONTEXT, env_path


def kubeflow_scope(name: str = "kubeflow", backend: Backend | None = None) -> str:
    from dispatch.backends.kubeflow.client import load_config

    try:
        # the configuration the backend uses (registry.py): the same file and context
        kubeconfig = env_path("DISPATCH_KUBECONFIG")
        cfg = load_config(str(kubeconfig) if kubeconfig else None,
                          os.environ.get(K8S_CONTEXT) or None)
    except Exception as err:  # a kubeconfig that cannot be read names itself
        raise BackendError(f"kubeflow: cannot tell the scope: {err}") from None
    context = getattr(cfg, "context_name", None) or "in-cluster"
    namespace = (os.environ.get("DISPATCH_K8S_NAMESPACE") or getattr(cfg, "namespace", None)
                 or "default")
    return f"{name}:{context}/{namespace}"
