"""Issue 36: the CLI on a person's terminal, 80 and 120 columns wide, through a real
pseudo-terminal and the real `dispatch` in real processes: `ls` keeps the id, name, state and
cause readable and cuts the application's error; `--plain` keeps the error."""

from __future__ import annotations

import json
import re

import pytest
from tests.e2e.conftest import Dispatch, script, wait_until
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
    assert "FloatingPointErr" in row and row.endswith("…")  # the error is the column cut
    # issue 48: at 80 columns the age and the submissions go, not the cause's exit code
    assert "non-zero-exit (exit 1)" in row
    if columns == 80:
        assert "AGE" not in header and "SUBS" not in header
    okrow = next(r for r in rows if r.startswith(ok))
    assert okrow.split()[:4] == [ok, "warmup-sweep-7", "succeeded", "none"]
    # --plain on the same terminal: every column whole, the error the last one
    code, plain, _ = shown(dispatch, columns, "ls", "--all", "--plain")
    fields = next(x for x in plain if x.startswith(failed)).split("\t")
    assert plain[0].split("\t")[-1] == "ERROR"
    assert fields[-1].startswith("FloatingPointError: loss is NaN at step 7, after the")


def test_ls_filters_mean_what_the_api_filters_mean(dispatch: Dispatch) -> None:
    from dispatch.service import Service
    from dispatch.service.listing import list_page, parse_list_request

    failed = run_job(dispatch, "training-nan", NAN)
    ok = run_job(dispatch, "warmup-sweep-7", script("print('fine')"))

    def ids(*args: str) -> set[str]:
        return {r["job"] for r in dispatch.json("ls", *args)}

    def api(**params: str) -> set[str]:
        with Service.open(dispatch.env["DISPATCH_STORE"]) as service:
            page = list_page(service, parse_list_request(params, ["local"]))
        return {r["job"] for r in page["jobs"]}

    assert ids("--cause", "non-zero-exit") == api(cause="non-zero-exit") == {failed}
    assert ids("--cause", "none") == api(cause="none") == {ok}
    assert ids("--state", "failed") == api(state="failed", limit="50") == {failed}
    assert ids("--state", "live") == api(state="live", limit="50") == set()
    assert ids("--cause", "non-zero-exit", "--state", "succeeded") == set()
    assert ids("--since", "1h", "--all") == {failed, ok}
    assert ids("--since", "2999-01-01", "--all") == set()
    bad = dispatch("ls", "--since", "yesterday")
    assert bad.returncode == 2 and "--since 'yesterday'" in bad.stderr


def test_nothing_moves_without_a_supervisor_and_the_cli_says_so(dispatch: Dispatch) -> None:
    done = run_job(dispatch, "warmup-sweep-7", script("print('fine')"))
    # a bare ls after the demo: the finished jobs it hides, counted, and how to see them
    code, lines, err = shown(dispatch, 80, "ls")
    assert code == 0 and lines == ["JOB  NAME  STATE  CAUSE  SUBMISSIONS  BUDGET USED  AGE"]
    assert "1 finished job not shown: `dispatch ls --all` shows it" in err, err
    assert done not in err
    spec = dispatch.spec("waits", script("import time; time.sleep(300)"))
    submitted = dispatch("submit", str(spec))
    assert submitted.returncode == 0, submitted.stderr
    assert "no live supervisor serves scope local" in submitted.stderr, submitted.stderr
    assert "run `dispatch supervise --scope local" in submitted.stderr
    scope = dispatch.json("status", "waits")["scope"]
    for args in (("status", "waits"), ("ls",)):
        code, lines, err = shown(dispatch, 80, *args)
        assert code == 0, err
        assert f"no live supervisor serves scope {scope} (1 unfinished job)" in err, (args, err)
    assert all(len(x) <= 80 for x in lines), lines
    # once a supervisor holds the scope's lease, nothing more is said
    dispatch.spawn("supervise", "--scope", scope, "--poll", "0.2")
    wait_until(lambda: any(r["scope"] == scope and r["state"] == "active"
                           for r in dispatch.json("supervisors")), "the supervisor's lease")
    for args in (("status", "waits"), ("ls",)):
        quiet = dispatch(*args)
        assert quiet.returncode == 0 and "waits" in quiet.stdout, quiet.stderr
        assert "no live supervisor" not in quiet.stderr, (args, quiet.stderr)
    dispatch("cancel", "waits", check=True)


@pytest.mark.parametrize("columns", [80, 120])
def test_supervise_once_and_supervisors_read_on_a_terminal(dispatch: Dispatch,
                                                          columns: int) -> None:
    dispatch("submit", str(dispatch.spec("waits", script("print('hi')"))), check=True)
    scope = dispatch.json("status", "waits")["scope"]
    code, lines, err = shown(dispatch, columns, "supervise", "--once")
    assert code == 0, err
    assert lines[0].startswith("one pass: 1 job, "), lines  # a summary, not JSON
    assert any(x.split()[:2] == [scope, "ticked,"] for x in lines), lines
    # without --scope only the backends of live jobs are asked: here the local one
    assert {x.split()[0] for x in lines[1:]} == {scope, "local"}, lines
    code, raw, err = on_terminal(dispatch.argv("supervise", "--once", "--json"),
                                 dispatch.env, str(dispatch.tmp), columns)
    assert code == 0 and json.loads(raw)["scopes"][scope]["ticked"], err
    code, lines, err = shown(dispatch, columns, "supervisors")
    assert code == 0, err
    assert all(len(x) <= columns for x in lines), lines
    assert lines[0].split()[:3] == ["SCOPE", "STATE", "ACTIVE"]
    row = next(x for x in lines if x.startswith(scope + " "))  # the scope on one line
    assert row.split()[1] == "released"


@pytest.mark.parametrize("columns", [80, 120])
def test_supervisors_lists_a_standby_on_a_terminal(dispatch: Dispatch, columns: int) -> None:
    """Issue 48 item 10: a second `supervise` waiting for the scope's lease is listed under
    the table, folded at the terminal's width, never cut."""
    first = dispatch.spawn("supervise", "--scope", "local", "--poll", "0.2")
    wait_until(lambda: any(r["state"] == "active" and r["holder"].endswith(f":{first.pid}")
                           for r in dispatch.json("supervisors")), "the first one's lease")
    second = dispatch.spawn("supervise", "--scope", "local", "--poll", "0.2")
    standby = f":{second.pid}"
    wait_until(lambda: any(s["holder"].endswith(standby)
                           for r in dispatch.json("supervisors") for s in r["standbys"]),
               "the second one's standby row")
    row = next(r for r in dispatch.json("supervisors")  # this machine's local scope
               if any(s["holder"].endswith(standby) for s in r["standbys"]))
    code, lines, err = shown(dispatch, columns, "supervisors")
    assert code == 0, err
    assert all(len(x) <= columns for x in lines), lines
    said = " ".join(lines)
    holder = next(s["holder"] for s in row["standbys"])
    assert f"standby for {row['scope']}: {holder} (since " in said, lines
