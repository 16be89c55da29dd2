"""Stores under faults (issue 13), SQLite half: real files damaged on disk, made immutable,
mounted read-only, on a full filesystem, or in the wrong place. Each fault is a
StoreUnusable-family error whose message names the store (never a raw sqlite3 error or a
traceback), and the record afterwards is what was committed: a write that reported failure
left nothing. PostgreSQL faults: test_faults_postgres.py.

Needs root (chattr, mount); tests run as root here."""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
import subprocess
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from dispatch.core.events import EscalationRaised, JobCreated
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.errors import StoreUnusable
from dispatch.stores.base import SCHEMA_VERSION, SchemaTooNew
from dispatch.stores.select import open_store

T0 = datetime(2026, 1, 1, tzinfo=UTC)
TRIALS = 100
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="chattr/mount need root")


def created(job_id: str, size: int = 0) -> JobCreated:
    return JobCreated(seq=1, at=T0, job_id=job_id,
                      spec=JobSpec(name=job_id, command=("python", "x" * size), backend="local"),
                      declarations=Declarations(backend="local"))


def refused(fn: Callable[[], Any], *words: str) -> StoreUnusable:
    """``fn`` fails with a StoreUnusable error holding ``words`` (and nothing else escapes)."""
    with pytest.raises(StoreUnusable) as info:
        fn()
    err = info.value
    assert not isinstance(err, sqlite3.Error)
    assert err.exit_code == 5
    text = str(err)
    for w in words:
        assert w in text, f"{w!r} not in {text!r}"
    assert "Traceback" not in text
    return err


def healthy_store(path: Path, jobs: int = 3, size: int = 0) -> str:
    url = f"sqlite://{path}"
    with open_store(url) as s:
        for i in range(jobs):
            s.create(created(f"j{i}", size))
            s.append(f"j{i}", [EscalationRaised(seq=2, at=T0, message=f"m{i}")], 1)
    return url


def assert_intact(url: str, jobs: int = 3) -> None:
    with open_store(url) as s:
        ids = [f"j{i}" for i in range(jobs)]
        assert [r.job_id for r in s.list_jobs()] == ids
        assert all(len(rec) == 2 for rec in s.read_many(ids).values())


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


# -- a damaged file -----------------------------------------------------------------------


def _not_a_database(p: Path) -> None:
    p.write_bytes(b"this is a text file, not a database\n" * 200)


