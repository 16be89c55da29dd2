"""A real `dispatch serve` (its own process, on a free loopback port) over a real SQLite
record and the local backend, asked with a real HTTP client."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest

REPO = Path(__file__).resolve().parents[3]
WAIT_S = 90.0  # an upper bound for a slow shared machine, never a timing assertion


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Served:
    """One `dispatch serve` process and a client for it."""

    def __init__(self, tmp: Path, *extra: str, env: dict[str, str] | None = None,
                 token: str | None = None) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = cli_env(tmp)
        self.env.update(env or {})
        self.log = (tmp / f"serve-{self.port}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dispatch.cli", "serve", "--port", str(self.port),
             "--poll", "0.2", *extra], env=self.env, cwd=tmp, stdout=self.log,
            stderr=subprocess.STDOUT)
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.client = httpx2.Client(base_url=self.url, headers=headers, timeout=60)
        self._wait_up()

    def _wait_up(self) -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"dispatch serve exited {self.proc.returncode}:\n"
                                     + self.output())
            try:
                httpx2.get(self.url + "/", timeout=2)
                return
            except httpx2.TransportError:
                time.sleep(0.2)
        raise AssertionError("dispatch serve never answered:\n" + self.output())

    def output(self) -> str:
        self.log.flush()
        return (self.tmp / f"serve-{self.port}.log").read_text()

    def post(self, path: str, body: Any = None, **kw: Any) -> httpx2.Response:
        return self.client.post(path, json={} if body is None else body, **kw)

    def submit(self, spec: dict[str, Any]) -> str:
        r = self.post("/api/jobs", spec)
        assert r.status_code == 201, r.text
        return str(r.json()["job"])

    def status(self, job: str) -> dict[str, Any]:
        r = self.client.get(f"/api/jobs/{job}")
        assert r.status_code == 200, r.text
        data: dict[str, Any] = r.json()
        return data

    def wait_for(self, job: str, pred: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        deadline = time.monotonic() + WAIT_S
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = self.status(job)
            if pred(last):
                return last
            time.sleep(0.2)
        raise AssertionError(f"job {job} never got there; last: {json.dumps(last)[:2000]}")

    def close(self) -> None:
        self.client.close()
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def cli_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update({
        "DISPATCH_STORE": str(tmp / "record.sqlite3"),
        "DISPATCH_LOCAL_ROOT": str(tmp / "local"),
        "DISPATCH_LOCAL_NODE_LOSS_WINDOW": "2s",
        "XDG_STATE_HOME": str(tmp / "state"),
    })
    return env


def cli(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "dispatch.cli", *args], env=cli_env(tmp),
                          cwd=tmp, text=True, capture_output=True, timeout=120)


def spec(name: str, body: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "backend": "local", "command": [sys.executable, "-c", body], **fields}


@pytest.fixture
def serve(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    started: list[Served] = []

    def start(*extra: str, **kw: Any) -> Served:
        s = Served(tmp_path, *extra, **kw)
        started.append(s)
        return s
    try:
        yield start
    finally:
        for s in started:
            s.close()
        subprocess.run(["pkill", "-f", str(tmp_path / "local")], check=False)
