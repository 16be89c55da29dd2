"""The scope of a local backend: its name, this host and a digest of its root's path (two
roots on one host are two schedulers). Computed on this machine: it asks no scheduler."""

from __future__ import annotations

import hashlib
import socket
from pathlib import Path

from dispatch.backends.base import Backend
from dispatch.errors import BackendError


def local_scope(root: Path, host: str | None = None, *, backend: str = "local") -> str:
    digest = hashlib.sha256(str(Path(root).resolve()).encode()).hexdigest()[:8]
    return f"{backend}:{host or socket.gethostname()}:{digest}"


def scope_of(name: str, backend: Backend) -> str:
    """The scope of ``backend``, registered as ``name``: LocalBackend or one that reuses it
    (each its own scheduler, named by its own name)."""
    root = getattr(backend, "root", None)
    if not isinstance(root, Path):
        raise BackendError(f"the {name} backend has no root directory")
    return local_scope(root, backend=name)
