"""Issue 23 acceptance on the local backend: the application's own error (its first failing rank
and words) in `status`, `status -v`, `ls`, `history`, every --json and the Python API; kept
in the record after the node logs are gone; bad torchelastic error files ignored with a note,
the cause unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from tests.e2e.conftest import Dispatch, script

# Rank 1 raises once rank 0 has started (rank 0 then runs until it is killed).
RANK1_RAISES = script(
    "import os, pathlib, sys, time\n"
    "mark = pathlib.Path(os.environ['DISPATCH_OBJECT'] + '.rank0-started')\n"
    "here = pathlib.Path.cwd() / mark.name\n"
    "if os.environ['RANK'] == '0':\n"
    "    here.write_text('up'); print('rank 0 training', flush=True); time.sleep(120)\n"
    "while not here.exists(): time.sleep(0.05)\n"
    "print('step 6 loss 0.1', flush=True)\n"
    "def train():\n"
    "    raise FloatingPointError('loss is NaN at step 7')\n"
    "train()\n")

LINE = "rank 1 on node1: FloatingPointError: loss is NaN at step 7"


def _run(d: Dispatch, name: str, command: list[str], **fields: object) -> tuple[int, dict]:
    spec = d.spec(name, command, **fields)
    done = d("run", str(spec), "--json", "--poll", "0.2", timeout=180)
    try:
        return done.returncode, json.loads(done.stdout)
    except json.JSONDecodeError:
        raise AssertionError(f"exit {done.returncode}\n{done.stdout}\n{done.stderr}") from None


def test_rank_1_raises_after_rank_0_started(dispatch: Dispatch) -> None:
    code, st = _run(dispatch, "nan", RANK1_RAISES, nodes=2)
    assert code == 1 and st["state"] == "failed"
    # the cause is the scheduler's and the exit facts', untouched by the error
    assert st["cause"]["kind"] == "non-zero-exit" and st["cause"]["exit_code"] == 1
    assert "FloatingPointError" not in st["cause"]["detail"] + st["cause"]["note"]
    err = st["application_error"]
    assert (err["rank"], err["node"], err["message"], err["source"]) == (
        1, "node1", "FloatingPointError: loss is NaN at step 7", "output-tail")
    assert err["exit_code"] == 1 and err["signal"] is None
    assert 'in train' in err["traceback_tail"]  # python -c shows no source lines
    # the escalation says it too, labelled as the application's
    assert any(e["message"].endswith(f"application error: {LINE}")
               for e in st["escalations"])
    job = st["job"]

    text = dispatch("status", job).stdout
    assert f"error: {LINE}" in text, text
    assert "Traceback" not in text
    verbose = dispatch("status", job, "-v").stdout
    assert "| Traceback (most recent call last):" in verbose, verbose
    assert "in train" in verbose
    dispatch.env["COLUMNS"] = "250"  # a wide pipe: nothing cut, nothing folded
    listing = dispatch("ls", "--all").stdout
    del dispatch.env["COLUMNS"]
    assert "ERROR" in listing and "FloatingPointError: loss is NaN at step 7" in listing
    assert dispatch.json("ls", "--all")[0]["application_error"]["rank"] == 1
    history = dispatch("history", job).stdout
    assert f"application error (submission 1 execution 0, from output-tail): {LINE}" in \
        history, history
    events = dispatch.json("history", job)
    recorded = [h for h in events if h["type"] == "ApplicationErrorRecorded"]
    assert len(recorded) == 1 and recorded[0]["event"]["error"]["node"] == "node1"

    api = dispatch.python(
        "import dispatch\n"
        f"job = dispatch.get({job!r})\n"
        "e = job.status().error\n"
        "print(e.rank, e.node, e.message)\n"
        "try:\n"
        "    job.wait(timeout=30, check=True)\n"
        "except dispatch.JobFailed as failed:\n"
        "    print('JobFailed:', failed)\n"
        "    print(failed.error.rank)\n")
    assert api.returncode == 0, api.stderr
    out = api.stdout.splitlines()
    assert out[0] == "1 node1 FloatingPointError: loss is NaN at step 7"
    assert out[1].startswith("JobFailed: job ") and out[1].endswith(
        f"application error: {LINE}")
    assert out[2] == "1"

    # The node logs go; the record keeps the error.
    logs = list((dispatch.tmp / "local" / "objects").glob("*/node*.log"))
    assert logs
    for log in logs:
        log.unlink()
    again = dispatch.status(job)
    assert again["application_error"] == err
    assert f"error: {LINE}" in dispatch("status", job).stdout


# A program writing the error file in torchelastic's format, as @record does.
RECORDED = script(
    "import json, os, sys, time, traceback\n"
    "def main():\n"
    "    raise KeyError('lr')\n"
    "try:\n"
    "    main()\n"
    "except Exception as e:\n"
    "    data = {'message': {'message': f'{type(e).__name__}: {e}', 'extraInfo': {\n"
    "        'py_callstack': traceback.format_exc(), 'timestamp': str(int(time.time()))}}}\n"
    "    with open(os.environ['TORCHELASTIC_ERROR_FILE'], 'w') as f: json.dump(data, f)\n"
    "    print('the output says something else', flush=True)\n"
    "    sys.exit(3)\n")


def test_the_error_file_wins_over_the_output(dispatch: Dispatch) -> None:
    code, st = _run(dispatch, "recorded", RECORDED)
    assert code == 1
    err = st["application_error"]
    assert err["source"] == "torchelastic-error-file"
    assert (err["message"], err["node"], err["rank"], err["exit_code"]) == (
        "KeyError: 'lr'", "node0", 0, 3)
    assert 'in main' in err["traceback_tail"]
    assert st["cause"]["kind"] == "non-zero-exit" and st["cause"]["exit_code"] == 3


def _bad_file(kind: str) -> list[str]:
    """A node that plants a bad error file where TORCHELASTIC_ERROR_FILE points, then fails
    with its own words in its output."""
    plant = {
        "huge": "open(p, 'w').write('{\"message\": \"' + 'x' * (2 << 20) + '\"}')",
        "truncated": "open(p, 'w').write('{\"message\": {\"message\": \"ValueError: no')",
        "not-json": "open(p, 'w').write('this is not json')",
        "symlink": "pathlib.Path(p).symlink_to(os.environ['OTHER'])",
        "another-job": "os.link(os.environ['OTHER'], p)",
    }[kind]
    return script(
        "import os, pathlib, sys\n"
        "p = os.environ['TORCHELASTIC_ERROR_FILE']\n"
        f"{plant}\n"
        "print('ValueError: the words of the output', flush=True)\n"
        "sys.exit(2)\n")


@pytest.mark.parametrize(("kind", "why"), [
    ("huge", "more than"),
    ("truncated", "not JSON"),
    ("not-json", "not JSON"),
    ("symlink", "symbolic link"),
    ("another-job", "another job's file"),
])
def test_a_bad_error_file_is_ignored_with_a_note(dispatch: Dispatch, kind: str,
                                                 why: str) -> None:
    other = dispatch.tmp / "other-job-error.json"
    other.write_text(json.dumps({"message": {"message": "OtherJobError: not ours",
                                             "extraInfo": {"timestamp": "1"}}}))
    dispatch.env["OTHER"] = str(other)
    code, st = _run(dispatch, f"bad-{kind}", _bad_file(kind))
    assert code == 1
    assert st["cause"]["kind"] == "non-zero-exit" and st["cause"]["exit_code"] == 2
    err = st["application_error"]
    assert err["source"] == "output-tail"
    assert err["message"] == "ValueError: the words of the output"
    assert "OtherJobError" not in json.dumps(st)
    assert err["note"].startswith("the error file was ignored") and why in err["note"], err
    assert f"note: {err['note']}" in dispatch("status", st["job"]).stdout


def test_a_node_killed_by_a_signal_says_so(dispatch: Dispatch) -> None:
    code, st = _run(dispatch, "killed", script(
        "import os, signal\nprint('about to go', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"))
    assert code == 1
    err = st["application_error"]
    assert (err["signal"], err["signal_name"], err["exit_code"]) == (9, "SIGKILL", None)
    assert "killed by signal 9 (SIGKILL)" in dispatch("status", st["job"]).stdout


@pytest.mark.torch
def test_real_torchrun_on_the_local_backend(dispatch: Dispatch) -> None:
    """A real torchrun (torch 2.13) per node: its agent copies rank 1's @record error file to
    the node's TORCHELASTIC_ERROR_FILE, which dispatch points at a file of its own."""
    torchrun = shutil.which("torchrun") or str(Path(__file__).resolve().parents[2] / ".venv"
                                                / "bin" / "torchrun")
    if not Path(torchrun).exists():
        import os

        if os.environ.get("DISPATCH_SKIP_TORCH") == "1":
            pytest.skip("torch is not installed (DISPATCH_SKIP_TORCH=1)")
        raise AssertionError("torchrun not found: install torch==2.13.0 or set "
                             "DISPATCH_SKIP_TORCH=1")
    fixtures = Path(__file__).resolve().parents[1] / "fixtures" / "torchelastic"
    code, st = _run(dispatch, "torchrun-rec", [
        torchrun, "--nnodes=1", "--nproc_per_node=2", "--master_port=0",
        str(fixtures / "rec.py")])
    assert code == 1
    err = st["application_error"]
    assert err["source"] == "torchelastic-error-file"
    assert err["message"] == "FloatingPointError: loss is NaN at step 7"
    assert (err["rank"], err["local_rank"], err["node"], err["exit_code"]) == (1, 1, "node0", 1)
    assert 'raise FloatingPointError("loss is NaN at step 7")' in err["traceback_tail"]
