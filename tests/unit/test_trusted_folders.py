"""The one folder rule (dispatch.support.trusted_folders) and where submitit applies it
(issue 45, item 1): the base folder, the folders a pattern makes, ``.calls``, the ``%j`` link
and ``dispatch.log``; and submitit parameters dispatch cannot use, refused as ValueErrors
naming the parameter (item 11).

Another user is real: these tests run as root and chown to ``nobody`` (uid 65534); as
another user they check what that user can make (modes), and return before the ownership
half."""

from __future__ import annotations

import grp
import logging
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import dispatch.submitit as submitit
from dispatch.errors import BadInput
from dispatch.fn.calls import UnsafeFolder
from dispatch.submitit.executors import _LOGGED, LOG_NAME
from dispatch.submitit.folders import CALLS, BadFolder, link
from dispatch.submitit.parameters import BadParameterValue
from dispatch.support.trusted_folders import (
    Untrusted,
    check_folder,
    make_folders,
    open_appending,
)

NOBODY = 65534
AS_ROOT = os.getuid() == 0


@pytest.fixture(autouse=True)
def _no_log_handlers() -> Iterator[None]:
    """Each executor made here adds a log handler: take them off again."""
    logger = logging.getLogger("dispatch")
    before = list(logger.handlers)
    yield
    for handler in logger.handlers[:]:
        if handler not in before:
            logger.removeHandler(handler)
            handler.close()
    _LOGGED.clear()


def _other_group() -> int:
    """A group that is not this user's private group (nogroup, else any other)."""
    for name in ("nogroup", "nobody"):
        try:
            gid = grp.getgrnam(name).gr_gid
        except KeyError:
            continue
        if gid != os.getgid():
            return gid
    raise AssertionError("no group other than this user's own")


def test_the_rule_takes_our_folders_and_sticky_ones(tmp_path: Path) -> None:
    for mode in (0o700, 0o755, 0o1777, 0o1770):
        folder = tmp_path / f"m{mode:o}"
        folder.mkdir()
        os.chmod(folder, mode)
        check_folder(folder)
        # A sticky folder anybody can write (/tmp) is fine above a folder of ours.
        (folder / "mine").mkdir(mode=0o700)
        check_folder(folder / "mine")
    check_folder(tmp_path / "absent")  # nothing there: made as ours by whoever needs it
    check_folder(Path("/tmp"))  # root's, sticky


def test_the_rule_refuses_what_others_can_write(tmp_path: Path) -> None:
    everybody = tmp_path / "everybody"
    everybody.mkdir()
    os.chmod(everybody, 0o777)
    with pytest.raises(Untrusted, match="written by everybody and is not sticky") as caught:
        check_folder(everybody)
    assert "chmod go-w" in str(caught.value) and str(everybody) in str(caught.value)
    (tmp_path / "file").write_text("")
    with pytest.raises(Untrusted, match="is not a directory"):
        check_folder(tmp_path / "file")
    if not AS_ROOT:
        return  # only root can give a folder to another user or group here
    group = tmp_path / "group"
    group.mkdir()
    os.chown(group, -1, _other_group())
    os.chmod(group, 0o775)
    with pytest.raises(Untrusted, match="written by its group"):
        check_folder(group)
    os.chown(group, -1, os.getgid())  # root's own group (root): a private group
    check_folder(group)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    os.chmod(theirs, 0o755)
    with pytest.raises(Untrusted, match=r"is owned by another user \(uid 65534\)"):
        check_folder(theirs)
    ours = tmp_path / "ours"
    ours.mkdir()
    their_link = tmp_path / "their-link"
    os.symlink(ours, their_link)
    os.lchown(their_link, NOBODY, NOBODY)
    with pytest.raises(Untrusted, match="is a link owned by another user"):
        check_folder(their_link)
    with pytest.raises(Untrusted, match="owned by another user"):
        make_folders(tmp_path, theirs / "below")
    assert not (theirs / "below").exists()


