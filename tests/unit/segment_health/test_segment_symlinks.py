"""Planted links in the shared decision directory (issue 13, security).

Anyone who can write the directory can plant a link under any name dispatch uses there;
dispatch (often root) must never create, write, read or remove anything through it. Each
case plants a link to a file OUTSIDE the directory (existing, or a path that does not exist
yet), runs one operation, and checks: the operation is refused with SymlinkRefused naming
the link, the outside file is byte-for-byte untouched (or still absent), the link is still
there. Real files in a temp dir; no mocks except where a random temp name is pinned.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from dispatch.errors import BadInput
from dispatch.segment_health import publisher
from dispatch.segment_health.artifact import SegmentHealthError
from dispatch.segment_health.directory import (
    DecisionDirectory,
    NotARegularFile,
    SymlinkRefused,
    open_directory,
)
from dispatch.segment_health.publisher import clear, list_decisions, publish, read_state

JOB, TASK = "123", "7"
NAMES = {
    "lock": f".segment_health_check.{JOB}.lock",
    "unit": f"segment_health_check.{JOB}.{TASK}",
    "state": f"segment_health_check.{JOB}.state",
}
OUTSIDE_CONTENT = b"root:x:0:0:precious\n"


def do_publish(d: Path) -> object:
    return publish(d, JOB, TASK, decision={"why": "x"})


def do_clear(d: Path) -> object:
    return clear(d, JOB, TASK)


def do_read_state(d: Path) -> object:
    return read_state(d, JOB)


OPERATIONS: dict[str, Callable[[Path], object]] = {
    "publish": do_publish,
    "clear": do_clear,
    "read_state": do_read_state,
}
# Which planted names each operation must refuse (it opens, writes or removes them).
REFUSES = {
    "publish": ("lock", "unit", "state"),
    "clear": ("lock", "unit", "state"),
    "read_state": ("state",),
}
CASES = [(op, name, exists) for op, names in REFUSES.items() for name in names
         for exists in (True, False)]


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    decisions = tmp_path / "decisions"
    outside = tmp_path / "outside"
    decisions.mkdir()
    outside.mkdir()
    return decisions, outside


def setup_for_clear(decisions: Path, op: str, planted: str) -> None:
    # clear has something to do: a published unit (unless the unit name is the planted one)
    if op == "clear" and planted != "unit":
        (decisions / NAMES["unit"]).write_bytes(b'{"why":"x"}\n')


@pytest.mark.parametrize(("op", "planted", "target_exists"), CASES)
def test_a_planted_link_is_refused_and_its_target_untouched(
    layout: tuple[Path, Path], op: str, planted: str, target_exists: bool
) -> None:
    decisions, outside = layout
    target = outside / "victim"
    if target_exists:
        target.write_bytes(OUTSIDE_CONTENT)
        os.chmod(target, 0o600)
        before = os.stat(target)
    setup_for_clear(decisions, op, planted)
    link = decisions / NAMES[planted]
    link.symlink_to(target)

    with pytest.raises(SymlinkRefused) as refused:
        OPERATIONS[op](decisions)

    assert str(link) in str(refused.value) and refused.value.path == link
    assert isinstance(refused.value, SegmentHealthError) and isinstance(refused.value, BadInput)
    assert os.path.islink(link)  # the link itself is left for a person to look at
    if target_exists:
        after = os.stat(target)
        assert target.read_bytes() == OUTSIDE_CONTENT
        assert (after.st_mode, after.st_ino, after.st_mtime_ns) == (
            before.st_mode, before.st_ino, before.st_mtime_ns)
    else:
        assert not os.path.lexists(target)  # never created through the link
    assert os.listdir(outside) == (["victim"] if target_exists else [])


def test_publish_refuses_a_planted_state_link_before_writing_the_unit(
    layout: tuple[Path, Path],
) -> None:
    decisions, outside = layout
    (decisions / NAMES["state"]).symlink_to(outside / "victim")
    with pytest.raises(SymlinkRefused):
        do_publish(decisions)
    assert not (decisions / NAMES["unit"]).exists()  # refused as a whole, nothing half-done


def test_clear_keeps_a_unit_link_and_the_file_it_names(layout: tuple[Path, Path]) -> None:
    # Decision documented in directory.DecisionDirectory.remove: refuse, do not unlink.
    decisions, outside = layout
    target = outside / "decision"
    target.write_bytes(b'{"why":"someone else"}\n')
    (decisions / NAMES["unit"]).symlink_to(target)
    with pytest.raises(SymlinkRefused):
        clear(decisions, JOB, TASK)
    assert os.path.islink(decisions / NAMES["unit"]) and target.exists()


def test_a_planted_temp_name_is_never_opened(
    layout: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The temp file is created O_EXCL: a link under the name it picks makes it pick again."""
    decisions, outside = layout
    names = iter(["aaaaaaaaaaaa", "aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc"])
    monkeypatch.setattr("dispatch.segment_health.directory.secrets.token_hex",
                        lambda _n: next(names))
    victim = outside / "victim"
    (decisions / f".{NAMES['unit']}.aaaaaaaaaaaa.tmp").symlink_to(victim)
    publish(decisions, JOB, TASK, decision={"why": "x"})
    assert not os.path.lexists(victim)
    assert (decisions / NAMES["unit"]).read_bytes() == b'{"why":"x"}\n'
    assert os.path.islink(decisions / f".{NAMES['unit']}.aaaaaaaaaaaa.tmp")
    assert not os.path.exists(decisions / f".{NAMES['unit']}.bbbbbbbbbbbb.tmp")  # renamed


