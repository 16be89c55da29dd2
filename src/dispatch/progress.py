"""Report training progress to dispatch (G3): needs nothing but ``DISPATCH_PROGRESS_FILE``,
which dispatch sets on every node. Without it (not run by dispatch) a report does nothing.

    from dispatch.progress import report
    save_checkpoint(...)
    report(step, checkpoint=True)   # after the checkpoint is durable

Code that cannot import dispatch appends the same JSON line itself:
``{"step": 120, "checkpoint": true, "time": 1764650000.0}`` ("time" is optional).
"""

from __future__ import annotations

import json
import os
import time

from dispatch.core.progress import PROGRESS_FILE_VAR


def report(step: int, *, checkpoint: bool = False) -> bool:
    """Append one progress line; True when it was written. Never raises for a full disk or a
    missing directory: progress is a courtesy to the record, not part of the training."""
    path = os.environ.get(PROGRESS_FILE_VAR)
    if not path:
        return False
    line = json.dumps({"step": int(step), "checkpoint": bool(checkpoint),
                       "time": time.time()}) + "\n"
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o600)
    except OSError:
        return False
    try:
        os.write(fd, line.encode())  # one write under O_APPEND: a line is never torn
        return True
    except OSError:
        return False
    finally:
        os.close(fd)