def test_a_log_file_is_opened_in_the_folder_never_through_a_link(tmp_path: Path) -> None:
    folder = tmp_path / "logs"
    folder.mkdir(mode=0o1777)
    os.chmod(folder, 0o1777)
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    os.chmod(secret, 0o600)
    os.symlink(secret, folder / "planted.log")
    with pytest.raises(Untrusted, match="is a symbolic link"):
        open_appending(folder, "planted.log")
    os.link(secret, folder / "hard.log")
    with pytest.raises(Untrusted, match="has 2 names"):
        open_appending(folder, "hard.log")
    assert secret.read_text() == "root's own\n"
    fd = open_appending(folder, "mine.log")
    os.write(fd, b"line\n")
    os.close(fd)
    assert (folder / "mine.log").read_text() == "line\n"
    assert (folder / "mine.log").stat().st_mode & 0o777 == 0o600


def test_submitit_refuses_a_base_folder_another_user_could_change(tmp_path: Path) -> None:
    everybody = tmp_path / "everybody"
    everybody.mkdir()
    os.chmod(everybody, 0o777)
    with pytest.raises(UnsafeFolder, match="written by everybody and is not sticky") as caught:
        submitit.AutoExecutor(folder=everybody / "%j", cluster="local")
    assert str(everybody) in str(caught.value) and "chmod go-w" in str(caught.value)
    assert os.listdir(everybody) == []  # no dispatch.log, no .calls
    if not AS_ROOT:
        return
    # The audit's case: another user's 0777 folder, their link at dispatch.log to a file of
    # root's. Refused before anything is opened there; the file is as it was.
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    os.chmod(theirs, 0o777)
    os.chown(theirs, NOBODY, NOBODY)
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    os.chmod(secret, 0o600)
    os.symlink(secret, theirs / LOG_NAME)
    os.lchown(theirs / LOG_NAME, NOBODY, NOBODY)
    for folder in (theirs / "%j", theirs):
        with pytest.raises(UnsafeFolder, match=r"owned by another user \(uid 65534\)"):
            submitit.AutoExecutor(folder=folder, cluster="local")
    assert secret.read_text() == "root's own\n"
    assert sorted(os.listdir(theirs)) == [LOG_NAME]


def test_submitit_never_writes_its_log_through_a_planted_link(tmp_path: Path) -> None:
    # A sticky folder (like /tmp) is fine, but what another user made in it is theirs.
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    secret = tmp_path / "secret"
    secret.write_text("root's own\n")
    os.chmod(secret, 0o600)
    os.symlink(secret, shared / LOG_NAME)
    with pytest.raises(UnsafeFolder, match=f"{LOG_NAME} is a symbolic link"):
        submitit.AutoExecutor(folder=shared / "%j", cluster="local")
    assert secret.read_text() == "root's own\n"
    os.unlink(shared / LOG_NAME)
    if AS_ROOT:
        (shared / CALLS).mkdir()
        os.chown(shared / CALLS, NOBODY, NOBODY)
        with pytest.raises(UnsafeFolder, match=f"{CALLS} is owned by another user"):
            submitit.AutoExecutor(folder=shared / "%j", cluster="local")
        os.rmdir(shared / CALLS)
    executor = submitit.AutoExecutor(folder=shared / "%j", cluster="local")
    assert executor.folder == shared / "%j"
    assert (shared / LOG_NAME).stat().st_mode & 0o777 == 0o600
    assert (shared / CALLS).is_dir()
    logging.getLogger("dispatch.test").warning("kept off the terminal")
    assert "kept off the terminal" in (shared / LOG_NAME).read_text()
    # our own folder, as any user makes it, is fine
    submitit.AutoExecutor(folder=tmp_path / "runs" / "%j", cluster="local")


