"""G3's input: the progress file the training appends to, read bounded and only when it is
plainly dispatch's (real files, a real symlink, the real helper writing through the env var)."""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dispatch.backends.capture.progress import read_progress
from dispatch.core.progress import PROGRESS_FILE_VAR, TAIL_BYTES, Checkpoint
from dispatch.progress import report

NOW = datetime(2026, 1, 1, 12, tzinfo=UTC)
STARTED = NOW - timedelta(hours=1)


def test_the_helper_writes_what_the_reader_takes(tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "node0.progress.jsonl"
    monkeypatch.setenv(PROGRESS_FILE_VAR, str(path))
    assert report(1) and report(3, checkpoint=True) and report(4)
    now = datetime.now(UTC)
    found = read_progress(path, started=now - timedelta(minutes=1), now=now + timedelta(1))
    assert found.note == "" and found.checkpoint is not None
    assert found.checkpoint.step == 3
    assert abs(found.checkpoint.written - now) < timedelta(seconds=30)


def test_the_helper_does_nothing_outside_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(PROGRESS_FILE_VAR, raising=False)
    assert report(5, checkpoint=True) is False


def test_a_line_without_time_is_dated_when_read_and_a_partial_line_is_skipped(
        tmp_path: Path) -> None:
    path = tmp_path / "p"
    path.write_bytes(b'{"step": 3, "checkpoint": true}\n{"step": 6, "checkp')
    assert read_progress(path, started=STARTED, now=NOW).checkpoint == Checkpoint(
        step=3, written=NOW)


def test_a_time_before_the_run_counts_from_the_run(tmp_path: Path) -> None:
    path = tmp_path / "p"
    path.write_text('{"step": 3, "checkpoint": true, "time": 10.0}\n')
    assert read_progress(path, started=STARTED, now=NOW).checkpoint == Checkpoint(
        step=3, written=STARTED)


def test_only_the_end_of_a_long_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "p"
    lines = [f'{{"step": {i}, "checkpoint": {"true" if i % 3 == 0 else "false"}}}\n'
             for i in range(20_000)]
    path.write_text("".join(lines))
    assert path.stat().st_size > TAIL_BYTES
    found = read_progress(path, started=STARTED, now=NOW)
    assert found.checkpoint is not None and found.checkpoint.step == 19_998


@pytest.mark.parametrize("content, why", [
    (b"not json\n", "not a progress line"),
    (b'{"step": "x", "checkpoint": true}\n', "not a progress line"),
    (b'{"step": -1, "checkpoint": true}\n', "negative step"),
    (b'{"step": 1, "checkpoint": true, "extra": ' + b'"x' * 3000 + b'"}\n', "more than"),
])
def test_a_malformed_file_is_ignored_with_a_note(tmp_path: Path, content: bytes,
                                                 why: str) -> None:
    path = tmp_path / "p"
    path.write_bytes(content)
    found = read_progress(path, started=STARTED, now=NOW)
    assert found.checkpoint is None and why in found.note and str(path) in found.note


def test_a_symlink_is_ignored_with_a_note(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.write_text('{"step": 9, "checkpoint": true}\n')
    link = tmp_path / "link"
    link.symlink_to(real)
    found = read_progress(link, started=STARTED, now=NOW)
    assert found.checkpoint is None and "symbolic link" in found.note


def test_a_huge_file_is_ignored_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "p"
    with path.open("wb") as f:
        f.truncate(300 * 1024 * 1024)  # sparse: costs no disk
    found = read_progress(path, started=STARTED, now=NOW)
    assert found.checkpoint is None and "more than" in found.note


def test_another_users_file_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "p"
    path.write_text('{"step": 9, "checkpoint": true}\n')
    found = read_progress(path, started=STARTED, now=NOW, uid=os.getuid() + 1)
    assert found.checkpoint is None and "belongs to uid" in found.note


def test_no_file_yet_is_no_progress(tmp_path: Path) -> None:
    found = read_progress(tmp_path / "none", started=STARTED, now=NOW)
    assert found.checkpoint is None and found.note == ""
