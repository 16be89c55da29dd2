"""What the CLI tests share: an isolated world (record, local root, state) in the test's own
temporary directory, and one way to call the real entry point in-process."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from dispatch.cli import main


def world_env(tmp_path: Path) -> dict[str, str]:
    return {"DISPATCH_STORE": str(tmp_path / "record.sqlite3"),
            "DISPATCH_LOCAL_ROOT": str(tmp_path / "local"),
            "XDG_STATE_HOME": str(tmp_path / "state")}


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return world_env(tmp_path)


def invoke(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr
