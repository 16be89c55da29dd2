"""The local backend: jobs as processes on this machine. ``backend`` (LocalBackend), ``runner``
(one process per object: ``python -m dispatch.backends.local.runner OBJDIR``, isolated as
dispatch/support/isolated.py says), ``wire`` (the on-disk formats), ``root`` (the root and its
marker), ``claims`` (one submit of a token at a time), ``procs`` (finding and stopping
processes), ``nodes``/``endings`` (the runner's parts), ``reports``/``plan`` (the backend's)."""

from dispatch.backends.local.backend import LocalBackend
from dispatch.backends.local.errors import BadInjection, InjectError, NoSuchObject
from dispatch.backends.local.plan import LocalDryRun
from dispatch.backends.local.root import default_root

__all__ = [
    "BadInjection",
    "InjectError",
    "LocalBackend",
    "LocalDryRun",
    "NoSuchObject",
    "default_root",
]