def test_a_job_folder_is_the_link_dispatch_made_or_refused(tmp_path: Path) -> None:
    base = tmp_path / "log"
    base.mkdir()
    os.chmod(base, 0o1777)
    target = base / CALLS / "call-1"
    target.mkdir(parents=True)
    made = link(base / "%j", "123", target)
    assert made == base / "123" and os.readlink(made) == f"{CALLS}/call-1"
    assert link(base / "%j", "123", target) == made  # again: the same link, kept
    # A link there that is not ours to our call folder (made before the job had its id):
    # refused, never followed.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.symlink(elsewhere, base / "124")
    with pytest.raises(UnsafeFolder, match=r"job folder .*/124 is there already") as caught:
        link(base / "%j", "124", target)
    assert "remove it" in str(caught.value)
    # A folder a pattern makes (%A of %A/%a) that another user made first: refused.
    if AS_ROOT:
        os.unlink(base / "124")
        os.symlink(f"{CALLS}/call-1", base / "124")
        os.lchown(base / "124", NOBODY, NOBODY)  # the very target, but their link
        with pytest.raises(UnsafeFolder, match="owner uid 65534"):
            link(base / "%j", "124", target)
        (base / "125").mkdir()
        os.chown(base / "125", NOBODY, NOBODY)
        with pytest.raises(UnsafeFolder, match=r"/125 is owned by another user"):
            link(base / "%A" / "%a", "125_0", target)
        assert os.listdir(base / "125") == []
    assert os.listdir(elsewhere) == []
    nested = link(base / "%A" / "%a", "126_3", target)
    assert nested == base / "126" / "3" and nested.resolve() == target.resolve()
    os.chmod(base, 0o777)  # no longer sticky: another user could swap what is in it
    with pytest.raises(UnsafeFolder, match="written by everybody and is not sticky"):
        link(base / "%j", "123", target)


# ---- item 11: submitit parameters dispatch cannot use --------------------------------------

@pytest.mark.parametrize("cluster", ["local", "slurm"])
@pytest.mark.parametrize(("parameters", "named"), [
    ({"mem_gb": float("inf")}, "mem_gb=inf"),
    ({"mem_gb": float("nan")}, "mem_gb=nan"),
    ({"mem_gb": -1}, "mem_gb=-1"),
    ({"tasks_per_node": 10**6}, "tasks_per_node=1000000"),
    ({"nodes": 2, "tasks_per_node": 60_000}, "tasks_per_node"),
    ({"timeout_min": 10**12}, "timeout_min=1000000000000"),
])
def test_a_value_dispatch_cannot_use_is_a_value_error_naming_the_parameter(
        tmp_path: Path, cluster: str, parameters: dict[str, object], named: str) -> None:
    executor = submitit.AutoExecutor(folder=tmp_path / "%j", cluster=cluster)
    executor.update_parameters(timeout_min=5)
    with pytest.raises(BadParameterValue) as caught:
        executor.update_parameters(**parameters)
    err = caught.value
    assert isinstance(err, ValueError) and isinstance(err, BadInput)
    assert str(err).startswith(named) or f", {named}" in str(err), str(err)
    assert "nodes: must be" not in str(err)  # never a parameter the user did not set
    assert executor.parameters == {"timeout_min": 5}  # nothing changed


@pytest.mark.parametrize(("folder", "words"), [
    ("/proc/%j", "/proc/dispatch.log: No such file or directory"),
    ("{tmp}/" + "a" * 300 + "/%j", "300 bytes"),
    ("{tmp}/x/" + "b" * 240 + "%j", "with a job id put in"),
    ("{tmp}/a\0b/%j", "NUL"),
])
def test_a_folder_no_file_system_takes_is_a_value_error_naming_it(
        tmp_path: Path, folder: str, words: str) -> None:
    with pytest.raises(BadFolder) as caught:
        submitit.AutoExecutor(folder=folder.format(tmp=tmp_path), cluster="local")
    err = caught.value
    assert isinstance(err, ValueError) and isinstance(err, BadInput)
    assert str(err).startswith("folder=") and words in str(err)
    assert not (tmp_path / "x").exists()
