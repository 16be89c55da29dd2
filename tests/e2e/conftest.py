"""End-to-end: the real `dispatch` CLI, in real processes, on the local backend, with a real
SQLite record. Each test gets its own store and local-backend root."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


class Dispatch:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.env = dict(os.environ)
        self.env.update({
            "DISPATCH_STORE": str(tmp / "record.sqlite3"),
            "DISPATCH_LOCAL_ROOT": str(tmp / "local"),
            "DISPATCH_LOCAL_NODE_LOSS_WINDOW": "2s",
            "XDG_STATE_HOME": str(tmp / "state"),
            "PYTHONPATH": str(REPO / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
        })
        self.procs: list[subprocess.Popen[str]] = []

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "dispatch.cli", *args]

    def __call__(self, *args: str, check: bool = False,
                 timeout: float = 120) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(self.argv(*args), env=self.env, cwd=self.tmp, text=True,
                              capture_output=True, timeout=timeout)
        if check and done.returncode != 0:
            raise AssertionError(f"dispatch {' '.join(args)} exited {done.returncode}:\n"
                                 f"{done.stdout}\n{done.stderr}")
        return done

    def python(self, code: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """``python -c CODE`` with this test's store and local root (the Python API)."""
        return subprocess.run([sys.executable, "-c", code], env=self.env, cwd=self.tmp,
                              text=True, capture_output=True, timeout=timeout)

    def json(self, *args: str) -> Any:
        done = self(*args, "--json")
        try:
            return json.loads(done.stdout)
        except json.JSONDecodeError as err:
            raise AssertionError(
                f"dispatch {' '.join(args)} --json printed no JSON "
                f"(exit {done.returncode}):\n{done.stdout}\n{done.stderr}") from err

    def spawn(self, *args: str) -> subprocess.Popen[str]:
        proc = subprocess.Popen(self.argv(*args), env=self.env, cwd=self.tmp, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.procs.append(proc)
        return proc

    def spec(self, name: str, command: list[str], **fields: Any) -> Path:
        data: dict[str, Any] = {"name": name, "backend": "local", "command": command}
        data.update(fields)
        path = self.tmp / f"{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        return path

    def status(self, job: str) -> dict[str, Any]:
        data: dict[str, Any] = self.json("status", job)
        return data

    def wait_for(self, job: str, pred: Callable[[dict[str, Any]], bool],
                 timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            done = self("status", job, "--json")
            if done.returncode == 3:  # `run` in another process has not created it yet
                time.sleep(0.2)
                continue
            if done.returncode != 0:
                raise AssertionError(f"dispatch status {job} exited {done.returncode}:\n"
                                     f"{done.stdout}\n{done.stderr}")
            last = json.loads(done.stdout)
            if pred(last):
                return last
            time.sleep(0.2)
        raise AssertionError(f"job {job} never reached the expected status; last: "
                             f"{json.dumps(last, indent=1)}")

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
                try:
                    p.wait(10)
                except subprocess.TimeoutExpired:
                    p.kill()
        # leave no local runner behind
        local = self.tmp / "local"
        if local.exists():
            subprocess.run(["pkill", "-f", str(local)], check=False)


@pytest.fixture
def dispatch(tmp_path: Path) -> Iterator[Dispatch]:
    d = Dispatch(tmp_path)
    try:
        yield d
    finally:
        d.close()


def wait_until(pred: Callable[[], object], what: str, timeout: float = 60.0) -> None:
    """Poll ``pred`` until it is true; fail naming ``what`` (a bound for a hung run on a slow
    shared machine, never an assertion about speed)."""
    deadline = time.monotonic() + timeout
    while not pred():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def script(body: str) -> list[str]:
    """A node command: python3 -c BODY (an argv list, never a shell string)."""
    return ["python3", "-c", body]
