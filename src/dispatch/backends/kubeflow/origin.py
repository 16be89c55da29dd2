"""Which Kubernetes configuration dispatch uses here, in words a person can check against
``kubectl config view``: the kubeconfig file(s) read, the context, the cluster (its name and
its API server's URL) and the user (by name). Shown by ``dispatch doctor --backend kubeflow``
and ``dispatch status -v`` (issue 47 item 1).

Never a credential: a user is named, never its token, certificate, password or what its exec
plugin prints (no plugin is run to describe it); a server URL loses any ``user:password@``
and query it carries.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from dispatch.backends.kubeflow.kubeconfig import SERVICE_ACCOUNT_DIR, load_with_files


@dataclass(frozen=True)
class ConfigOrigin:
    """Where the configuration came from. ``files`` empty: the pod's service account."""

    files: tuple[Path, ...]
    context: str | None
    cluster: str | None
    server: str
    user: str | None
    namespace: str
    context_file: Path | None = None  # the file that defined the context, when several

    @property
    def in_cluster(self) -> bool:
        return not self.files

    def text(self) -> str:
        if self.in_cluster:
            return (f"the pod's service account (token mounted in {SERVICE_ACCOUNT_DIR}), "
                    f"server {self.server}, namespace {self.namespace}")
        files = ", ".join(map(str, self.files))
        head = f"kubeconfig {files}" if len(self.files) == 1 else f"kubeconfig files {files}"
        context = f"context {self.context}"
        if len(self.files) > 1 and self.context_file is not None:
            context += f" (from {self.context_file})"
        user = f"user {self.user}" if self.user else "no user (anonymous)"
        return (f"{head}; {context}; cluster {self.cluster} ({self.server}); {user}; "
                f"namespace {self.namespace}")

    def as_json(self) -> dict[str, Any]:
        return {"files": [str(f) for f in self.files], "context": self.context,
                "cluster": self.cluster, "server": self.server, "user": self.user,
                "namespace": self.namespace, "in_cluster": self.in_cluster}


def shown_server(url: str) -> str:
    """``url`` without what may be a secret in it (``user:password@``, a query, a fragment).
    Pure."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        port = parts.port
    except ValueError:
        return "(an unreadable URL)"
    if not parts.scheme or host is None:
        return "(an unreadable URL)"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{f':{port}' if port else ''}{parts.path}"


def origin_of(cfg: Any, files: tuple[Path, ...]) -> ConfigOrigin:
    """The origin of a loaded configuration (``load_with_files``'s pair). Pure."""
    ctx = getattr(cfg, "context", None)
    server = shown_server(str(getattr(getattr(cfg, "cluster", None), "server", "") or ""))
    namespace = getattr(cfg, "namespace", None) or "default"
    if not files:
        return ConfigOrigin((), None, None, server, None, namespace)
    return ConfigOrigin(files, getattr(cfg, "context_name", None),
                        getattr(ctx, "cluster", None), server, getattr(ctx, "user", None) or None,
                        namespace, getattr(cfg, "fname", None))


def config_origin(kubeconfig: str | None, context: str | None,
                  service_account_dir: str = SERVICE_ACCOUNT_DIR,
                  env: Mapping[str, str] = os.environ) -> tuple[Any, ConfigOrigin]:
    """The configuration the backend would use (kubeconfig.py's order) and its origin;
    KubeConfigError as the loader says it. Runs no exec plugin."""
    cfg, files = load_with_files(kubeconfig, context, service_account_dir, env)
    return cfg, origin_of(cfg, files)


def origin_from_env(env: Mapping[str, str] = os.environ) -> ConfigOrigin:
    """The origin of the configuration this process's kubeflow backend uses (the registry's
    variables: DISPATCH_KUBECONFIG, DISPATCH_K8S_CONTEXT). Its namespace is the context's:
    where a TrainJob goes when its spec names none."""
    from dispatch.backends.registry import KUBECONFIG
    from dispatch.support.paths import K8S_CONTEXT, env_path

    kubeconfig = env_path(KUBECONFIG, env)
    _, origin = config_origin(str(kubeconfig) if kubeconfig else None,
                              env.get(K8S_CONTEXT) or None, env=env)
    return origin


def check_context(asked: str | None, kubeconfig: str | None, context: str | None,
                  service_account_dir: str = SERVICE_ACCOUNT_DIR) -> None:
    """Refuse (SpecError on ``kubeflow.context``, exit 2) a job whose spec names a context
    other than the one this dispatch uses: a scope is one cluster, so the spec cannot move
    the job to another; the person sets DISPATCH_K8S_CONTEXT instead. Reads the
    configuration only (no request, no plugin)."""
    if asked is None:
        return
    from dispatch.core.spec import SpecError

    cfg, files = load_with_files(kubeconfig, context, service_account_dir)
    using = getattr(cfg, "context_name", None) if files else None
    if using == asked:
        return
    where = (f"context {using!r} (DISPATCH_K8S_CONTEXT, else the current-context of "
             f"{', '.join(map(str, files))})" if files
             else "the pod's service account, no kubeconfig context")
    raise SpecError("<spec>", "kubeflow.context",
                    f"the job is meant for context {asked!r}, but this dispatch uses {where}: "
                    f"set DISPATCH_K8S_CONTEXT={asked} to submit it there (its own scope, "
                    "with a supervisor of its own)")
