"""`dispatch status` to a pipe or a file is written without Rich (CLI start-up, issue 15): the
bytes must be the ones Rich writes there, for any name, cause or message."""

from __future__ import annotations

import io
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from dispatch.cli import render
from dispatch.core.model import (
    Cause,
    CauseKind,
    Escalation,
    Forecast,
    Level,
    Provenance,
    State,
    Status,
)
from dispatch.service.views import SCHEDULER_OK, SCHEDULER_UNREACHABLE, JobView

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
# Any text, with the characters Rich treats specially: controls, tabs, markup, wide ones.
words = st.text(st.one_of(st.characters(codec="utf-8", exclude_categories=("Cs",)),
                          st.sampled_from("\t\r\n\x07\x08\x0b\x0c\x1b[]/:~ 漢字é\u200b")),
                max_size=30)
causes = st.builds(Cause, kind=st.sampled_from(CauseKind),
                   provenance=st.sampled_from(Provenance), detail=words, note=words,
                   actor=st.none() | words, exit_code=st.none() | st.integers(-255, 255))
views = st.builds(
    JobView,
    st.builds(Status, job=words, name=words, state=st.sampled_from(State),
              cause=st.none() | causes, level=st.sampled_from(Level),
              forecast=st.none() | st.builds(Forecast, state=st.sampled_from(State),
                                             cause=st.none() | causes),
              escalations=st.lists(st.builds(Escalation, at=st.just(T0), message=words,
                                             seq=st.integers(1, 9)), max_size=2).map(tuple),
              segments=st.lists(words, max_size=2).map(tuple), supersedes=st.none() | words,
              superseded_by=st.none() | words, objects=st.lists(words, max_size=2).map(tuple),
              submissions=st.integers(0, 9), scope=words, backend=words)
    | st.none(),
    st.sampled_from([SCHEDULER_OK, SCHEDULER_UNREACHABLE]), words, words)


def rich_bytes(view: JobView) -> str:
    """What the Rich path prints to a file (the console render.py makes, not a terminal)."""
    buf = io.StringIO()
    console = Console(file=buf, highlight=False, soft_wrap=True, markup=False)
    for line in render.status_lines(view):
        console.print(line.text())
    return buf.getvalue()


@pytest.fixture(autouse=True)
def no_forced_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("FORCE_COLOR", "TTY_COMPATIBLE", "COLUMNS"):
        monkeypatch.delenv(var, raising=False)


@settings(max_examples=300, deadline=None)
@given(view=views)
def test_plain_status_is_what_rich_writes(view: JobView) -> None:
    out = io.StringIO()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("sys.stdout", out)
        assert not render.styles_stdout()
        render.print_status(view)
    assert out.getvalue() == rich_bytes(view)


@pytest.mark.parametrize(("env", "styled"), [({}, False), ({"FORCE_COLOR": "1"}, True),
                                             ({"FORCE_COLOR": ""}, False),
                                             ({"TTY_COMPATIBLE": "1"}, True),
                                             ({"TTY_COMPATIBLE": "0", "FORCE_COLOR": "1"},
                                              False)])
def test_rich_is_used_where_rich_would_style(monkeypatch: pytest.MonkeyPatch,
                                             env: dict[str, str], styled: bool) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert render.styles_stdout() is styled
    assert Console().is_terminal is styled  # Rich's own answer, for the same stdout
