"""``dispatch doctor --backend local``: whether the local root can be used (backends/checks.py).

Trusted (``LocalRoot.check_trusted``: no folder another user owns or others may write without
the sticky bit), a dispatch root (its marker) or one a first submit will make (its parent is a
directory this user may write), and writable.
"""

from __future__ import annotations

import os
from pathlib import Path

from dispatch.backends.checks import Check, Verdict
from dispatch.backends.local.root import LocalRoot
from dispatch.core.model import SchedulerUnreachable


def _nearest_existing(path: Path) -> Path:
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def doctor(root: LocalRoot) -> list[Check]:
    name = f"local root {root.path}"
    try:
        root.check_trusted()
    except SchedulerUnreachable as err:
        return [Check(name, Verdict.PROBLEM, err.reason,
                      f"use a root of your own (set {root.variable or 'DISPATCH_LOCAL_ROOT'})")]
    if root.never_used():
        parent = _nearest_existing(root.path)
        if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
            return [Check(name, Verdict.PROBLEM,
                          f"not there yet, and {parent} cannot be written to make it",
                          f"make {root.path} yourself, or set "
                          f"{root.variable or 'DISPATCH_LOCAL_ROOT'} to a folder you own")]
        return [Check(name, Verdict.OK, "not made yet: the first submit makes it")]
    try:
        marker = root.marker()
    except SchedulerUnreachable as err:
        return [Check(name, Verdict.PROBLEM, err.reason,
                      "mount it, or point the root variable at the right folder")]
    if not os.access(root.objects_dir, os.W_OK | os.X_OK):
        return [Check(name, Verdict.PROBLEM, f"{root.objects_dir} is not writable by you",
                      "use a root of your own")]
    return [Check(name, Verdict.OK, f"a dispatch root (id {marker.id[:8]}), trusted and "
                  "writable")]
