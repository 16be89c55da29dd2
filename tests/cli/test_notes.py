"""cli/notes.py's words (issue 36 item 5): which scopes no live supervisor serves and what
to run, and how many finished jobs a bare ``ls`` hides and how to see them."""

from __future__ import annotations

from dispatch.cli.notes import hidden_line, unserved_lines


def test_each_unserved_scope_is_named_with_one_command_for_all() -> None:
    lines = unserved_lines({"slurm:a": 1, "local:h:1": 3})
    assert lines[0] == ("note: no live supervisor serves scope local:h:1 (3 unfinished jobs): "
                        "nothing happens to them until one runs")
    assert lines[1].startswith("note: no live supervisor serves scope slurm:a (1 unfinished "
                               "job): nothing happens to it until")
    assert "`dispatch supervise --scope local:h:1 --scope slurm:a`" in lines[2]
    assert unserved_lines({}) == []


def test_the_hidden_count_keeps_the_filters_in_the_command() -> None:
    assert hidden_line(0, []) == []
    assert hidden_line(1, []) == ["1 finished job not shown: `dispatch ls --all` shows it "
                                  "(`dispatch ls --state failed` only the failed ones)"]
    [line] = hidden_line(635, ["--name sweep", "--since 2h"])
    assert line.startswith("635 finished jobs not shown: `dispatch ls --name sweep --since "
                           "2h --all`")
