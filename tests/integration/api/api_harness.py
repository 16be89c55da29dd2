"""The Python API against the local backend: real node processes, a real SQLite record.
Each test gets its own store (passed as ``store=``) and its own local-backend root."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


class Env:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.store = str(tmp / "record.sqlite3")
        self.local = tmp / "local"

    def spec(self, name: str, body: str, **fields: Any) -> dict[str, Any]:
        """A spec mapping as YAML would parse it; the node runs python -c BODY."""
        return {"name": name, "backend": "local", "command": [sys.executable, "-c", body],
                **fields}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Env]:
    e = Env(tmp_path)
    monkeypatch.setenv("DISPATCH_LOCAL_ROOT", str(e.local))
    monkeypatch.setenv("DISPATCH_LOCAL_NODE_LOSS_WINDOW", "2s")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.delenv("DISPATCH_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    try:
        yield e
    finally:
        # leave no node process of this test behind (its root is unique to the test)
        subprocess.run(["pkill", "-f", str(e.local)], check=False)
