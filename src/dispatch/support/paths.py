"""Where dispatch keeps its state on this machine (one place computes it), and the
environment variables that name paths (one place reads them)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from dispatch.errors import BadInput

APP = "dispatch"

# Every environment variable that names a path. A relative one would mean a different place
# in each process that reads it (the CLI, `serve`, the local runner started in its root):
# each is refused at start, naming the variable.
LOCAL_ROOT = "DISPATCH_LOCAL_ROOT"
SLURM_OUTPUT_DIR = "DISPATCH_SLURM_OUTPUT_DIR"
KUBECONFIG = "DISPATCH_KUBECONFIG"
STORE = "DISPATCH_STORE"  # a path only when it is no URL (postgresql://, sqlite:///)
PATH_VARIABLES = (LOCAL_ROOT, SLURM_OUTPUT_DIR, KUBECONFIG, STORE)
K8S_CONTEXT = "DISPATCH_K8S_CONTEXT"  # not a path: the kubeconfig context to use


class RelativePath(BadInput):
    """A path environment variable that is not an absolute path."""

    def __init__(self, variable: str, value: str) -> None:
        super().__init__(f"{variable}={value!r} is a relative path: give an absolute one "
                         f"(e.g. {variable}={os.path.abspath(value)!r})")
        self.variable = variable


def state_home() -> Path:
    """``$XDG_STATE_HOME/dispatch``, else ``~/.local/state/dispatch`` (on Linux; each platform's
    own place elsewhere). A relative ``XDG_STATE_HOME`` is ignored, as the XDG spec says:
    platformdirs does that (a test pins it, so a platformdirs that stopped would be noticed)."""
    import platformdirs  # here: a command that needs no state path never loads it

    return platformdirs.user_state_path(APP, appauthor=False)


def env_path(variable: str, env: Mapping[str, str] = os.environ) -> Path | None:
    """The absolute path ``variable`` names; None when it is unset or empty. ``RelativePath``
    (exit 2) when it is relative (``~`` is expanded first)."""
    value = env.get(variable, "")
    if not value:
        return None
    path = os.path.expanduser(value)
    if not os.path.isabs(path):
        raise RelativePath(variable, value)
    return Path(path)


def check_path_variables(env: Mapping[str, str] = os.environ) -> None:
    """Refuse a relative path in any path variable (``RelativePath``, naming it): what every
    command checks at start. The store variable is a path only when it is no URL."""
    for variable in PATH_VARIABLES:
        if variable == STORE:
            value = env.get(STORE, "").strip()
            if value and ":" not in value and "=" not in value:  # a bare path, no URL
                env_path(STORE, {STORE: value})
            continue
        env_path(variable, env)
