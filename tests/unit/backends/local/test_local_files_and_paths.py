"""dispatch.support.files (atomic, durable writes that never follow a planted link) and
dispatch.support.paths (the state directory), as the local backend uses them."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dispatch.backends.local import default_root
from dispatch.support.files import create_exclusive, write_atomic
from dispatch.support.paths import state_home


def test_write_atomic_replaces_whole_with_the_mode_asked(tmp_path: Path) -> None:
    target = tmp_path / "status.json"
    old_umask = os.umask(0o077)
    try:
        write_atomic(target, b"one")
        assert stat.S_IMODE(target.stat().st_mode) == 0o644  # whatever the umask
        write_atomic(target, b"two", mode=0o600)
    finally:
        os.umask(old_umask)
    assert target.read_bytes() == b"two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["status.json"]


@settings(max_examples=25, deadline=None)
@given(st.binary(max_size=300_000))
def test_write_atomic_writes_all_of_the_data(tmp_path_factory: pytest.TempPathFactory,
                                             data: bytes) -> None:
    target = tmp_path_factory.mktemp("w") / "blob"
    write_atomic(target, data)
    assert target.read_bytes() == data


def test_write_atomic_replaces_a_planted_link_instead_of_following_it(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    target = tmp_path / "status.json"
    target.symlink_to(victim)
    write_atomic(target, b"mine")
    assert victim.read_text() == "untouched"
    assert not target.is_symlink() and target.read_bytes() == b"mine"


def test_write_atomic_into_a_missing_directory_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        write_atomic(tmp_path / "nowhere" / "f", b"x")
    assert list(tmp_path.iterdir()) == []


def test_create_exclusive_first_writer_wins_and_links_are_not_followed(tmp_path: Path) -> None:
    target = tmp_path / "vanished.json"
    assert create_exclusive(target, b"first")
    assert not create_exclusive(target, b"second")
    assert target.read_bytes() == b"first"
    victim = tmp_path / "victim"
    victim.write_text("untouched")
    planted = tmp_path / "planted.json"
    planted.symlink_to(victim)
    assert not create_exclusive(planted, b"mine")
    assert victim.read_text() == "untouched"
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "would-be-created")
    assert not create_exclusive(dangling, b"mine")
    assert not (tmp_path / "would-be-created").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "dangling.json", "planted.json", "vanished.json", "victim"]


def test_state_home_follows_xdg_state_home(monkeypatch: pytest.MonkeyPatch,
                                           tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_home() == tmp_path / "xdg" / "dispatch"
    assert default_root() == tmp_path / "xdg" / "dispatch" / "local"


@pytest.mark.parametrize("value", ["relative/state", "", "./state"])
def test_state_home_ignores_a_relative_or_empty_xdg_state_home(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path, value: str) -> None:
    # The XDG spec: a relative path in these variables is invalid and must be ignored.
    monkeypatch.setenv("XDG_STATE_HOME", value)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_home() == tmp_path / "home" / ".local" / "state" / "dispatch"
