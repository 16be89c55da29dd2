"""`dispatch doctor --backend local` on real roots: a good one, one never made, a missing
one whose parent cannot be written, another user's (the trust rule of LocalRoot.check_trusted),
and one a first submit made."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dispatch.backends.checks import Verdict
from dispatch.backends.local.doctor import doctor
from dispatch.backends.local.root import ROOT_MARKER, LocalRoot

NOBODY = 65534


def verdict(path: Path) -> tuple[Verdict, str]:
    (check,) = doctor(LocalRoot(path, "DISPATCH_LOCAL_ROOT"))
    return check.verdict, check.detail + " | " + check.fix


def test_a_root_made_by_a_submit_is_ready(tmp_path: Path) -> None:
    LocalRoot(tmp_path / "root").claim()
    v, detail = verdict(tmp_path / "root")
    assert v is Verdict.OK and "a dispatch root" in detail


def test_a_root_not_made_yet_is_made_by_the_first_submit(tmp_path: Path) -> None:
    v, detail = verdict(tmp_path / "a" / "b")
    assert v is Verdict.OK and "first submit makes it" in detail


def test_a_folder_without_a_marker_is_a_problem(tmp_path: Path) -> None:
    (tmp_path / "root" / "stray").mkdir(parents=True)
    v, detail = verdict(tmp_path / "root")
    assert v is Verdict.PROBLEM
    assert f"has no {ROOT_MARKER}: it is not mounted, or not a dispatch root" in detail


def test_another_users_root_is_a_problem(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("only root can give a folder to another user here")
    root = tmp_path / "theirs"
    LocalRoot(root).claim()
    os.chown(root, NOBODY, -1)
    v, detail = verdict(root)
    assert v is Verdict.PROBLEM and "not safe to use" in detail
    assert "DISPATCH_LOCAL_ROOT" in detail


def test_a_world_writable_root_is_a_problem(tmp_path: Path) -> None:
    root = tmp_path / "open"
    LocalRoot(root).claim()
    root.chmod(0o777)
    v, detail = verdict(root)
    assert v is Verdict.PROBLEM and "not safe to use" in detail
