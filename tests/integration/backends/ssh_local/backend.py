"""SshLocalBackend: LocalBackend under the name ssh-local, with a root of its own."""

from __future__ import annotations

from datetime import timedelta

from dispatch.backends.base import Backend
from dispatch.backends.local import LocalBackend, default_root
from dispatch.backends.registry import BackendEntry, local_scope
from dispatch.core.backend_traits import Enforces
from dispatch.support.paths import env_path

ROOT = "DISPATCH_SSH_LOCAL_ROOT"


class SshLocalBackend(LocalBackend):
    """N processes on this machine, as if reached over ssh: the local runner does the work."""

    name = "ssh-local"


def make() -> Backend:
    root = env_path(ROOT) or default_root().with_name("ssh-local")
    return SshLocalBackend(root, node_loss_window=timedelta(seconds=5), kill_grace=1.0)


# The one registry entry (in the house: a line of REGISTRY in backends/registry.py).
ENTRY = BackendEntry(
    name="ssh-local", make=make, summary="N processes on this machine through the local runner",
    scope=local_scope, asks_scheduler=False, root_variable=ROOT, section=None,
    # Its runner is the local one: it bounds the output and reads the log pattern.
    enforces=frozenset({Enforces.OUTPUT_BOUND, Enforces.LOG_PROGRESS}))
