"""Issue 36: the CLI on a person's terminal, 80 and 120 columns wide, through a real
pseudo-terminal and the real `dispatch` in real processes: `ls` keeps the id, name, state and
cause readable and cuts the application's error; `--plain` keeps the error."""

from __future__ import annotations

import json
import re

import pytest
from tests.e2e.conftest import Dispatch, script
from tests.e2e.terminal import on_terminal

NAN = script("raise FloatingPointError('loss is NaN at step 7, after the learning rate "
             "warm-up ended and the gradient norm grew past every clip')")
STYLE = re.compile(r"\x1b\[[0-9;]*m")


def run_job(d: Dispatch, name: str, command: list[str]) -> str:
    done = d("run", str(d.spec(name, command)), "--json", "--poll", "0.2", timeout=180)
    return str(json.loads(done.stdout)["job"])


def shown(d: Dispatch, columns: int, *args: str) -> tuple[int, list[str], str]:
    code, out, err = on_terminal(d.argv(*args), d.env, str(d.tmp), columns)
    return code, [STYLE.sub("", x).rstrip() for x in out.splitlines()], err


@pytest.mark.parametrize("columns", [80, 120])
def test_ls_cuts_the_error_not_the_columns_a_person_scans(dispatch: Dispatch,
                                                          columns: int) -> None:
    failed = run_job(dispatch, "training-nan", NAN)
    ok = run_job(dispatch, "warmup-sweep-7", script("print('fine')"))
    code, lines, err = shown(dispatch, columns, "ls", "--all")
    assert code == 0, err
    assert all(len(x) <= columns for x in lines), lines
    header, *rows = lines
    assert header.split()[:4] == ["JOB", "NAME", "STATE", "CAUSE"] and "ERROR" in header
    row = next(r for r in rows if r.startswith(failed))
    assert row.split()[:4] == [failed, "training-nan", "failed", "non-zero-exit"]
    assert "FloatingPoi" in row and row.endswith("…")  # the error is the column cut
    if columns == 120:
        assert "non-zero-exit (exit 1)" in row
    okrow = next(r for r in rows if r.startswith(ok))
    assert okrow.split()[:4] == [ok, "warmup-sweep-7", "succeeded", "none"]
    # --plain on the same terminal: every column whole, the error the last one
    code, plain, _ = shown(dispatch, columns, "ls", "--all", "--plain")
    fields = next(x for x in plain if x.startswith(failed)).split("\t")
    assert plain[0].split("\t")[-1] == "ERROR"
    assert fields[-1].startswith("FloatingPointError: loss is NaN at step 7, after the")
