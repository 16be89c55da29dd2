"""The local root's change journal (journal.py): each appended ref is read once, a line still
being written waits, a rotation loses nothing a reader can still read, and what a reader
cannot know (rotated twice, truncated) is said: None, a full look."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dispatch.backends.local import journal
from dispatch.backends.local.journal import JOURNAL, ROTATED, JournalReader, note_change


def test_each_appended_ref_is_read_once(tmp_path: Path) -> None:
    reader = JournalReader(tmp_path)
    assert reader.read() is None  # never started: cannot tell
    reader.start()
    assert reader.read() == set()  # no journal yet, and none before
    assert note_change(tmp_path, "l-1") and note_change(tmp_path, "l-2")
    assert note_change(tmp_path, "l-1")
    assert reader.read() == {"l-1", "l-2"}
    assert reader.read() == set()
    assert (tmp_path / JOURNAL).stat().st_mode & 0o777 == 0o600


def test_start_reads_from_the_end(tmp_path: Path) -> None:
    note_change(tmp_path, "before")
    reader = JournalReader(tmp_path)
    reader.start()
    note_change(tmp_path, "after")
    assert reader.read() == {"after"}


def test_a_line_still_being_written_waits_and_garbage_is_ignored(tmp_path: Path) -> None:
    reader = JournalReader(tmp_path)
    reader.start()
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b"l-1\n../etc/passwd\n\x00\nl-2")
    assert reader.read() == {"l-1"}
    with open(tmp_path / JOURNAL, "ab") as f:
        f.write(b"\n")
    assert reader.read() == {"l-2"}


def test_a_rotation_loses_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "ROTATE_BYTES", 10)
    reader = JournalReader(tmp_path)
    reader.start()
    note_change(tmp_path, "l-aaaaaaaa")
    late = os.open(tmp_path / JOURNAL, os.O_WRONLY | os.O_APPEND)  # a writer that opened it
    assert reader.read() == {"l-aaaaaaaa"}  # past ROTATE_BYTES: this reader rotates it
    assert (tmp_path / ROTATED).exists() and not (tmp_path / JOURNAL).exists()
    os.write(late, b"l-late\n")  # lands in the rotated file
    os.close(late)
    note_change(tmp_path, "l-new")  # a new journal
    assert reader.read() == {"l-late", "l-new"}
    other = JournalReader(tmp_path)
    other.start()
    note_change(tmp_path, "l-3")
    assert other.read() == {"l-3"}


def test_what_cannot_be_known_is_none(tmp_path: Path) -> None:
    reader = JournalReader(tmp_path)
    reader.start()
    note_change(tmp_path, "l-1")
    assert reader.read() == {"l-1"}
    # rotated twice: what was appended to the first rotated file after the read is gone
    os.replace(tmp_path / JOURNAL, tmp_path / ROTATED)
    note_change(tmp_path, "l-2")
    os.replace(tmp_path / JOURNAL, tmp_path / ROTATED)
    assert reader.read() is None
    reader.start()
    note_change(tmp_path, "l-3")
    assert reader.read() == {"l-3"}
    note_change(tmp_path, "l-4")
    os.truncate(tmp_path / JOURNAL, 0)  # truncated under the reader
    assert reader.read() is None
    assert reader.read() is None  # until started again


def test_a_journal_made_and_rotated_away_since_start_is_none(tmp_path: Path) -> None:
    reader = JournalReader(tmp_path)
    reader.start()  # no journal
    note_change(tmp_path, "l-1")
    os.replace(tmp_path / JOURNAL, tmp_path / ROTATED)
    note_change(tmp_path, "l-2")
    assert reader.read() is None


def test_an_append_that_cannot_be_made_says_so(tmp_path: Path) -> None:
    assert note_change(tmp_path / "absent", "l-1") is False
    (tmp_path / "target").write_bytes(b"")
    os.symlink(tmp_path / "target", tmp_path / JOURNAL)  # never followed
    assert note_change(tmp_path, "l-1") is False
    assert (tmp_path / "target").read_bytes() == b""
