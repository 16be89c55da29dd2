"""Issue 21 item 8: a full disk fails no healthy neighbour. The local root is a real 8 MiB
tmpfs; one job's output fills it while a neighbour runs. The neighbour is never committed
failed/unknown ("runner vanished"): its runner, unable to write its status, keeps the object
going and writes the status once there is room (S16). `ls`, `status` and `run` answer with
exit codes of the documented table, never a traceback; a store on a full disk is exit 5.
`max_output_bytes` cuts a job's output with a note and does not kill it."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from tests.e2e.conftest import Dispatch, script, wait_until

SIZE = "8m"
EXIT_TABLE = {0, 1, 2, 3, 4, 5, 6, 130}

# Writes as fast as it can, forever (its output goes through the runner, which drops what
# the full disk will not take).
FILLER = script(
    "import sys\n"
    "block = b'f' * 65536\n"
    "while True:\n"
    "    sys.stdout.buffer.write(block)\n"
    "    sys.stdout.flush()\n")
# Prints a line, then waits for the test's word (a file outside the full disk) and ends 0.
NEIGHBOUR = script(
    "import os, time\n"
    "print('neighbour up', flush=True)\n"
    "while not os.path.exists('release'):\n"
    "    time.sleep(0.1)\n"
    "print('neighbour done', flush=True)\n")


def mount_tmpfs(where: Path) -> None:
    where.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(where)],
                          capture_output=True, text=True, check=False)
    if done.returncode != 0:
        # Only a non-root run may go without it: CI runs as root, where a failed mount is
        # a broken test machine, not a reason to count the test as passed.
        if os.geteuid() == 0:
            pytest.fail(f"cannot mount a tmpfs as root: {done.stderr.strip()}")
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount): {done.stderr.strip()}")


def unmount(where: Path) -> None:
    """End the runners this test started there (by pid: SIGTERM, which ends their nodes,
    then SIGKILL for one that still waits for room to write), then unmount."""
    runners = [p for p in psutil.process_iter(["pid", "cmdline"])
               if any(str(where) in part for part in p.info["cmdline"] or ())]
    for proc in runners:
        try:
            proc.terminate()
        except psutil.Error:
            pass
    _, left = psutil.wait_procs(runners, timeout=10)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    for _ in range(50):
        if subprocess.run(["umount", str(where)], capture_output=True,
                          check=False).returncode == 0:
            return
        time.sleep(0.1)
    subprocess.run(["umount", "-l", str(where)], check=False)


def object_dir(root: Path, name: str) -> Path:
    """The object directory of the job named ``name`` (one submission)."""
    for d in (root / "objects").iterdir():
        if json.loads((d / "meta.json").read_bytes())["name"] == name:
            return d
    raise AssertionError(f"no object of {name} under {root}")


def node_pid(objdir: Path) -> int:
    """The pid of node 0 as the runner's status says (once it has started)."""
    def started() -> bool:
        try:
            return bool(json.loads((objdir / "status.json").read_bytes())["nodes"][0].get("pid"))
        except (OSError, ValueError, KeyError, IndexError):
            return False
    wait_until(started, f"node 0 of {objdir.name} never started")
    return int(json.loads((objdir / "status.json").read_bytes())["nodes"][0]["pid"])


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def full(where: Path) -> bool:
    st = os.statvfs(where)
    return st.f_bavail * st.f_frsize < 64 * 1024


