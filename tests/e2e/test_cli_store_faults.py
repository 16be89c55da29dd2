"""Damaged and misplaced record stores through the real CLI (issue 13's faults, seen from the
command line): `dispatch ls`, `status` and `submit` with --json answer exit 5 with one JSON
error document on stdout (`{"error": {"code", "exit_code", "message"}}`) naming the store, no
traceback, and record nothing: the file is left as it was and nothing reaches the scheduler.

The damage is made the way tests/integration/stores/test_faults.py makes it (its helpers)."""

from __future__ import annotations

import json
import random
import shutil
import subprocess
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from tests.e2e.conftest import Dispatch, script
from tests.integration.stores.test_faults import DAMAGE, SCHEMA_FAULTS, _sql, healthy_store

EXIT_STORE = 5


@dataclass
class Tally:
    tried: int = 0
    clear: int = 0
    crashes: int = 0
    wrong: int = 0  # a clean answer, but not the documented one

    def show(self, what: str) -> str:
        return (f"{what}: inputs tried {self.tried}, clear errors {self.clear}, "
                f"crashes {self.crashes}, wrong answers {self.wrong}")


def local_objects(d: Dispatch) -> list[Path]:
    root = d.tmp / "local"
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


def snapshot(store: Path) -> tuple[object, list[tuple[str, bytes]]]:
    """What the store path holds (the file's bytes, else what kind of thing it is) and the
    bytes of any -wal or -journal beside it: a commit could sit in a WAL, not in the file."""
    if store.is_file():
        main: object = store.read_bytes()
    elif store.is_dir():
        main = f"directory {sorted(p.name for p in store.iterdir())}"
    else:
        main = "missing" if not store.parent.exists() else "no file"
    sides = [(s, side.read_bytes()) for s in ("-wal", "-journal")
             if (side := store.with_name(store.name + s)).is_file()]
    return main, sides


def judge(done: subprocess.CompletedProcess[str], expected: int, words: tuple[str, ...],
          tally: Tally, problems: list[str], label: str) -> None:
    """One answer: a crash (a traceback, no JSON or not the error shape), a wrong exit code,
    or a clear error."""
    tally.tried += 1
    crash = "Traceback" in done.stderr or "Traceback" in done.stdout
    try:
        doc = json.loads(done.stdout)
    except json.JSONDecodeError:
        doc = None
    err = doc.get("error") if isinstance(doc, dict) else None
    shaped = (isinstance(err, dict) and set(err) == {"code", "exit_code", "message"}
              and err["exit_code"] == done.returncode and isinstance(err["message"], str))
    if crash or not shaped:
        tally.crashes += 1
        problems.append(f"{label}: crash (exit {done.returncode})\nstdout: {done.stdout}\n"
                        f"stderr: {done.stderr}")
        return
    assert isinstance(err, dict)
    if (done.returncode != expected or err["code"] != "store-unusable"
            or not all(w in err["message"] for w in words)
            or not done.stderr.startswith("error: ")):
        tally.wrong += 1
        problems.append(f"{label}: exit {done.returncode} (want {expected}), {err}\n"
                        f"stderr: {done.stderr}")
        return
    tally.clear += 1


def try_store(d: Dispatch, label: str, store: Path | str, spec: Path, tally: Tally,
              problems: list[str], *words: str) -> None:
    """ls, status and submit against ``store`` (a path, or a URL string); each must be a
    clear exit 5 naming it (a path) and saying ``words``, and leave the store as it was with
    nothing submitted."""
    path = Path(store) if isinstance(store, Path) else None
    before = snapshot(path) if path is not None else None
    d.env["DISPATCH_STORE"] = str(store)
    naming = (str(store), *words) if path is not None else words
    try:
        for argv in (("ls", "--json"), ("ls", "--all", "--json"), ("status", "j1", "--json"),
                     ("submit", str(spec), "--json")):
            judge(d(*argv), EXIT_STORE, naming, tally, problems, f"{label}: {' '.join(argv)}")
    finally:
        d.env["DISPATCH_STORE"] = str(d.tmp / "record.sqlite3")
    if path is not None and snapshot(path) != before:
        problems.append(f"{label}: the store changed ({str(snapshot(path))[:80]!r})")
    if local_objects(d):
        problems.append(f"{label}: something reached the scheduler: {local_objects(d)}")


def run_sql(stmts: list[str]) -> Callable[[Path], None]:
    return lambda p: _sql(p, *stmts)


def _random_bytes(p: Path) -> None:
    p.write_bytes(random.Random(20261201).randbytes(16 * 1024))


