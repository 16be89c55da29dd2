"""A throwaway PostgreSQL cluster for tests and benchmarks: Debian's binaries, initdb into a
temp dir, pg_ctl on a free loopback port, stopped and removed afterwards. No docker, no
pre-existing server.

Fixtures (register with ``pytest_plugins = ["tests.conftest_pg"]`` in tests/conftest.py, or
``from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401`` in a
conftest.py):

- ``postgres_cluster`` (session): the running ThrowawayPostgres.
- ``postgres_url`` (function): a URL to a fresh, empty database of that cluster.

When the binaries are missing they are installed with apt (as root). If they can be neither
found nor installed the tests FAIL with the reason, unless DISPATCH_SKIP_POSTGRES=1.
Also usable from a shell: scripts/pg-throwaway.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

SKIP_ENV = "DISPATCH_SKIP_POSTGRES"


class PostgresUnavailable(RuntimeError):
    pass


def find_bindir() -> Path | None:
    """The newest /usr/lib/postgresql/<major>/bin holding initdb and pg_ctl."""
    found = []
    for d in glob.glob("/usr/lib/postgresql/*/bin"):
        major = Path(d).parent.name
        if (Path(d) / "initdb").exists() and (Path(d) / "pg_ctl").exists() and major.isdigit():
            found.append((int(major), Path(d)))
    return max(found)[1] if found else None


def install_postgres() -> Path:
    """apt-get install postgresql (Debian). The package's own service start may be refused
    in a container; that is fine, we only want the binaries."""
    if os.geteuid() != 0:
        raise PostgresUnavailable(
            "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin and not root, so "
            "cannot install them: run `apt-get install postgresql` as root"
        )
    if shutil.which("apt-get") is None:
        raise PostgresUnavailable(
            "PostgreSQL binaries not found under /usr/lib/postgresql/*/bin and apt-get is "
            "missing; install Debian's postgresql package"
        )
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    log = []
    for argv in (["apt-get", "update"], ["apt-get", "install", "-y", "postgresql"]):
        r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
        log.append(f"$ {' '.join(argv)} -> {r.returncode}\n{r.stdout[-2000:]}{r.stderr[-2000:]}")
    bindir = find_bindir()
    if bindir is None:
        raise PostgresUnavailable(
            "could not install PostgreSQL with apt-get:\n" + "\n".join(log)
        )
    return bindir


def ensure_bindir() -> Path:
    return find_bindir() or install_postgres()


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayPostgres:
    """One cluster in a temp dir. ``fast=True`` turns fsync off: for tests, where nothing
    crashes the server; benchmarks use ``fast=False`` so commits cost what they really do."""

    def __init__(self, *, fast: bool = True) -> None:
        self.fast = fast
        self.bindir = ensure_bindir()
        self.as_root = os.geteuid() == 0
        self.tmp = Path(tempfile.mkdtemp(prefix="dispatch-pg-"))
        self.data = self.tmp / "data"
        self.log = self.tmp / "server.log"
        self.port = 0
        self.started = False

    def _argv(self, tool: str, *args: str) -> list[str]:
        argv = [str(self.bindir / tool), *args]
        # initdb and the server refuse to run as root: run them as the postgres user.
        return ["runuser", "-u", "postgres", "--", *argv] if self.as_root else argv

    def _run(self, tool: str, *args: str, timeout: float = 120) -> None:
        r = subprocess.run(self._argv(tool, *args), capture_output=True, text=True,
                           timeout=timeout, cwd=self.tmp)
        if r.returncode != 0:
            tail = self.log.read_text()[-3000:] if self.log.exists() else ""
            raise PostgresUnavailable(
                f"{tool} {' '.join(args)} failed ({r.returncode}):\n{r.stdout}{r.stderr}{tail}"
            )

    def start(self) -> ThrowawayPostgres:
        if self.as_root:
            shutil.chown(self.tmp, "postgres", "postgres")
        self.tmp.chmod(0o700)
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust",
                  "-E", "UTF8", "--locale=C.UTF-8", "--no-sync")
        last: Exception | None = None
        for _ in range(5):  # a free port can be taken between asking and binding
            self.port = free_port()
            settings = [
                f"port = {self.port}",
                "listen_addresses = '127.0.0.1'",
                f"unix_socket_directories = '{self.tmp}'",
                "max_connections = 200",
                "shared_buffers = 128MB",
            ]
            if self.fast:
                settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
            (self.data / "postgresql.auto.conf").write_text("\n".join(settings) + "\n")
            try:
                self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w",
                          "-t", "60", "start")
                self.started = True
                return self
            except PostgresUnavailable as err:
                last = err
        raise PostgresUnavailable(f"could not start PostgreSQL: {last}")

    def url(self, dbname: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{dbname}"

    def new_database(self) -> str:
        """A fresh empty database; returns its URL."""
        import psycopg

        name = "t_" + uuid.uuid4().hex[:16]
        with psycopg.connect(self.url(), autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')  # name is ours: hex only
        return self.url(name)

    def pg_ctl(self, action: str) -> None:
        """``stop`` (fast: sessions are disconnected), ``start`` or ``restart`` the server
        on the same port and data directory (the fault tests' server outages)."""
        args = ["-D", str(self.data), "-l", str(self.log), "-w", "-t", "60"]
        if action in ("stop", "restart"):
            args += ["-m", "fast"]
        self._run("pg_ctl", *args, action)

    def stop(self) -> None:
        try:
            if self.started:
                subprocess.run(
                    self._argv("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop"),
                    capture_output=True, timeout=60, cwd=self.tmp,
                )
                self.started = False
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> ThrowawayPostgres:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_for_tests(env: Mapping[str, str] = os.environ) -> ThrowawayPostgres:
    """Start a cluster, or fail the test with the reason; skip only when asked to."""
    if env.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: PostgreSQL tests skipped on request")
    try:
        return ThrowawayPostgres().start()
    except (PostgresUnavailable, OSError, subprocess.SubprocessError) as err:
        pytest.fail(f"PostgreSQL is needed for these tests and could not be started: {err}\n"
                    f"(set {SKIP_ENV}=1 to skip them deliberately)", pytrace=False)


@pytest.fixture(scope="session")
def postgres_cluster() -> Iterator[ThrowawayPostgres]:
    cluster = start_for_tests()
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def postgres_url(postgres_cluster: ThrowawayPostgres) -> str:
    """A URL to a fresh, empty database in the session's throwaway cluster."""
    return postgres_cluster.new_database()
