"""A record that is not the job's own (issue 21, item 12): seq 1 holds another job's 'created'
event, or the record holds a second 'created'. Every reader refuses it with exit 5 naming
the job (never "no such job", never the other job's story) and `ls` lists it as unusable.
Real CLI processes, a real SQLite record damaged with SQL, and the Python API (the HTTP
routes read through the same store reads: tests/unit/core/test_record_trust.py).

And a record with two of its events swapped in place under its snapshot (issue 32 item 7),
on SQLite and PostgreSQL: `ls`, `status` and the Python API refuse it as `history` does,
and the other jobs still read."""

from __future__ import annotations

import json
import sqlite3
import subprocess

import pytest
from tests.conftest_pg import postgres_cluster, postgres_url  # noqa: F401  (fixtures)
from tests.e2e.conftest import Dispatch
from tests.integration.stores.helpers import Backdoor

MAKE_TWO = """
import sys
from dispatch.service import Service
from dispatch.service.specfile import load_spec
from pathlib import Path
with Service.open() as s:
    a = s.create(load_spec(Path(sys.argv[1])), sys.argv[1])
    b = s.create(load_spec(Path(sys.argv[2])), sys.argv[2])
print(a, b)
"""


def two_jobs(dispatch: Dispatch) -> tuple[str, str]:
    """Two recorded jobs (no submission: nothing runs)."""
    sa = dispatch.spec("alpha", ["true"])
    sb = dispatch.spec("bravo", ["true"])
    done = subprocess.run([*dispatch.argv()[:1], "-c", MAKE_TWO, str(sa), str(sb)],
                          env=dispatch.env, cwd=dispatch.tmp, text=True, capture_output=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    a, b = done.stdout.split()
    return a, b


def sql(dispatch: Dispatch, *stmts: str) -> None:
    db = sqlite3.connect(dispatch.env["DISPATCH_STORE"])
    try:
        for s in stmts:
            db.execute(s)
        db.commit()
    finally:
        db.close()


def swap_first(dispatch: Dispatch, a: str, b: str) -> None:
    """Job a's seq 1 becomes job b's 'created' event."""
    sql(dispatch, f"UPDATE events SET body = (SELECT body FROM events WHERE job_id = '{b}' "
                  f"AND seq = 1) WHERE job_id = '{a}' AND seq = 1")


def second_created(dispatch: Dispatch, a: str) -> None:
    """Job a gets its own 'created' event again, as seq 2."""
    db = sqlite3.connect(dispatch.env["DISPATCH_STORE"])
    try:
        (body,) = db.execute(f"SELECT body FROM events WHERE job_id = '{a}' AND seq = 1"
                             ).fetchone()
        doc = json.loads(body)
        doc["seq"] = 2
        db.execute("INSERT INTO events (job_id, seq, body) VALUES (?, 2, ?)",
                   (a, json.dumps(doc).encode()))
        db.execute("UPDATE jobs SET version = 2 WHERE job_id = ?", (a,))
        db.commit()
    finally:
        db.close()


def assert_refused(dispatch: Dispatch, a: str, b: str, *argv: str) -> None:
    done = dispatch(*argv)
    assert done.returncode == 5, (argv, done.returncode, done.stdout, done.stderr)
    assert f"job {a}" in done.stderr, (argv, done.stderr)
    assert "Traceback" not in done.stderr
    assert "bravo" not in done.stdout, (argv, done.stdout)  # never the other job's story


@pytest.mark.parametrize("damage", ["swapped", "second-created"])
def test_every_reader_refuses_a_record_that_is_not_the_job_s_own(dispatch: Dispatch,
                                                                 damage: str) -> None:
    a, b = two_jobs(dispatch)
    if damage == "swapped":
        swap_first(dispatch, a, b)
    else:
        second_created(dispatch, a)
    for argv in (["status", a], ["history", a], ["history", a, "--json"], ["logs", a],
                 ["cancel", a], ["resubmit", a], ["give-up", a]):
        assert_refused(dispatch, a, b, *argv)
    # status --json: the error document for the job, exit 5
    done = dispatch("status", a, "--json")
    assert done.returncode == 5
    assert json.loads(done.stdout)["error"]["code"] == "store-unusable"
    # ls lists it as unusable next to the healthy job, which is still shown
    rows = {r["job"]: r for r in dispatch.json("ls", "--all")}
    assert set(rows) == {a, b}
    assert rows[a]["error"]["exit_code"] == 5 and f"job {a}" in rows[a]["error"]["message"]
    assert rows[b]["state"] == "pending"
    plain = dispatch("ls", "--all")
    row = next(line for line in plain.stdout.splitlines() if line.startswith(a))
    assert " error " in row, plain.stdout  # the row every unusable record gets
    # the Python API refuses it too, with the typed error
    api = dispatch.python(
        "import dispatch\nfrom dispatch.errors import StoreUnusable\n"
        f"j = dispatch.get({a!r})\n"
        "for call in (j.status, j.history):\n"
        "    try:\n        call()\n    except StoreUnusable as e:\n        print('refused', e)\n"
        "    else:\n        print('READ')\n")
    assert api.returncode == 0, api.stderr
    assert api.stdout.count("refused") == 2 and "READ" not in api.stdout, api.stdout


# ---- two events of one record swapped in place, under its snapshot (issue 32 item 7) ----

@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def on_store(request: pytest.FixtureRequest, dispatch: Dispatch) -> Dispatch:
    """``dispatch`` on a SQLite file, or on a throwaway PostgreSQL database."""
    if request.param == "postgres":
        dispatch.env["DISPATCH_STORE"] = str(request.getfixturevalue("postgres_url"))
    return dispatch


def backdoor(dispatch: Dispatch) -> Backdoor:
    url = dispatch.env["DISPATCH_STORE"]
    return Backdoor(url if "://" in url else f"sqlite://{url}")


def ran(dispatch: Dispatch, name: str) -> str:
    """A job run to its end (succeeded) by `dispatch run`; its id."""
    done = dispatch("run", str(dispatch.spec(name, ["true"])), "--json", "--poll", "0.2",
                    timeout=180)
    assert done.returncode == 0, (done.stdout, done.stderr)
    doc = json.loads(done.stdout)
    assert doc["state"] == "succeeded"
    return str(doc["job"])


# Its record: created, intended, bound, execution started, ended, outcome (seq 1..6), and
# the snapshot the readers wrote at the outcome (seq 6).
SWAPS = {"under-the-snapshot": (2, 3), "under-and-its-last": (4, 6), "first-and-next": (1, 2)}


@pytest.mark.parametrize("where", list(SWAPS))
def test_ls_and_status_refuse_two_events_swapped_in_place(on_store: Dispatch,
                                                          where: str) -> None:
    d = on_store
    a, b = ran(d, "alpha"), ran(d, "bravo")
    assert d.status(a)["state"] == "succeeded"  # read through its snapshot ...
    bd = backdoor(d)
    snaps = bd.query("SELECT version FROM snapshots WHERE job_id = ?",
                     "SELECT version FROM dispatch_snapshots WHERE job_id = %s", (a,))
    version = bd.query("SELECT version FROM jobs WHERE job_id = ?",
                       "SELECT version FROM dispatch_jobs WHERE job_id = %s", (a,))
    assert snaps == version == [(6,)], (snaps, version)  # ... which covers the whole record
    i, j = SWAPS[where]
    bodies = dict(bd.query("SELECT seq, body FROM events WHERE job_id = ? AND seq IN (?, ?)",
                           "SELECT seq, body FROM dispatch_events WHERE job_id = %s"
                           " AND seq IN (%s, %s)", (a, i, j)))
    for seq, other in ((i, j), (j, i)):  # the same rows, each with the other's body
        bd.execute("UPDATE events SET body = ? WHERE job_id = ? AND seq = ?",
                   "UPDATE dispatch_events SET body = %s WHERE job_id = %s AND seq = %s",
                   (bodies[other], a, seq))
    history = d("history", a)
    assert history.returncode == 5, history.stderr
    said = history.stderr.strip().removeprefix("error: ")
    assert f"job {a}" in said
    for argv in (["status", a], ["status", a, "--json"], ["history", a, "--json"]):
        done = d(*argv)
        assert done.returncode == 5, (argv, done.stdout, done.stderr)
        assert said in done.stderr + done.stdout, (argv, said, done.stdout, done.stderr)
        assert "succeeded" not in done.stdout and "Traceback" not in done.stderr
    # ls: the job is an error row with history's words; the other job is still listed
    rows = {r["job"]: r for r in d.json("ls", "--all")}
    assert set(rows) == {a, b}
    assert rows[a]["error"]["exit_code"] == 5 and rows[a]["error"]["message"] == said
    assert "state" not in rows[a] or rows[a]["state"] != "succeeded"
    assert rows[b]["state"] == "succeeded"
    plain = d("ls", "--all")
    lines = plain.stdout.splitlines()
    assert " error " in next(line for line in lines if line.startswith(a)), plain.stdout
    assert " succeeded " in next(line for line in lines if line.startswith(b)), plain.stdout
    # the Python API refuses it with the typed error
    api = d.python(
        "import dispatch\nfrom dispatch.errors import StoreUnusable\n"
        f"j = dispatch.get({a!r})\n"
        "for call in (j.status, j.history):\n"
        "    try:\n        call()\n    except StoreUnusable as e:\n        print('refused', e)\n"
        "    else:\n        print('READ')\n")
    assert api.returncode == 0, api.stderr
    assert api.stdout.count("refused") == 2 and "READ" not in api.stdout, api.stdout
    assert d.status(b)["state"] == "succeeded"
    # goodput (it folds records whole) leaves the job out, saying why, and counts the other
    gp = d("goodput")
    assert gp.returncode == 0 and "1 job(s)" in gp.stdout, (gp.stdout, gp.stderr)
    assert f"not counted: {a}: {said}" in gp.stderr, gp.stderr
