"""A throwaway backend added the way docs/architecture.md#a-backend says: its own package and
one registry entry, nothing else. ``ssh-local`` (package ``ssh_local``: a hyphen in a name is
an underscore in its package) runs N local processes by reusing LocalBackend under its own
name, root and scope. It lives in tests and is registered only while a test runs
(``registry.registered(ENTRY)``); in the house its entry would sit in REGISTRY.
"""

from __future__ import annotations

from tests.integration.backends.ssh_local.backend import ENTRY, SshLocalBackend

__all__ = ["ENTRY", "SshLocalBackend"]
