"""A real `dispatch serve` (its own process, on a free loopback port) over a real SQLite
record and the local backend, asked with a real HTTP client: over TCP with the per-start
token the server wrote to its state dir (or a team token), or over its Unix socket."""

from __future__ import annotations

import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
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
                 token: str | None = None, nofile: int | None = None,
                 port: int | None = None) -> None:
        self.tmp = tmp
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = cli_env(tmp)
        self.env.update(env or {})
        self.token_file = Path(self.env["XDG_STATE_HOME"]) / "dispatch" / f"serve-{self.port}.token"
        xdg = self.env.get("XDG_RUNTIME_DIR", "")
        run = Path(xdg) if os.path.isabs(xdg) else Path(self.env["XDG_STATE_HOME"])
        self.socket = run / "dispatch" / f"serve-{self.port}.sock"
        self.log = (tmp / f"serve-{self.port}.log").open("w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "dispatch.cli", "serve", "--port", str(self.port),
             "--poll", "0.2", *extra], env=self.env, cwd=tmp, stdout=self.log,
            stderr=subprocess.STDOUT, preexec_fn=None if nofile is None else lambda: (
                resource.setrlimit(resource.RLIMIT_NOFILE,
                                   (nofile, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))))
        self._wait_up()
        self.start_token = self.token_file.read_text().strip()
        self.client = httpx2.Client(base_url=self.url, timeout=60, headers={
            "Authorization": f"Bearer {token or self.start_token}"})
        self.unix = httpx2.Client(base_url="http://localhost", timeout=60,
                                  transport=httpx2.HTTPTransport(uds=str(self.socket)))

    def _wait_up(self) -> None:
        """Until the server answers its login page (it writes its token file before it
        listens)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"dispatch serve exited {self.proc.returncode}:\n"
                                     + self.output())
            try:
                httpx2.get(self.url + "/login", timeout=2).raise_for_status()
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
        self.unix.close()
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
        "XDG_RUNTIME_DIR": runtime_dir(tmp),
    })
    return env


def runtime_dir(tmp: Path) -> str:
    """A short directory for the server's Unix socket (a socket path has at most 107 bytes;
    pytest's tmp paths can be longer), one per test directory."""
    marker = tmp / "runtime-dir"
    if not marker.exists():
        marker.write_text(tempfile.mkdtemp(prefix="dxr-", dir="/tmp"))
    return marker.read_text()


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
