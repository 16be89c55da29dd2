"""`dispatch goodput` and the goodput line of `status`, on records in a real SQLite store."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import shlex
import struct
import subprocess
import sys
import termios
from datetime import UTC, datetime
from pathlib import Path

import msgspec
import pytest
from click.testing import CliRunner
from tests.goodput_stories import preempted_once

from dispatch.cli import main
from dispatch.core import events as ev
from dispatch.stores.sqlite import SQLiteStore

AT = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = {"DISPATCH_STORE": str(tmp_path / "record.sqlite3"),
           "DISPATCH_LOCAL_ROOT": str(tmp_path / "local"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    with SQLiteStore(Path(env["DISPATCH_STORE"])) as store:
        for job_id, nodes, backend, actor, gpus in (("small", 1, "local", "ann", None),
                                                    ("big", 64, "slurm", "bob", 8)):
            record = preempted_once(nodes, job_id=job_id, backend=backend, actor=actor,
                                    gpus_per_node=gpus).record
            created = record[0]
            assert isinstance(created, ev.JobCreated)
            store.create(created)
            store.append(job_id, record[1:], 1)
    return env


def invoke(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, list(args), env=env)
    return result.exit_code, result.stdout, result.stderr


def test_one_job_as_json_has_the_exact_split(env: dict[str, str]) -> None:
    code, out, err = invoke(env, "goodput", "big", "--json")
    assert code == 0, (out, err)
    (group,) = json.loads(out)["groups"]
    assert group["wall_seconds"] == 200 and group["node_seconds"] == 200 * 64
    parts = {(p["phase"], p["cause"]): p["node_seconds"] for p in group["parts"]}
    assert parts == {("queued", "none"): 5 * 64, ("running", "none"): 175 * 64,
                     ("recovering", "preempted"): 20 * 64}
    # G2: GPU-time where the spec gives GPUs per node (8 here).
    assert group["lost_work"] == [{"cause": "preempted", "seconds": 35,
                                   "node_seconds": 35 * 64, "gpu_seconds": 35 * 64 * 8}]
    gpus = {(p["phase"], p["cause"]): p["gpu_seconds"] for p in group["parts"]}
    assert gpus[("recovering", "preempted")] == 20 * 64 * 8
    assert group["badput"] == [{"cause": "preempted", "node_seconds": 55 * 64}]
    assert group["goodput"] == pytest.approx(140 / 200)


def test_a_job_without_gpus_per_node_has_no_gpu_time(env: dict[str, str]) -> None:
    (group,) = json.loads(invoke(env, "goodput", "small", "--json")[1])["groups"]
    assert all(p["gpu_seconds"] == 0 for p in group["parts"])


def test_the_fleet_by_backend_and_user(env: dict[str, str]) -> None:
    for by, keys in (("backend", ["local", "slurm"]), ("user", ["ann", "bob"]),
                     ("job", ["big", "small"]), ("cause", [""])):
        code, out, _ = invoke(env, "goodput", "--by", by, "--json")
        assert code == 0
        doc = json.loads(out)
        assert [g["key"] for g in doc["groups"]] == keys
    code, out, _ = invoke(env, "goodput", "--json")
    (everything,) = json.loads(out)["groups"]
    assert everything["jobs"] == 2 and everything["node_seconds"] == 200 * 65


def test_since_keeps_only_time_in_the_span(env: dict[str, str]) -> None:
    # The stories ran in 2026-01-01; a 7-day span before now holds none of them.
    code, out, _ = invoke(env, "goodput", "--since", "7d", "--json")
    assert code == 0 and json.loads(out)["groups"] == []
    code, out, _ = invoke(env, "goodput", "--since", "7d")
    assert code == 0 and "no job has time in that span" in out


def test_the_table_names_phases_causes_and_units_that_fit(env: dict[str, str]) -> None:
    code, out, err = invoke(env, "goodput", "big")
    assert code == 0, err
    for word in ("recovering", "preempted", "node-time", "lost work",
                 "21.3 node-min",  # 20 s on 64 nodes, never 0.36 node-h
                 "goodput 70% of time to result (3.56 node-h)",
                 "80% of allocated node-time (3.11 node-h)"):
        assert word in out, (word, out)
    code, out, err = invoke(env, "goodput", "small")  # one node: node-seconds, not 0.00 node-h
    assert code == 0, err
    assert "20.0 node-s" in out and "0.00" not in out, out


def test_allocated_node_time_leaves_out_queued_and_recovering(env: dict[str, str]) -> None:
    (group,) = json.loads(invoke(env, "goodput", "big", "--json")[1])["groups"]
    assert group["allocated_node_seconds"] == 175 * 64  # running only: no stopping here
    assert group["goodput_allocated"] == pytest.approx(140 / 175)
    assert group["goodput"] == pytest.approx(140 / 200)  # time to result, as before


def run_in_pty(env: dict[str, str], columns: int, *args: str) -> str:
    """The command as a person runs it: on a terminal ``columns`` wide."""
    main_fd, child_fd = pty.openpty()
    fcntl.ioctl(child_fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    full = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    full.update(env, TERM="xterm", NO_COLOR="1")
    proc = subprocess.Popen([sys.executable, "-m", "dispatch.cli", *args], env=full,
                            stdin=child_fd, stdout=child_fd, stderr=child_fd)
    os.close(child_fd)
    chunks = []
    while True:
        try:
            data = os.read(main_fd, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(main_fd)
    assert proc.wait(timeout=120) == 0, b"".join(chunks)
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode()).replace("\r", "")


@pytest.mark.parametrize("columns", [80, 120])
def test_by_job_is_one_row_a_job_with_its_name(env: dict[str, str], columns: int) -> None:
    """Issue 36: ``--by job`` prints one table, a row a job with its name (never a table a
    job), within the terminal's width."""
    out = run_in_pty(env, columns, "goodput", "--by", "job")
    lines = out.splitlines()
    assert all(len(line) <= columns for line in lines), out
    for job in ("big", "small"):
        rows = [line for line in lines if re.match(rf"^\W*{job}\b", line)]
        assert len(rows) == 1, out
        assert "train" in rows[0], out  # the job's name beside its id
    big = next(line for line in lines if re.match(r"^\W*big\b", line))
    assert "70%" in big and "80%" in big, out  # both goodputs, side by side
    assert out.count("job(s)") == 1, out  # one table


