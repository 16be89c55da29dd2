"""Where dispatch keeps its state on this machine (one place computes it)."""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP = "dispatch"


def state_home() -> Path:
    """``$XDG_STATE_HOME/dispatch``, else ``~/.local/state/dispatch`` (on Linux; each platform's
    own place elsewhere). A relative ``XDG_STATE_HOME`` is ignored, as the XDG spec says:
    platformdirs does that (a test pins it, so a platformdirs that stopped would be noticed)."""
    return platformdirs.user_state_path(APP, appauthor=False)