def no_traceback(done: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in done.stderr + done.stdout, done.stderr
    assert done.returncode in EXIT_TABLE, (done.returncode, done.stderr)


@pytest.fixture
def small_root(dispatch: Dispatch) -> Iterator[Path]:
    root = dispatch.tmp / "small-root"
    mount_tmpfs(root)
    dispatch.env["DISPATCH_LOCAL_ROOT"] = str(root)
    try:
        yield root
    finally:
        unmount(root)


def test_a_full_local_root_fails_no_neighbour(dispatch: Dispatch, small_root: Path) -> None:
    dispatch.spawn("supervise", "--poll", "0.3")
    dispatch("submit", str(dispatch.spec("neighbour", NEIGHBOUR)), check=True)
    dispatch.wait_for("neighbour", lambda s: s["state"] == "running")
    dispatch("submit", str(dispatch.spec("filler", FILLER)), check=True)
    wait_until(lambda: full(small_root), "the filler never filled the local root")

    # The neighbour ends while the disk is full: its runner cannot write the final status
    # (nor a line of its own log).
    neighbour_dir = object_dir(small_root, "neighbour")
    neighbour_node = node_pid(neighbour_dir)
    runner_pid = json.loads((neighbour_dir / "runner.json").read_bytes())["pid"]
    (dispatch.tmp / "release").touch()
    wait_until(lambda: not alive(neighbour_node), "the neighbour's node never ended")

    for _ in range(10):  # several ticks of the supervisor, each reading the root
        for args in (("ls",), ("ls", "--all", "--json"), ("status", "neighbour", "--json"),
                     ("status", "filler")):
            no_traceback(dispatch(*args))
        neighbour = dispatch.status("neighbour")
        assert neighbour["state"] == "running", neighbour  # never failed/unknown
        assert alive(runner_pid)  # the runner waits for room: it does not crash
        time.sleep(0.3)
    # A new job while the root is full: no traceback; its submission waits for room.
    run = dispatch.spawn("run", str(dispatch.spec("newcomer", script("print('late')"))),
                         "--poll", "0.3")

    # A person can still cancel the job that fills the disk (its request is made by name).
    cancel = dispatch("cancel", "filler")
    no_traceback(cancel)
    assert cancel.returncode == 0, cancel.stderr
    filler_dir = object_dir(small_root, "filler")
    filler_node = node_pid(filler_dir)
    wait_until(lambda: not alive(filler_node), "the filler's runner never took the cancel")

    # Room again (what an operator does): everything is said as it happened.
    (filler_dir / "node0.log").unlink()
    dispatch.wait_for("neighbour", lambda s: s["state"] == "succeeded")
    dispatch.wait_for("filler", lambda s: s["state"] == "cancelled")
    out, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert "Traceback" not in err
    assert b"neighbour done" in (neighbour_dir / "node0.log").read_bytes()


def test_a_full_store_is_a_typed_error(dispatch: Dispatch) -> None:
    store_dir = dispatch.tmp / "small-store"
    mount_tmpfs(store_dir)
    try:
        dispatch.env["DISPATCH_STORE"] = str(store_dir / "record.sqlite3")
        done = dispatch("run", str(dispatch.spec("first", script("print('hi')"))),
                        "--poll", "0.2")
        assert done.returncode == 0, done.stderr
        with open(store_dir / "ballast", "wb", buffering=0) as f:  # fill what is left
            try:
                while True:
                    f.write(b"\0" * 65536)
            except OSError:
                pass
        for args in (("ls", "--all"), ("status", "first"), ("history", "first")):
            no_traceback(dispatch(*args))
        done = dispatch("run", str(dispatch.spec("second", script("print('hi')"))),
                        "--poll", "0.2")
        no_traceback(done)
        assert done.returncode == 5, done.stderr
        assert "full" in done.stderr
    finally:
        unmount(store_dir)


def test_max_output_bytes_cuts_the_output_with_a_note(dispatch: Dispatch) -> None:
    body = ("import sys\n"
            "for i in range(50000): print(f'line {i:06d}' + 'y' * 90)\n"
            "print('still alive', file=sys.stderr)\n")
    spec = dispatch.spec("chatty", script(body), max_output_bytes="64K")
    done = dispatch("run", str(spec), "--poll", "0.2", timeout=300)
    assert done.returncode == 0, done.stderr  # the job is not killed for its output
    log = dispatch("logs", "chatty").stdout
    lines = log.splitlines()
    assert lines[-1] == ("== dispatch: output cut at 65536 bytes (max_output_bytes); the rest "
                         "is discarded, the job goes on")
    assert len(log.encode()) - len(lines[-1]) - 2 <= 65536  # the kept part, a line end added
    assert lines[0] == "line 000000" + "y" * 90
    assert "still alive" not in log


@pytest.mark.parametrize(("value", "words"), [
    ("lots", "not a size"), (0, "positive"), (True, "not a size")])
def test_max_output_bytes_is_validated(dispatch: Dispatch, value: object, words: str) -> None:
    spec = dispatch.spec("bad", script("print(1)"), max_output_bytes=value)
    done = dispatch("submit", str(spec), "--dry-run")
    assert done.returncode == 2, done.stderr
    assert "max_output_bytes" in done.stderr and words in done.stderr


def test_max_output_bytes_is_local_only(dispatch: Dispatch) -> None:
    spec = dispatch.spec("slurmy", ["true"], backend="slurm", max_output_bytes="1M")
    done = dispatch("submit", str(spec), "--dry-run")
    assert done.returncode == 2
    assert "max_output_bytes" in done.stderr and "only the local backend" in done.stderr
    plan = dispatch("submit", str(dispatch.spec("ok", ["true"], max_output_bytes="1M")),
                    "--dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "output per node: 1048576 bytes" in plan.stdout
