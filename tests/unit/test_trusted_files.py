"""open_trusted: what makes a file one dispatch may act on (the server's token file, a
kubeconfig). Another user is ``nobody`` (uid 65534): the tests run as root to chown to it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dispatch.support.trusted_files import UntrustedFile, open_trusted

NOBODY = 65534
pytestmark = pytest.mark.skipif(os.getuid() != 0, reason="needs root to chown to nobody")


def read(path: Path, **how: bool) -> bytes:
    fd = open_trusted(path, "the file", **how)
    try:
        return os.read(fd, 100)
    finally:
        os.close(fd)


def refused(path: Path, **how: bool) -> str:
    with pytest.raises(UntrustedFile) as caught:
        read(path, **how)
    assert str(caught.value).startswith(f"the file {path}: ")
    return str(caught.value)


def file(path: Path, mode: int = 0o600) -> Path:
    path.write_bytes(b"ours")
    path.chmod(mode)
    return path


def test_our_file_through_our_links_and_a_sticky_shared_directory_is_read(
        tmp_path: Path) -> None:
    sticky = tmp_path / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)  # as /tmp: others can write, but not rename or remove what is ours
    ours = sticky / "mine"
    ours.mkdir()
    target = file(ours / "f", 0o644)
    (tmp_path / "a").symlink_to("sticky/mine")  # a relative link to a directory
    # a link through a link: "a/.." is the directory above where "a" leads, as the kernel reads it
    (tmp_path / "b").symlink_to(tmp_path / "a" / ".." / "mine" / "f")
    assert read(tmp_path / "b") == b"ours"
    assert read(target) == b"ours"


def test_links_and_directories_of_another_user_on_the_way_are_refused(tmp_path: Path) -> None:
    target = file(tmp_path / "f")
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "link").symlink_to(target)
    os.lchown(theirs / "link", NOBODY, NOBODY)
    assert f"the symbolic link {theirs / 'link'} belongs to uid {NOBODY}" in refused(
        theirs / "link")
    os.chown(theirs, NOBODY, NOBODY)
    (tmp_path / "via").symlink_to(theirs / "link")  # our link, through their directory
    assert f"the directory {theirs} is owned by another user (uid {NOBODY})" in refused(
        tmp_path / "via")


def test_a_file_others_can_write_or_that_is_no_file_is_refused(tmp_path: Path) -> None:
    assert "writable by group or others (mode 602)" in refused(file(tmp_path / "g", 0o602))
    os.mkfifo(tmp_path / "fifo", 0o600)
    assert "not a regular file" in refused(tmp_path / "fifo")  # and open did not block
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert "more than 40 symbolic links" in refused(tmp_path / "loop")
    with pytest.raises(FileNotFoundError):
        read(tmp_path / "absent")


def test_a_private_file_is_ours_alone_in_a_directory_nobody_else_writes(
        tmp_path: Path) -> None:
    assert "chmod 600 it" in refused(file(tmp_path / "r", 0o640), private=True)
    link = tmp_path / "link"
    link.symlink_to(file(tmp_path / "f"))
    assert "cannot open: a symbolic link" in refused(link, follow_links=False)
    shared = tmp_path / "shared"
    shared.mkdir()
    path = file(shared / "tokens")
    shared.chmod(0o770)
    os.chown(shared, 0, NOBODY)  # a group with others in it
    assert (f"the directory {shared} can be written by its group (gid {NOBODY}) and is not "
            "sticky (mode 770)") in refused(path, private=True)


def test_the_users_private_group_is_nobody_else(tmp_path: Path) -> None:
    """As the folder rule has it (umask 002 systems): root's group root, no other member."""
    ours = tmp_path / "ours"
    ours.mkdir()
    ours.chmod(0o775)
    assert read(file(ours / "f", 0o664)) == b"ours"
    os.chown(ours / "f", 0, NOBODY)
    assert "writable by group or others (mode 664)" in refused(ours / "f")