# "\u0667d" (Arabic-Indic 7), a fullwidth 7: \d and int() read any Unicode digit.
@pytest.mark.parametrize("since", ["7", "x", "0d", "7y", "-1d", "\u0667d", "\uff17d",
                                   "1\u0660d"])
def test_a_bad_span_is_bad_input(env: dict[str, str], since: str) -> None:
    code, out, err = invoke(env, "goodput", "--since", since, "--json")
    assert code == 2 and "--since" in json.loads(out)["error"]["message"]
    assert "Traceback" not in err


def test_no_such_job_exits_3(env: dict[str, str]) -> None:
    code, _, _ = invoke(env, "goodput", "nope")
    assert code == 3


def test_status_shows_the_goodput_line(env: dict[str, str]) -> None:
    code, out, err = invoke(env, "status", "big")
    assert code == 0, (out, err)
    assert "goodput 70% of time to result (3.56 node-h)" in out
    assert "badput preempted 58.7 node-min" in out


@pytest.fixture
def fleet_env(tmp_path: Path) -> dict[str, str]:
    """Seven jobs with ten-character ids and long names, of growing size (job k on k+1
    nodes): the shape of a real fleet at 80 columns."""
    env = {"DISPATCH_STORE": str(tmp_path / "record.sqlite3"),
           "DISPATCH_LOCAL_ROOT": str(tmp_path / "local"),
           "XDG_STATE_HOME": str(tmp_path / "state")}
    with SQLiteStore(Path(env["DISPATCH_STORE"])) as store:
        for k in range(7):
            job_id = f"{k}a77a64fe{k}"
            record = preempted_once(k + 1, job_id=job_id).record
            created = record[0]
            assert isinstance(created, ev.JobCreated)
            store.create(msgspec.structs.replace(created, spec=msgspec.structs.replace(
                created.spec, name=f"pretrain-llama-warmup-sweep-{k}")))
            store.append(job_id, record[1:], 1)
    return env


@pytest.mark.parametrize("columns", [80, 120])
def test_by_job_never_cuts_an_id_or_a_header(fleet_env: dict[str, str], columns: int) -> None:
    """Issue 48: at 80 columns the job id (not copyable) and the headers ("good…") were cut;
    the name is what gives way."""
    out = run_in_pty(fleet_env, columns, "goodput", "--by", "job")
    lines = out.splitlines()
    assert all(len(line) <= columns for line in lines), out
    header = next(line for line in lines if line.lstrip().startswith("job"))
    for head in ("to result", "allocated", "lost work", "goodput", "alloc."):
        assert head in header, out
    for k in range(7):
        assert sum(f"{k}a77a64fe{k} " in line for line in lines) == 1, out


def test_by_job_sorts_and_limits_with_a_command_for_the_rest(
        fleet_env: dict[str, str]) -> None:
    """Issue 48: ``--by job`` had no sort or limit (980 rows, alphabetical): the largest
    time to result first, at most --limit rows, and the rest one pasted command away."""
    code, out, err = invoke(fleet_env, "goodput", "--by", "job", "--limit", "3")
    assert code == 0, err
    rows = [line.split()[0] for line in out.splitlines() if "a77a64fe" in line]
    assert rows == ["6a77a64fe6", "5a77a64fe5", "4a77a64fe4"], out
    assert "3 of 7 jobs shown" in err
    hint = shlex.split(err.split("all of them: ")[1].splitlines()[0])
    assert hint[:2] == ["dispatch", "goodput"] and "..." not in hint
    code, out, _ = invoke(fleet_env, *hint[1:])
    assert code == 0 and sum("a77a64fe" in line for line in out.splitlines()) == 7, out
    doc = json.loads(invoke(fleet_env, "goodput", "--by", "job", "--sort", "name",
                            "--limit", "2", "--json")[1])
    assert [g["key"] for g in doc["groups"]] == ["0a77a64fe0", "1a77a64fe1"]


def test_one_job_and_a_group_are_headed_by_what_they_are(fleet_env: dict[str, str]) -> None:
    """Issue 48: ``goodput pretrain-05`` was headed "all jobs: 1 job(s)"."""
    code, out, err = invoke(fleet_env, "goodput", "2a77a64fe2")
    assert code == 0, err
    assert "all jobs" not in out
    assert out.lstrip().startswith("job 2a77a64fe2 (pretrain-llama-warmup-sweep-2)"), out
    code, out, err = invoke(fleet_env, "goodput", "pretrain-llama-*")
    assert code == 0, err
    assert "jobs named 'pretrain-llama-*': 7 job(s)" in out, out
