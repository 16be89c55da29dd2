"""Modules another user plants in a shared directory (issue 32): whatever imports one of them
appends its name to a marker file, so a test can say that nothing of them ever ran."""

from __future__ import annotations

import os
from pathlib import Path

NOBODY = 65534  # another user: the planted files are theirs when the tests run as root
# The names dispatch's own processes import (the package, what the bootstrap and the local
# runner need), and one of the standard library's that nothing of dispatch imports.
NAMES = ("dispatch", "cloudpickle", "msgspec", "colorsys")


def plant(directory: Path, marker: Path, names: tuple[str, ...] = NAMES) -> None:
    """Make ``directory`` writable by everybody (0777, a shared scratch directory) and put in
    it, as another user where this process may chown, a package or module for each name."""
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o777)
    for name in names:
        code = (f"with open({str(marker)!r}, 'a') as f:\n"
                f"    f.write({name!r} + '\\n')\n")
        if name == "dispatch":
            package = directory / name
            package.mkdir()
            (package / "__init__.py").write_text(code)
            (package / "fn").mkdir()  # as deep as ``-m dispatch.fn`` would look
            (package / "fn" / "__init__.py").write_text(code)
            (package / "fn" / "__main__.py").write_text(code)
            owned = [package, package / "__init__.py", package / "fn",
                     package / "fn" / "__init__.py", package / "fn" / "__main__.py"]
        else:
            (directory / f"{name}.py").write_text(code)
            owned = [directory / f"{name}.py"]
        if os.getuid() == 0:
            for path in owned:
                os.chown(path, NOBODY, NOBODY)


def ran(marker: Path) -> list[str]:
    """The planted modules that were imported (none, when the marker is absent)."""
    return marker.read_text().split() if marker.exists() else []
