"""A workdir no filesystem call can take (issue 32 item 5): a component over NAME_MAX or the
whole over PATH_MAX was a traceback and exit 1 from `submit` and `submit --dry-run`; it is
exit 2 naming `workdir`, and nothing is recorded."""

from __future__ import annotations

import pytest
from tests.e2e.conftest import Dispatch

LONG = ["/tmp/" + "a" * 256, "/tmp/" + "é" * 128, "/" + "b/" * 2048]


@pytest.mark.parametrize("workdir", LONG, ids=["name-256", "name-256-utf8", "path-4097"])
@pytest.mark.parametrize("dry", [False, True], ids=["submit", "dry-run"])
def test_a_too_long_workdir_is_exit_2_naming_the_key(dispatch: Dispatch, workdir: str,
                                                     dry: bool) -> None:
    spec = dispatch.spec("long", ["true"], workdir=workdir)
    done = dispatch("submit", *(["--dry-run"] if dry else []), str(spec))
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "workdir" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "NAME_MAX" in done.stderr or "PATH_MAX" in done.stderr
    assert dispatch.json("ls", "--all") == []


def test_no_workdir_in_a_removed_directory_is_exit_2_naming_the_key(dispatch: Dispatch) -> None:
    # The default workdir is where submit runs: a directory removed under it has no name.
    spec = dispatch.spec("gone", ["true"])
    done = dispatch.python(
        "import os, sys\n"
        "os.mkdir('gone-dir'); os.chdir('gone-dir'); os.rmdir('../gone-dir')\n"
        "from dispatch.cli import main\n"
        f"main(['submit', {str(spec)!r}])\n")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "workdir" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert dispatch.json("ls", "--all") == []