def test_damaged_and_misplaced_stores_are_clear_errors(dispatch: Dispatch) -> None:
    tmp = dispatch.tmp
    pristine = tmp / "pristine.sqlite3"
    healthy_store(pristine, jobs=40, size=300)  # j0 .. j39, local jobs never submitted
    spec = dispatch.spec("victim", script("print('should never run')"))

    # label: (how the file is damaged, what the error must say)
    damaged: dict[str, tuple[Callable[[Path], None], str]] = {
        "random bytes": (_random_bytes, "not a database")}
    damaged |= {f"file {name}": (spoil, words) for name, (spoil, words) in DAMAGE.items()}
    damaged |= {f"schema: {name}": (run_sql(stmts), words)
                for name, (stmts, words) in SCHEMA_FAULTS.items()}

    tally, problems = Tally(), list[str]()
    for i, (label, (spoil, words)) in enumerate(damaged.items()):
        path = tmp / f"damaged-{i}.sqlite3"
        shutil.copy(pristine, path)
        spoil(path)
        try_store(dispatch, label, path, spec, tally, problems, words)

    (tmp / "a-directory.sqlite3").mkdir()
    try_store(dispatch, "a directory as the store", tmp / "a-directory.sqlite3", spec, tally,
              problems, "is a directory")
    try_store(dispatch, "a missing directory", tmp / "no-such-dir" / "r.sqlite3", spec, tally,
              problems, f"directory {tmp / 'no-such-dir'} does not exist")
    assert not (tmp / "no-such-dir").exists()  # a path someone typed is never made
    (tmp / "a-file").write_text("plain\n")
    try_store(dispatch, "under a regular file", tmp / "a-file" / "r.sqlite3", spec, tally,
              problems, f"{tmp / 'a-file'} is not a directory")
    try_store(dispatch, "an unknown scheme", "mysql://db.example/dispatch", spec, tally,
              problems, "unknown scheme 'mysql'")
    try_store(dispatch, "a relative sqlite URL", "sqlite:relative.sqlite3", spec, tally,
              problems, "malformed URL")
    print(tally.show("damaged or misplaced stores"))

    assert tally.crashes == 0, "\n\n".join(problems)
    assert not problems, "\n\n".join(problems)
    assert tally.clear == tally.tried == 4 * (len(damaged) + 5)


def _chattr(flag: str, path: Path) -> None:
    subprocess.run(["chattr", flag, str(path)], check=True, capture_output=True)


def chattr_works(tmp: Path) -> str | None:
    """Why ``chattr +i`` cannot be used here, or None when it can (it needs root, the
    binary, and a filesystem that keeps the immutable flag)."""
    if shutil.which("chattr") is None:
        return "no chattr binary"
    probe = tmp / "chattr-probe"
    probe.touch()
    try:
        _chattr("+i", probe)
    except subprocess.CalledProcessError as err:
        return f"chattr +i failed here: {err.stderr.strip()}"
    _chattr("-i", probe)
    probe.unlink()
    return None


def test_an_immutable_store_reads_but_refuses_writes_and_records_nothing(
        dispatch: Dispatch) -> None:
    """Read-only (root ignores chmod 0444, so the file is made immutable): reading works, as
    test_faults documents for the store (exit 0, the record as it is); submit is exit 5 and
    records nothing. An immutable directory refuses everything (no -wal/-shm can be made)."""
    why = chattr_works(dispatch.tmp)
    if why is not None:
        pytest.skip(f"the read-only store case needs chattr +i: {why}")
    spec = dispatch.spec("victim", script("print('should never run')"))
    tally, problems = Tally(), list[str]()

    frozen = dispatch.tmp / "frozen.sqlite3"
    healthy_store(frozen)  # j0 j1 j2
    before = frozen.read_bytes()
    _chattr("+i", frozen)
    try:
        dispatch.env["DISPATCH_STORE"] = str(frozen)
        listed = dispatch("ls", "--all", "--json")
        assert listed.returncode == 0, listed.stderr
        assert sorted(j["job"] for j in json.loads(listed.stdout)) == ["j0", "j1", "j2"]
        st = dispatch("status", "j1", "--json")
        assert st.returncode == 0, st.stderr
        assert json.loads(st.stdout)["job"] == "j1"
        for argv in (("submit", str(spec), "--json"), ("cancel", "j1", "--json")):
            judge(dispatch(*argv), EXIT_STORE, (str(frozen), "readonly database", "read-only"),
                  tally, problems, f"immutable file: {' '.join(argv)}")
    finally:
        _chattr("-i", frozen)
        dispatch.env["DISPATCH_STORE"] = str(dispatch.tmp / "record.sqlite3")
    assert frozen.read_bytes() == before
    assert all(data == b"" for _, data in snapshot(frozen)[1])  # no WAL holding a write
    dispatch.env["DISPATCH_STORE"] = str(frozen)  # writable again: the record is as it was
    listed = dispatch("ls", "--all", "--json")
    dispatch.env["DISPATCH_STORE"] = str(dispatch.tmp / "record.sqlite3")
    assert listed.returncode == 0, listed.stderr
    assert [(j["job"], j["state"]) for j in json.loads(listed.stdout)] == [
        ("j0", "pending"), ("j1", "pending"), ("j2", "pending")]
    assert not local_objects(dispatch)

    frozen_dir = dispatch.tmp / "frozen-dir"
    frozen_dir.mkdir()
    healthy_store(frozen_dir / "r.sqlite3")  # closed: no -wal/-shm beside it any more
    _chattr("+i", frozen_dir)
    try:
        try_store(dispatch, "immutable directory", frozen_dir / "r.sqlite3", spec, tally,
                  problems, f"directory {frozen_dir} is not writable")
        try_store(dispatch, "new store in an immutable directory", frozen_dir / "new.sqlite3",
                  spec, tally, problems, "cannot create record store")
    finally:
        _chattr("-i", frozen_dir)
    assert not (frozen_dir / "new.sqlite3").exists()
    print(tally.show("immutable stores"))

    assert tally.crashes == 0, "\n\n".join(problems)
    assert not problems, "\n\n".join(problems)
    assert tally.clear == tally.tried == 2 + 2 * 4
    assert Counter(p.name for p in frozen_dir.iterdir()) == Counter(["r.sqlite3"])