def _truncated(p: Path) -> None:
    with open(p, "r+b") as f:
        f.truncate(p.stat().st_size // 2)


def _header_zeroed(p: Path) -> None:
    with open(p, "r+b") as f:
        f.write(b"\0" * 100)


def _page_overwritten(p: Path) -> None:
    with open(p, "r+b") as f:
        f.seek(4096 * 3)
        f.write(b"\xff" * 4096)


DAMAGE = {"not a database": (_not_a_database, "not a database"),
          "truncated to half": (_truncated, "malformed"),
          "header zeroed": (_header_zeroed, ""),
          "a page overwritten": (_page_overwritten, "malformed")}


def _every_operation(url: str) -> list[Callable[[], Any]]:
    def use(fn: Callable[[Any], Any]) -> Callable[[], Any]:
        def go() -> Any:
            with open_store(url) as s:
                return fn(s)
        return go
    ids = [f"j{i}" for i in range(40)]
    return [use(lambda s: s.list_jobs()), use(lambda s: s.read_many(ids)),
            use(lambda s: s.read("j7")), use(lambda s: s.create(created("new"))),
            use(lambda s: s.append("j7", [EscalationRaised(seq=3, at=T0, message="x")], 2))]


@pytest.mark.parametrize("damage", list(DAMAGE))
def test_a_damaged_database_file_is_refused_naming_it(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "r.sqlite3"
    url = healthy_store(path, jobs=40, size=300)
    spoil, words = DAMAGE[damage]
    spoil(path)
    outcomes = Counter[str]()
    for op in _every_operation(url):
        try:
            op()
            outcomes["ok"] += 1
        except StoreUnusable as err:
            assert str(path) in str(err) and words in str(err), str(err)
            outcomes["refused"] += 1
    assert outcomes["refused"] >= 1, outcomes  # every operation either works or is refused


def test_random_damage_never_escapes_as_a_raw_error(tmp_path: Path) -> None:
    """Bytes overwritten at random places of a real store file, TRIALS times: every operation
    works or is a StoreUnusable naming the file; nothing else escapes."""
    pristine = tmp_path / "pristine.sqlite3"
    healthy_store(pristine, jobs=40, size=300)
    size = pristine.stat().st_size
    rng = random.Random(20261201)
    outcomes = Counter[str]()
    for trial in range(TRIALS):
        path = tmp_path / f"t{trial}.sqlite3"
        shutil.copy(pristine, path)
        with open(path, "r+b") as f:
            f.seek(rng.randrange(0, size))
            f.write(rng.randbytes(rng.randint(1, 512)))
        for op in _every_operation(f"sqlite://{path}"):
            try:
                op()
                outcomes["ok"] += 1
            except StoreUnusable as err:
                assert str(path) in str(err), str(err)
                outcomes["refused"] += 1
        path.unlink()
    print(f"random damage: {TRIALS} files, {dict(outcomes)}")
    assert sum(outcomes.values()) == TRIALS * 5 and outcomes["refused"] > 0, outcomes


def test_an_empty_file_becomes_a_new_store(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    path.touch()
    with open_store(str(path)) as s:
        s.create(created("a"))
    with open_store(str(path)) as s:
        assert len(s.read("a")) == 1


# -- the schema inside the file ------------------------------------------------------------


def _sql(path: Path, *stmts: str) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for stmt in stmts:
            conn.execute(stmt)
    finally:
        conn.close()


SCHEMA_FAULTS = {
    "events table missing": (["DROP TABLE events"], "table events is missing"),
    "jobs table missing": (["PRAGMA foreign_keys = OFF", "DROP TABLE jobs"],
                           "table jobs is missing"),
    "schema table missing": (["DROP TABLE schema"], "no schema table but there are tables"),
    "schema version text": (["UPDATE schema SET version = 'two'"],
                            "schema version 'two' is not an integer"),
    "schema version negative": (["UPDATE schema SET version = -1"],
                                "schema version -1 is not a version"),
    "schema version zero": (["UPDATE schema SET version = 0"], "schema version 0 is not"),
    "schema version fractional": (["UPDATE schema SET version = 1.5"],
                                  "schema version 1.5 is not an integer"),
    "schema table empty": (["DELETE FROM schema"], "schema table holds no version"),
}


@pytest.mark.parametrize("fault", list(SCHEMA_FAULTS))
def test_a_broken_schema_is_refused_and_left_as_it_is(tmp_path: Path, fault: str) -> None:
    path = tmp_path / "r.sqlite3"
    url = healthy_store(path)
    stmts, words = SCHEMA_FAULTS[fault]
    _sql(path, *stmts)
    before = path.read_bytes()
    err = refused(lambda: open_store(url), str(path), words, "not a usable dispatch record store")
    assert not isinstance(err, SchemaTooNew)
    assert path.read_bytes() == before  # the refusal changed nothing


def test_another_program_s_database_is_refused_not_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "theirs.sqlite3"
    _sql(path, "CREATE TABLE users (id INTEGER PRIMARY KEY)")
    refused(lambda: open_store(str(path)), str(path), "no schema table but there are tables "
            "(users)")
    conn = sqlite3.connect(path)
    assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["users"]
    conn.close()


# -- read-only and immutable ----------------------------------------------------------------


@needs_root
def test_an_immutable_file_reads_but_refuses_writes(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    url = healthy_store(path)
    run("chattr", "+i", str(path))
    try:
        with open_store(url) as s:
            assert len(s.read("j1")) == 2  # reading a frozen record is fine
            refused(lambda: s.create(created("new")), str(path), "readonly database",
                    "read-only")
            refused(lambda: s.append("j1", [EscalationRaised(seq=3, at=T0, message="x")], 2),
                    str(path), "append to job j1")
    finally:
        run("chattr", "-i", str(path))
    assert_intact(url)
    with open_store(url) as s:
        s.create(created("new"))  # after recovery the next call works


@needs_root
def test_an_immutable_directory_is_refused_naming_it(tmp_path: Path) -> None:
    d = tmp_path / "state"
    d.mkdir()
    url = healthy_store(d / "r.sqlite3")  # closed: no -wal/-shm beside it any more
    run("chattr", "+i", str(d))
    try:
        refused(lambda: open_store(url), str(d / "r.sqlite3"), f"directory {d} is not writable")
        refused(lambda: open_store(str(d / "new.sqlite3")), "cannot create record store",
                str(d / "new.sqlite3"))
    finally:
        run("chattr", "-i", str(d))
    assert_intact(url)


@pytest.fixture
def read_only_view(tmp_path: Path) -> Iterator[tuple[Path, Path]]:
    """(a writable directory, the same directory bind-mounted read-only)."""
    rw, ro = tmp_path / "rw", tmp_path / "ro"
    rw.mkdir()
    ro.mkdir()
    run("mount", "--bind", str(rw), str(ro))
    try:
        run("mount", "-o", "remount,ro,bind", str(ro))
        yield rw, ro
    finally:
        run("umount", str(ro))


@needs_root
def test_a_read_only_mount_is_refused_naming_it(read_only_view: tuple[Path, Path]) -> None:
    rw, ro = read_only_view
    url = healthy_store(rw / "r.sqlite3")
    refused(lambda: open_store(str(ro / "r.sqlite3")), str(ro / "r.sqlite3"),
            f"directory {ro} is not writable")
    refused(lambda: open_store(str(ro / "new.sqlite3")), str(ro / "new.sqlite3"),
            "Read-only file system")
    assert not (rw / "new.sqlite3").exists()
    assert_intact(url)


# -- a full disk ----------------------------------------------------------------------------


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs mounted for the test."""
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    run("mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mnt))
    try:
        yield mnt
    finally:
        run("umount", str(mnt))


def _fill(disk: Path, leave: int) -> Path:
    """A filler file taking all but about ``leave`` bytes of ``disk``."""
    filler = disk / "filler"
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave))
    return filler


@needs_root
def test_a_full_disk_refuses_writes_and_records_nothing_it_refused(tiny_disk: Path) -> None:
    path = tiny_disk / "r.sqlite3"
    url = f"sqlite://{path}"
    reported: dict[str, bool] = {}
    filler = _fill(tiny_disk, leave=600_000)
    with open_store(url) as s:
        for i in range(40):  # 40 jobs of ~30 kB each cannot fit in what is left
            job = f"big{i}"
            try:
                s.create(created(job, size=30_000))
                reported[job] = True
            except StoreUnusable as err:
                assert str(path) in str(err) and "disk is full" in str(err), str(err)
                reported[job] = False
        assert not all(reported.values()) and any(reported.values()), reported
        kept = [j for j, ok in reported.items() if ok]
        last = kept[-1]
        refused(lambda: s.append(last, [EscalationRaised(seq=2, at=T0, message="x" * 200_000)],
                                 1), str(path), "disk is full", f"append to job {last}")
        filler.unlink()  # space again: the same store object goes on
        s.create(created("after"))
        assert s.append(last, [EscalationRaised(seq=2, at=T0, message="y")], 1) == 2
    with open_store(url) as s:  # reopened: exactly what was reported as written is there
        have = {r.job_id for r in s.list_jobs()}
        assert have == {j for j, ok in reported.items() if ok} | {"after"}
        assert [e.seq for e in s.read(last)] == [1, 2]
        assert all(len(r) == 1 for j, r in s.read_many(sorted(have - {last})).items())


@needs_root
def test_a_full_disk_at_creation_leaves_no_half_store(tiny_disk: Path) -> None:
    path = tiny_disk / "r.sqlite3"
    filler = _fill(tiny_disk, leave=0)
    refused(lambda: open_store(str(path)), str(path))
    filler.unlink()
    with open_store(str(path)) as s:  # the next open makes the store whole
        s.create(created("a"))
        assert len(s.read("a")) == 1


# -- the wrong place ------------------------------------------------------------------------


def test_a_missing_directory_is_refused_not_created(tmp_path: Path) -> None:
    typo = tmp_path / "stat" / "record.sqlite3"
    for url in (str(typo), f"sqlite://{typo}"):
        refused(partial(open_store, url, env={}), str(typo),
                f"directory {typo.parent} does not exist")
        refused(partial(open_store, None, env={"DISPATCH_STORE": url}), str(typo))
    assert not typo.parent.exists()
    # The default location is the one whose directory is made (0700).
    with open_store(None, env={"XDG_STATE_HOME": str(tmp_path / "xdg")}) as s:
        s.create(created("a"))
    assert (tmp_path / "xdg" / "dispatch" / "record.sqlite3").is_file()
    assert (tmp_path / "xdg" / "dispatch").stat().st_mode & 0o777 == 0o700


def test_a_path_that_is_not_a_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "dir.sqlite3").mkdir()
    refused(lambda: open_store(str(tmp_path / "dir.sqlite3")), "is a directory")
    os.mkfifo(tmp_path / "fifo.sqlite3")
    refused(lambda: open_store(str(tmp_path / "fifo.sqlite3")), "not a regular file")
    refused(lambda: open_store("/dev/null"), "sqlite:///dev/null is not a regular file")
    (tmp_path / "file").touch()
    refused(lambda: open_store(str(tmp_path / "file" / "r.sqlite3")),
            f"{tmp_path / 'file'} is not a directory")


def test_a_table_dropped_under_an_open_store_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "r.sqlite3"
    url = healthy_store(path)
    with open_store(url) as s:
        _sql(path, "DROP TABLE events")
        refused(lambda: s.read("j1"), str(path), "read job j1", "no such table: events")
        refused(lambda: s.append("j1", [EscalationRaised(seq=3, at=T0, message="x")], 2),
                str(path), "append to job j1")
        assert s.version("j1") == 2  # what is left is still readable


@needs_root
def test_an_immutable_version_1_file_is_refused_not_half_migrated(tmp_path: Path) -> None:
    from tests.integration.stores.helpers import Backdoor, build_v1_store

    path = tmp_path / "r.sqlite3"
    build_v1_store(f"sqlite://{path}", {"a": [created("a")]})
    run("chattr", "+i", str(path))
    try:
        refused(lambda: open_store(str(path)), str(path), "readonly database", "read-only")
    finally:
        run("chattr", "-i", str(path))
    assert Backdoor(f"sqlite://{path}").schema_version() == 1
    with open_store(str(path)) as s:  # writable again: migrated on open
        assert len(s.read("a")) == 1
    assert Backdoor(f"sqlite://{path}").schema_version() == SCHEMA_VERSION
