"""Issue 21 item 3: one log request must not take gigabytes. `dispatch logs` of a job that
wrote a few hundred MB (through the real local runner) streams it with bounded memory, and
`--tail N` / `Job.logs(tail=N)` give exactly the last N lines, read from the end of the file."""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from tests.e2e.conftest import Dispatch, script

LINE = b"x" * 99 + b"\n"
BLOCKS = 2000  # blocks of 1000 lines: 200 MB of output
BIG = script(
    "import sys\n"
    f"block = {LINE!r} * 1000\n"
    "w = sys.stdout.buffer.write\n"
    f"for i in range({BLOCKS}): w(block)\n"
    "print('the line before the last')\n"
    "print('the last line')\n")
BIG_BYTES = len(LINE) * 1000 * BLOCKS + len(b"the line before the last\nthe last line\n")
MOST_RSS = 100 * 1024 * 1024  # the bound, whatever the log's size

# Runs argv, its stdout to ours, and says on stderr how much memory it used at its peak
# (ru_maxrss of the one child it waited for, in KiB on Linux).
PEAK_RSS = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:])\n"
    "peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss\n"
    "sys.stderr.write(f'PEAK_KIB {peak}\\n')\n"
    "sys.exit(code)\n")


def measured(dispatch: Dispatch, *args: str) -> tuple[int, int, bytes, int, bytes]:
    """Run `dispatch ARGS` and read its stdout as it comes, keeping only a count, a hash
    and the end: (exit code, bytes, sha256, peak RSS in bytes, the last 200 bytes)."""
    proc = subprocess.Popen([sys.executable, "-c", PEAK_RSS, *dispatch.argv(*args)],
                            env=dispatch.env, cwd=dispatch.tmp, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    digest = hashlib.sha256()
    count = 0
    end = b""
    while chunk := proc.stdout.read(1 << 20):
        count += len(chunk)
        digest.update(chunk)
        end = (end + chunk)[-200:]
    err = proc.stderr.read().decode()
    code = proc.wait(timeout=600)
    peak = [line for line in err.splitlines() if line.startswith("PEAK_KIB ")]
    assert peak, err
    assert "Traceback" not in err, err
    return code, count, digest.digest(), int(peak[-1].split()[1]) * 1024, end


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dispatch]:
    """One job that wrote 200 MB, shared by the tests that read it (its log is removed at
    the end, with the rest of the directory's contents)."""
    tmp = tmp_path_factory.mktemp("big")
    d = Dispatch(tmp)
    try:
        done = d("run", str(d.spec("big", BIG)), "--poll", "0.5", timeout=600)
        assert done.returncode == 0, done.stderr
        yield d
    finally:
        d.close()
        shutil.rmtree(tmp / "local", ignore_errors=True)


def test_logs_of_a_big_job_stream_in_bounded_memory(big: Dispatch) -> None:
    code, count, digest, peak, end = measured(big, "logs", "big")
    assert code == 0
    assert count == BIG_BYTES  # every byte, once
    expected = hashlib.sha256()
    block = LINE * 1000
    for _ in range(BLOCKS):
        expected.update(block)
    expected.update(b"the line before the last\nthe last line\n")
    assert digest == expected.digest()
    assert end.endswith(b"the line before the last\nthe last line\n")
    assert peak < MOST_RSS, f"dispatch logs peaked at {peak / 2**20:.0f} MiB"


def test_tail_gives_exactly_the_last_lines(big: Dispatch) -> None:
    code, count, _, peak, end = measured(big, "logs", "big", "--tail", "3")
    assert code == 0
    assert end == LINE + b"the line before the last\nthe last line\n"
    assert count == len(end)
    assert peak < MOST_RSS
    assert big("logs", "big", "-n", "1").stdout == "the last line\n"
    assert big("logs", "big", "--tail", "0").stdout == ""
    # The Python API takes the same parameter.
    api = big.python("import dispatch, json\n"
                     "print(json.dumps(list(dispatch.get('big').logs(tail=2))))")
    assert api.returncode == 0, api.stderr
    assert json.loads(api.stdout) == ["the line before the last", "the last line"]


def test_tail_reads_a_log_from_its_end(big: Dispatch) -> None:
    """What `--tail` reads of a 200 MB log: a little from its end, not the whole file
    (the kernel's count of the bytes the process read, from /proc/<pid>/io at its exit)."""
    probe = (
        "import sys\n"
        "from dispatch.cli import main\n"
        "sys.argv = ['dispatch', *sys.argv[1:]]\n"
        "try:\n"
        "    main()\n"
        "finally:\n"
        "    io = dict(l.split(': ') for l in open('/proc/self/io').read().splitlines())\n"
        "    sys.stderr.write(f\"RCHAR {io['rchar']}\\n\")\n")
    done = subprocess.run([sys.executable, "-c", probe, "logs", "big", "--tail", "5"],
                          env=big.env, cwd=big.tmp, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-2:] == ["the line before the last", "the last line"]
    read = int(next(line for line in done.stderr.splitlines()
                    if line.startswith("RCHAR ")).split()[1])
    assert read < 64 * 1024 * 1024, f"read {read} bytes for 5 lines of a {BIG_BYTES} B log"


def test_tail_counts_an_unfinished_last_line_and_bad_values_are_refused(
        dispatch: Dispatch) -> None:
    body = "import sys\nsys.stdout.write('one\\ntwo\\nthree\\nno end')\n"
    done = dispatch("run", str(dispatch.spec("short", script(body))), "--poll", "0.2")
    assert done.returncode == 0, done.stderr
    assert dispatch("logs", "short", "--tail", "2").stdout == "three\nno end\n"
    assert dispatch("logs", "short", "--tail", "99").stdout == "one\ntwo\nthree\nno end\n"
    bad = dispatch("logs", "short", "--tail", "-1")
    assert bad.returncode == 2 and "--tail" in bad.stderr
    for call in ("logs(tail=-1)", "logs(tail='3')", "logs(submission='1')",
                 "logs(tail=True)"):
        api = dispatch.python(
            "import dispatch\n"
            "from dispatch.errors import BadInput\n"
            "try:\n"
            f"    dispatch.get('short').{call}\n"
            "except BadInput as e:\n"
            "    print('refused:', e)\n")
        assert api.returncode == 0, api.stderr
        parameter = call.split("(")[1].split("=")[0]  # the error names what was wrong
        assert api.stdout.startswith("refused:") and parameter in api.stdout, (call,
                                                                              api.stdout)


def test_logs_into_a_closed_pipe_exit_quietly(big: Dispatch) -> None:
    """`dispatch logs J | head -1`: the reader leaves early; no traceback, exit 0."""
    proc = subprocess.Popen(big.argv("logs", "big"), env=big.env, cwd=big.tmp,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    assert proc.stdout.readline() == LINE
    proc.stdout.close()
    deadline = time.monotonic() + 120
    while proc.poll() is None:
        assert time.monotonic() < deadline, "dispatch logs went on writing into a closed pipe"
        time.sleep(0.1)
    err = proc.stderr.read().decode()
    assert proc.returncode == 0, err
    assert "Traceback" not in err
