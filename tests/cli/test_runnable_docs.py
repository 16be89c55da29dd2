"""Issue 24: the docs stay true. Every fenced block in README.md, docs/python-api.md and
docs/coming-from-submitit.md that follows a ``<!-- runnable -->`` line is run as written
(sh: by bash, from the repository
root, with this checkout's `dispatch` first on PATH; python: by this Python), each with a
throwaway record store and local root, and must succeed. And what the docs say a printed
value looks like is what the code prints."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import dispatch
from dispatch.core.model import CauseKind, State

REPO = Path(__file__).resolve().parents[2]
DOCS = ("README.md", "docs/python-api.md", "docs/coming-from-submitit.md")
RUNNABLE = re.compile(r"^<!-- runnable -->\n+```(\w+)[^\n]*\n(.*?)^```", re.M | re.S)


def blocks(doc: str) -> list[tuple[str, str]]:
    return [(m.group(1), m.group(2)) for m in RUNNABLE.finditer((REPO / doc).read_text())]


def all_blocks() -> list[tuple[str, int, str, str]]:
    return [(doc, i, lang, code) for doc in DOCS for i, (lang, code) in enumerate(blocks(doc))]


def test_each_doc_has_runnable_blocks() -> None:
    """A marker lost in an edit would silently run nothing."""
    for doc in DOCS:
        assert blocks(doc), f"{doc} has no block marked <!-- runnable -->"
        for lang, _ in blocks(doc):
            assert lang in ("sh", "python"), (doc, lang)


@pytest.mark.parametrize(("doc", "index", "lang", "code"), all_blocks(),
                         ids=[f"{d}[{i}]" for d, i, _, _ in all_blocks()])
def test_runnable_block_runs(doc: str, index: int, lang: str, code: str,
                             tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DISPATCH_STORE"}
    env.update({"DISPATCH_STORE": str(tmp_path / "record.sqlite3"),
                "DISPATCH_LOCAL_ROOT": str(tmp_path / "local"),
                "XDG_STATE_HOME": str(tmp_path / "state"),
                "PATH": str(Path(sys.executable).parent) + os.pathsep + env.get("PATH", "")})
    argv = ["bash", "-euo", "pipefail", "-c", code] if lang == "sh" else \
        [sys.executable, "-c", code]
    done = subprocess.run(argv, cwd=REPO if lang == "sh" else tmp_path, env=env, text=True,
                          capture_output=True, timeout=300)
    assert done.returncode == 0, f"{doc} block {index} ({lang}) failed:\n{code}\n" \
        f"{done.stdout}\n{done.stderr}"
    if "dispatch --version" in code:
        assert f"dispatch, version {dispatch.__version__}" in done.stdout


def test_python_api_doc_shows_what_print_prints() -> None:
    """docs/python-api.md once showed ``State.SUCCEEDED CauseKind.NONE``; the enums print as
    their word. The comment in the doc is compared with what ``print`` writes."""
    text = (REPO / "docs" / "python-api.md").read_text()
    m = re.search(r"print\(status\.state, status\.cause\.kind\)\s+# e\.g\. (.+)$", text, re.M)
    assert m is not None
    printed = subprocess.run(
        [sys.executable, "-c", "from dispatch import State, CauseKind; "
                               "print(State.SUCCEEDED, CauseKind.NONE)"],
        text=True, capture_output=True, check=True).stdout.strip()
    assert m.group(1).strip() == printed == "succeeded none"
    assert str(State.SUCCEEDED) == "succeeded" and f"{CauseKind.NODE_LOST}" == "node-lost"
    assert "str(State.SUCCEEDED) == \"succeeded\"" in text


def _quick_start_after_demo() -> list[str]:
    """The README quick start's commands after ``./scripts/demo`` up to its first
    ``dispatch`` command (comments dropped): what a newcomer types next."""
    text = (REPO / "README.md").read_text()
    m = re.search(r"^## Quick start\n.*?^```sh\n(.*?)^```", text, re.M | re.S)
    assert m is not None, "README.md has no quick start block"
    lines = [line.split("#", 1)[0].strip() for line in m.group(1).splitlines()]
    lines = [line for line in lines if line]
    assert lines[0] == "./scripts/demo", lines
    rest = lines[1:]
    first = next((i for i, line in enumerate(rest) if line.startswith("dispatch ")), None)
    assert first is not None, f"the quick start gives no dispatch command after the demo: {rest}"
    return rest[: first + 1]


def test_quick_start_next_command_runs_in_a_clean_shell(tmp_path: Path) -> None:
    """Issue 48 item 1: after ``./scripts/demo`` (which installs into ``.venv``), the
    README's next command ran ``dispatch ls --all`` in a shell that cannot find it. The
    commands the README gives after the demo run, as written, in a login-less shell whose
    PATH has no dispatch, in a checkout whose ``.venv`` is this test's venv."""
    venv = Path(sys.prefix)
    assert (venv / "bin" / "activate").is_file(), f"the tests run from a venv, not {venv}"
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / ".venv").symlink_to(venv, target_is_directory=True)
    env = {"HOME": str(tmp_path), "PATH": "/usr/local/bin:/usr/bin:/bin",
           "DISPATCH_STORE": str(tmp_path / "record.sqlite3"),
           "DISPATCH_LOCAL_ROOT": str(tmp_path / "local"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    bare = subprocess.run(["bash", "--norc", "--noprofile", "-c", "command -v dispatch"],
                          env=env, capture_output=True, text=True)
    assert bare.returncode != 0, f"the clean shell already finds {bare.stdout.strip()}"
    steps = _quick_start_after_demo()
    done = subprocess.run(["bash", "--norc", "--noprofile", "-euo", "pipefail", "-c",
                           "\n".join(steps)], cwd=checkout, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, f"{steps} failed:\n{done.stdout}\n{done.stderr}"
    assert done.stdout.split()[:3] == ["JOB", "NAME", "STATE"], done.stdout  # ls's header
    # and the demo itself ends by telling the same step (its last lines, when the shell
    # that ran it lacks dispatch)
    demo = (REPO / "scripts" / "demo").read_text()
    assert "/activate" in demo and "dispatch ls --all" in demo
