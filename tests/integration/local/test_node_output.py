"""Issue 21 item 8, the runner's side of a node's output (output.py) on a real pipe and a real
full filesystem (a 1 MiB tmpfs): output the disk will not take is dropped and counted, the
writer never blocks, and once there is room again one line says how much was lost."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dispatch.backends.local.output import NodeOutput


@pytest.fixture
def tiny_fs(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "tiny"
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # Only a non-root run may go without it: CI runs as root, where a failed mount is
        # a broken test machine, not a reason to count the test as passed.
        if os.geteuid() == 0:
            pytest.fail(f"cannot mount a tmpfs as root: {done.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount): {done.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


def feed(output: NodeOutput, data: bytes) -> None:
    """Write ``data`` into the node's end of the pipe and let the runner's side copy it."""
    view = memoryview(data)
    while view:
        view = view[os.write(output.write_fd, view[:65536]):]
        output.drain()


def test_a_full_disk_drops_output_and_says_so_once_there_is_room(tiny_fs: Path) -> None:
    ballast = tiny_fs / "ballast"
    output = NodeOutput(tiny_fs / "node0.log", None)
    try:
        feed(output, b"first line\n")
        with open(ballast, "wb", buffering=0) as f:  # fill the rest
            try:
                while True:
                    f.write(b"\0" * 4096)
            except OSError:
                pass
        feed(output, b"z" * 300_000)  # the disk takes none of it; the writer goes on
        assert output.lost > 0
        ballast.unlink()  # room again
        feed(output, b"after the room came back\n")
    finally:
        output.close()
    text = (tiny_fs / "node0.log").read_bytes()
    assert text.startswith(b"first line\n")
    assert text.endswith(b"bytes of output lost: No space left on device\n"
                         b"after the room came back\n")
    lost_line = text.splitlines()[-2]
    kept_z = text.count(b"z")
    assert lost_line == f"== dispatch: {300_000 - kept_z} bytes of output lost: No space left " \
                        f"on device".encode()


def test_output_past_the_limit_is_cut_with_a_note(tmp_path: Path) -> None:
    output = NodeOutput(tmp_path / "node0.log", 10)
    try:
        feed(output, b"0123456789abcdef\nmore\n")
        feed(output, b"and more\n")
        assert output.taken == 31
    finally:
        output.close()
    assert (tmp_path / "node0.log").read_bytes() == (
        b"0123456789\n== dispatch: output cut at 10 bytes (max_output_bytes); the rest is "
        b"discarded, the job goes on\n")
