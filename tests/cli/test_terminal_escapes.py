"""Issue 21 item 5: nothing a record holds reaches the terminal as a control sequence. A record
written before names were checked (or a scheduler's words) can hold ESC, BEL, CR and C1
controls; status, ls, history and watch, through the real CLI, print them made visible.
Issue 21 item 17: a lone surrogate in a spec is refused (exit 2, no traceback) by --dry-run and
submit alike, and by the Python API with a typed error."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.cli.conftest import invoke, world_env

import dispatch
from dispatch.cli import render
from dispatch.core import events as ev
from dispatch.core.model import Cause, CauseKind, Provenance, State
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec, SpecError
from dispatch.stores.sqlite import SQLiteStore

T0 = datetime(2026, 12, 2, 3, 0, tzinfo=UTC)
# What an attacker would put in a name or a scheduler's words: retitle the terminal (OSC ... BEL),
# clear the screen (CSI 2J), go back to the line's start (CR) and forge a line, a C1 CSI.
NAME = "evil\x1b]0;pwned\x07\x1b[2J"
DETAIL = "oom\rFAKE: succeeded\x1b[1A\x9b2K\x7f"
ESCALATION = "look here\x07\nsecond line\x1b[31m"
RAW = ("\x1b", "\x07", "\r", "\x9b", "\x7f")


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    return {**world_env(tmp_path), "NO_COLOR": "1", "COLUMNS": "300"}


@pytest.fixture
def job(env: dict[str, str]) -> str:
    """A finished job whose record holds controls in its name, a cause's detail and note, and
    an escalation: written through the store API, as an old record or a scheduler would."""
    spec = JobSpec(name=NAME, command=("true",))
    cause = Cause(kind=CauseKind.LAUNCH_FAILED, provenance=Provenance.SCHEDULER,
                  detail=DETAIL, note="note\x1b[5m", actor="ann\x1b[8m", at=T0)
    with SQLiteStore(Path(env["DISPATCH_STORE"])) as store:
        store.create(ev.JobCreated(seq=1, at=T0, job_id="e5c0000001", spec=spec,
                                   declarations=Declarations(backend="local"),
                                   actor="ann\x1b[8m"))
        store.append("e5c0000001", [
            ev.SubmissionIntended(seq=2, at=T0, submission=1, token="e5c0000001.1"),
            ev.SubmissionRejected(seq=3, at=T0, submission=1, cause=cause),
            ev.EscalationRaised(seq=4, at=T0, message=ESCALATION),
            ev.OutcomeCommitted(seq=5, at=T0, state=State.FAILED, cause=cause),
        ], 1)
    return "e5c0000001"


def no_raw_controls(text: str) -> None:
    for c in RAW:
        assert c not in text, (c, text)


def test_status_shows_the_controls_made_visible(env: dict[str, str], job: str) -> None:
    code, out, err = invoke(env, "status", job)
    assert code == 0, err
    no_raw_controls(out)
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J" in out
    assert "detail: oom\\rFAKE: succeeded\\x1b[1A\\x9b2K\\x7f" in out
    assert "note: note\\x1b[5m" in out and "by ann\\x1b[8m" in out
    # A multi-line escalation keeps its lines, the second indented under the first.
    lines = out.splitlines()
    first = next(i for i, x in enumerate(lines) if "look here\\x07" in x)
    assert lines[first + 1].startswith("      second line\\x1b[31m")


def test_ls_and_watch_show_the_controls_made_visible(env: dict[str, str], job: str,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    code, out, err = invoke(env, "ls", "--all")
    assert code == 0, err
    no_raw_controls(out)
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J" in out
    assert "by ann\\x1b[8m" in out

    def stop(_seconds: float) -> None:  # watch draws once, then is "interrupted"
        raise KeyboardInterrupt
    monkeypatch.setattr("dispatch.cli.reading.time.sleep", stop)
    code, out, err = invoke(env, "watch", "--all")
    assert code == 0, err
    no_raw_controls(out.replace("\x1b[?25l", "").replace("\x1b[?25h", "")
                    .replace("\r\x1b[2K", "").replace("\x1b[1A\x1b[2K", ""))  # Live's own
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J" in out


def test_history_is_one_line_per_event_with_the_controls_visible(env: dict[str, str],
                                                                  job: str) -> None:
    code, out, err = invoke(env, "history", job)
    assert code == 0, err
    no_raw_controls(out)
    lines = out.splitlines()
    assert len(lines) == 5  # a newline in an escalation forges no line
    assert "evil\\x1b]0;pwned\\x07\\x1b[2J" in lines[0]
    assert "look here\\x07\\nsecond line\\x1b[31m" in lines[3]


def test_an_error_message_shows_the_controls_made_visible(env: dict[str, str],
                                                          job: str) -> None:
    """An error names what it was given (here a job that does not exist) or what a scheduler
    said: on the terminal, made visible."""
    code, out, err = invoke(env, "status", "nojob\x1b]0;pwned\x07\r")
    assert code == 3
    no_raw_controls(err)
    assert "no such job: nojob\\x1b]0;pwned\\x07\\r" in err


def test_json_keeps_the_words_verbatim(env: dict[str, str], job: str) -> None:
    """--json is for programs: the words exactly as recorded (JSON escapes them itself)."""
    code, out, _ = invoke(env, "status", job, "--json")
    no_raw_controls(out)
    doc = json.loads(out)
    assert doc["name"] == NAME and doc["cause"]["detail"] == DETAIL


def test_visible_is_a_pure_helper() -> None:
    assert render.visible("a\x1bb") == "a\\x1bb"
    assert render.visible("tab\tkept") == "tab\tkept"
    assert render.visible("two\nlines") == "two\\nlines"
    assert render.visible("two\nlines", newlines=True) == "two\nlines"
    assert render.visible("\x00\x1f\x7f\x80\x9f\ud800") == "\\x00\\x1f\\x7f\\x80\\x9f\\ud800"
    assert render.visible("plain ünïcødé 漢字") == "plain ünïcødé 漢字"


SURROGATE_SPECS = {
    "name": 'name: "a\\ud800"\ncommand: ["true"]\n',
    "command[1]": 'name: s\ncommand: ["echo", "\\udc80"]\n',
    "env.A": 'name: s\ncommand: ["true"]\nenv: {A: "\\ud800"}\n',
}


@pytest.mark.parametrize("where", list(SURROGATE_SPECS))
@pytest.mark.parametrize("args", [["submit", "--dry-run"], ["submit"], ["run"]],
                         ids=["dry-run", "submit", "run"])
def test_a_lone_surrogate_is_refused_by_every_command(tmp_path: Path, env: dict[str, str],
                                                      where: str, args: list[str]) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SURROGATE_SPECS[where])
    code, out, err = invoke(env, *args, str(path), "--json") if args != [
        "submit", "--dry-run"] else invoke(env, *args, str(path))
    assert code == 2, (out, err)
    assert "Traceback" not in out + err
    assert f"{where}: holds a lone surrogate" in out + err
    assert not Path(env["DISPATCH_STORE"]).exists() or _jobs(env) == 0


def _jobs(env: dict[str, str]) -> int:
    with SQLiteStore(Path(env["DISPATCH_STORE"])) as store:
        return len(store.list_jobs())


def test_the_python_api_refuses_a_lone_surrogate_typed(env: dict[str, str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(SpecError) as err:
        dispatch.submit({"name": "a\ud800", "command": ["true"]})
    assert err.value.where == "name"
    with pytest.raises(SpecError) as err:
        dispatch.submit(JobSpec(name="ok", command=("echo", "\udc80")))
    assert err.value.where == "command[1]"
    assert not Path(env["DISPATCH_STORE"]).exists() or _jobs(env) == 0