def test_a_hard_link_under_the_lock_name_is_never_written(layout: tuple[Path, Path]) -> None:
    decisions, outside = layout
    victim = outside / "victim"
    victim.write_bytes(OUTSIDE_CONTENT)
    os.link(victim, decisions / NAMES["lock"])
    before = os.stat(victim)
    publish(decisions, JOB, TASK, decision={"why": "x"})
    clear(decisions, JOB, TASK)
    after = os.stat(victim)
    assert victim.read_bytes() == OUTSIDE_CONTENT
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)


@pytest.mark.timeout(30)
def test_a_fifo_under_the_state_name_is_refused_without_hanging(
    layout: tuple[Path, Path],
) -> None:
    decisions, _ = layout
    os.mkfifo(decisions / NAMES["state"])
    with pytest.raises(NotARegularFile) as refused:
        read_state(decisions, JOB)
    assert "FIFO" in str(refused.value) and NAMES["state"] in str(refused.value)
    with pytest.raises(NotARegularFile):
        do_publish(decisions)
    assert not (decisions / NAMES["unit"]).exists()


@pytest.mark.timeout(30)
def test_a_fifo_under_the_lock_name_is_refused(layout: tuple[Path, Path]) -> None:
    decisions, _ = layout
    os.mkfifo(decisions / NAMES["lock"])
    with pytest.raises(NotARegularFile):
        do_publish(decisions)


def test_a_directory_under_the_unit_name_is_refused(layout: tuple[Path, Path]) -> None:
    decisions, _ = layout
    (decisions / NAMES["unit"]).mkdir()
    with pytest.raises(NotARegularFile) as refused:
        do_publish(decisions)
    assert "directory" in str(refused.value)
    with pytest.raises(NotARegularFile):
        do_clear(decisions)
    assert (decisions / NAMES["unit"]).is_dir()


@pytest.mark.timeout(30)
def test_list_never_reads_through_a_link(layout: tuple[Path, Path]) -> None:
    """A link to a FIFO outside: reading through it would hang; it is not even listed."""
    decisions, outside = layout
    os.mkfifo(outside / "fifo")
    (decisions / f"segment_health_check.{JOB}.8").symlink_to(outside / "fifo")
    (outside / "secret").write_bytes(b'{"password": "hunter2"}\n')
    (decisions / f"segment_health_check.{JOB}.9").symlink_to(outside / "secret")
    publish(decisions, JOB, TASK, decision={"why": "x"})
    found = list_decisions(decisions)
    assert [(d.job_id, d.task_id) for d in found] == [(JOB, TASK)]
    # the state counts only regular files dispatch can vouch for
    assert read_state(decisions, JOB) == [TASK]


def test_a_directory_swapped_for_a_link_after_opening_changes_nothing(
    layout: tuple[Path, Path],
) -> None:
    """Every name is opened relative to the directory's descriptor, not its path."""
    decisions, outside = layout
    with open_directory(decisions, create=False) as found:
        assert isinstance(found, DecisionDirectory)
        os.rename(decisions, decisions.with_name("moved"))
        decisions.symlink_to(outside)
        with found.lock(JOB):
            publisher.write_unit(found, JOB, TASK, b'{"why":"x"}\n')
    assert os.listdir(outside) == []
    moved = decisions.with_name("moved")
    assert stat.S_ISREG(os.lstat(moved / NAMES["unit"]).st_mode)


def test_two_publishers_still_exclude_each_other(layout: tuple[Path, Path]) -> None:
    """The lock still locks through the descriptor-relative open (one writer at a time)."""
    decisions, _ = layout
    order: list[str] = []
    with open_directory(decisions, create=False) as found:
        assert found is not None
        with found.lock(JOB):
            thread = threading.Thread(target=lambda: (do_publish(decisions),
                                                      order.append("other")))
            thread.start()
            thread.join(0.3)
            order.append("first")
        thread.join(10)
    assert order == ["first", "other"]
