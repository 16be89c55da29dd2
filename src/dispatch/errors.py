"""One tree of errors: every error dispatch raises on purpose is a ``DispatchError``.

Each family carries the exit code the command line documents, so the CLI (and the HTTP API)
map errors in one place instead of listing classes:

    2 bad input · 3 no such job · 4 scheduler unreachable · 5 record store unusable ·
    6 the request does not fit the job's state

Pure: no I/O; the core may import it.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_NOT_FOUND = 3
EXIT_UNREACHABLE = 4
EXIT_STORE = 5
EXIT_STATE = 6
EXIT_CANCELLED = 130
# `dispatch run` stopped supervising (Ctrl-C, SIGTERM) before the job's outcome: the job keeps
# running and its record stays. EX_TEMPFAIL of sysexits.h: nothing failed, try again later
# (`dispatch supervise` or `dispatch run` resumes it).
EXIT_DETACHED = 75


class DispatchError(Exception):
    """Base of every typed error. ``exit_code`` is what the CLI exits with; ``error_code`` is the
    stable word the JSON error shape carries."""

    exit_code: int = EXIT_BAD_INPUT
    error_code: str = "error"


class BadInput(DispatchError):
    """A spec, policy, option or argument that cannot be used (names the file, key or value)."""

    exit_code = EXIT_BAD_INPUT
    error_code = "bad-input"


class NotFound(DispatchError):
    """No such job (or object), or a name several jobs carry."""

    exit_code = EXIT_NOT_FOUND
    error_code = "not-found"


class Unreachable(DispatchError):
    """A scheduler (or local root) that cannot be asked: never a state."""

    exit_code = EXIT_UNREACHABLE
    error_code = "scheduler-unreachable"


class StoreUnusable(DispatchError):
    """The record store cannot be opened, read or written, or holds a record we cannot trust."""

    exit_code = EXIT_STORE
    error_code = "store-unusable"


class DamagedFile(DispatchError):
    """A file dispatch wrote to read back (a function's call, return value or exception) that
    is over its bound, cut short, not what dispatch writes, or refers to code this process
    cannot import: the message names the file and what was wrong."""

    exit_code = EXIT_STORE
    error_code = "damaged-file"


class StateConflict(DispatchError):
    """The request does not fit the job's (or object's) state."""

    exit_code = EXIT_STATE
    error_code = "state-conflict"


class BackendError(DispatchError):
    """A backend that cannot be configured or failed in a way that is not the scheduler's
    answer (e.g. a missing kubeconfig)."""

    exit_code = EXIT_BAD_INPUT
    error_code = "backend-unusable"


class ClusterUnknown(BackendError):
    """A scheduler that answers but cannot be told apart from another cluster (Kubernetes: the
    kube-system namespace cannot be read and the kubeconfig names no CA): no job is recorded
    under a guessed scope, which a supervisor of another cluster could serve."""

    error_code = "cluster-unknown"
