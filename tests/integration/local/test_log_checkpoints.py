"""The runner's side of a spec's log pattern (G3): each line of a node's output that matches
becomes a progress line in ``node<i>.logcheckpoints.jsonl``, read like the training's own."""

from __future__ import annotations

import json
import os
import select
import subprocess
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

from dispatch.backends.capture.progress import read_progress
from dispatch.backends.local.log_checkpoints import LogCheckpoints
from dispatch.backends.local.output import (
    MATCH_PIPE_BYTES,
    MATCH_READ_BYTES,
    NodeOutput,
    copy_until,
)
from dispatch.core.progress import MOST_LINE_BYTES, compile_pattern

PATTERN = r"saved checkpoint at step (?P<step>\d+)"
# At the program bound (512 instructions): matched only in lines of at most 910 bytes.
COSTLY = r"^(?P<step>\d+) [ab]*a[ab]{502}c$"
HANG_S = 60.0  # only bounds a hung drain


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


def _fill(output: NodeOutput, line: bytes) -> int:
    """Write ``line`` into the node's end of the pipe until the pipe is full; the bytes it
    took."""
    os.set_blocking(output.write_fd, False)
    held = 0
    try:
        while True:
            held += os.write(output.write_fd, line)
    except BlockingIOError:
        return held


def test_a_costlier_pattern_is_matched_in_shorter_lines(tmp_path: Path) -> None:
    most = compile_pattern(COSTLY).most_line_bytes
    assert most == 910
    found = tmp_path / "node0.logcheckpoints.jsonl"
    output = NodeOutput(tmp_path / "node0.log", None, LogCheckpoints(COSTLY, found))
    tail = b"a" + b"b" * 502 + b"c"
    try:
        feed(output, b"1 " + b"a" * (most - 2 - len(tail)) + tail + b"\n")  # at the bound
        feed(output, b"2 " + b"a" * (most - 1 - len(tail)) + tail + b"\n")  # one byte over
        feed(output, b"3 " + tail + b"\n")
    finally:
        output.close()
    assert [d["step"] for d in _lines(found)] == [1, 3]


def test_a_matched_node_s_pipe_holds_one_bite_not_1_mib(tmp_path: Path) -> None:
    # Everything left in it is matched before the object may end (issue 45 item 8: 1 MiB of
    # costly lines took 22 s after a cancel).
    output = NodeOutput(tmp_path / "node0.log", None,
                        LogCheckpoints(PATTERN, tmp_path / "node0.logcheckpoints.jsonl"))
    try:
        held = _fill(output, b"x" * 1023 + b"\n")
    finally:
        output.close()
    assert 0 < held <= MATCH_PIPE_BYTES == MATCH_READ_BYTES


def test_past_its_deadline_the_copy_stops_after_one_bite(tmp_path: Path) -> None:
    """A time limit (or a kill's grace) waits for one bite's matching, not one per node;
    the node that has sent the least goes first, so none waits behind another."""
    outputs = [NodeOutput(tmp_path / f"node{i}.log", None,
                          LogCheckpoints(PATTERN, tmp_path / f"node{i}.logcheckpoints.jsonl"))
               for i in range(3)]
    wake_read, wake_write = os.pipe()
    try:
        held = [_fill(output, b"saved checkpoint at step 1\n") for output in outputs]
        copy_until(wake_read, outputs, 0.0)  # the deadline is now: every pipe is full
        assert sorted(o.taken for o in outputs) == [0, 0, held[0]]
        copy_until(wake_read, outputs, 0.0)
        copy_until(wake_read, outputs, 0.0)
        assert [o.taken for o in outputs] == held
    finally:
        for output in outputs:
            output.close()
        os.close(wake_read)
        os.close(wake_write)


def test_the_end_s_drain_reads_at_most_a_pipe_though_a_writer_stays(tmp_path: Path) -> None:
    """A process of the object that could not be killed may keep writing: the end's drain
    still ends, after at most what the pipe holds (and the bite that crosses it)."""
    output = NodeOutput(tmp_path / "node0.log", None,
                        LogCheckpoints(PATTERN, tmp_path / "node0.logcheckpoints.jsonl"))
    writer = subprocess.Popen(["yes", "saved checkpoint at step 1"], stdout=output.write_fd)
    output.started()
    drained = threading.Event()

    def run_drain() -> None:
        output.drain()
        drained.set()

    drain = threading.Thread(target=run_drain, daemon=True)
    try:
        assert select.select([output.read_fd], [], [], HANG_S)[0], "yes never wrote"
        drain.start()
        ended = drained.wait(HANG_S)
    finally:
        writer.kill()
        writer.wait()
        drain.join()
        taken = output.taken
        output.close()
    assert ended, "the drain did not end while a writer stayed"
    assert 0 < taken < MATCH_PIPE_BYTES + MATCH_READ_BYTES
