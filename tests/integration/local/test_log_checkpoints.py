"""The runner's side of a spec's log pattern (G3): each line of a node's output that matches
becomes a progress line in ``node<i>.logcheckpoints.jsonl``, read like the training's own."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

from dispatch.backends.capture.progress import read_progress
from dispatch.backends.local.log_checkpoints import LogCheckpoints
from dispatch.backends.local.output import NodeOutput
from dispatch.core.progress import MOST_LINE_BYTES

PATTERN = r"saved checkpoint at step (?P<step>\d+)"


def feed(output: NodeOutput, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(output.write_fd, view[:65536]):]
        output.drain()


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_matching_lines_become_checkpoints_split_cut_or_unterminated(tmp_path: Path) -> None:
    found = tmp_path / "node0.logcheckpoints.jsonl"
    before = time.time()
    output = NodeOutput(tmp_path / "node0.log", 40, LogCheckpoints(PATTERN, found))
    try:
        feed(output, b"step 1\nsaved checkpoint at st")  # a line split across reads
        feed(output, b"ep 3\nstep 4\n")
        feed(output, b"x" * (MOST_LINE_BYTES + 10) + b" saved checkpoint at step 99\n")
        feed(output, b"saved checkpoint at step 6\n")  # past the 40-byte cut: still read
        feed(output, b"saved checkpoint at step 9")  # no newline: matched at the end
    finally:
        output.close()
    after = time.time()
    docs = _lines(found)
    assert [d["step"] for d in docs] == [3, 6, 9]  # the over-long line is not matched
    assert all(d["checkpoint"] is True and before <= d["time"] <= after for d in docs)
    assert b"output cut at 40 bytes" in (tmp_path / "node0.log").read_bytes()
    now = datetime.now(UTC)
    progress = read_progress(found, started=None, now=now)
    assert progress.checkpoint is not None and progress.checkpoint.step == 9


def test_no_file_is_written_without_a_match_nor_through_a_link(tmp_path: Path) -> None:
    found = tmp_path / "node0.logcheckpoints.jsonl"
    output = NodeOutput(tmp_path / "node0.log", None, LogCheckpoints(PATTERN, found))
    try:
        feed(output, b"loss 0.3\n")
        assert not found.exists()
        target = tmp_path / "elsewhere"
        target.write_bytes(b"")
        found.symlink_to(target)
        feed(output, b"saved checkpoint at step 3\n")  # dropped: never through a link
    finally:
        output.close()
    assert target.read_bytes() == b""
    assert (tmp_path / "node0.log").read_bytes().endswith(b"saved checkpoint at step 3\n")


def test_several_matches_in_one_read_are_each_a_checkpoint_in_order(tmp_path: Path) -> None:
    found = tmp_path / "node0.logcheckpoints.jsonl"
    output = NodeOutput(tmp_path / "node0.log", None, LogCheckpoints(PATTERN, found))
    try:
        feed(output, b"".join(b"saved checkpoint at step %d\nloss\n" % i for i in range(1, 6)))
    finally:
        output.close()
    assert [d["step"] for d in _lines(found)] == [1, 2, 3, 4, 5]
