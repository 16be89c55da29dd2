"""The tick's compact queries (compact.py): squeue -O lines and scontrol show node -o, read
strictly, from real captures of both versions. No Slurm needed."""

from __future__ import annotations

from pathlib import Path

import pytest

from dispatch.backends.slurm.compact import (
    SQUEUE_FIELDS,
    SQUEUE_FORMAT,
    parse_squeue_compact,
    split_reason,
    squeue_argv,
)
from dispatch.backends.slurm.mapping import classify, signal_from_squeue
from dispatch.backends.slurm.nodes import parse_scontrol_nodes, parse_sinfo_json
from dispatch.backends.slurm.parse import SlurmOutputError
from dispatch.core.model import CauseKind as K
from dispatch.core.model import State as S

FIX = Path(__file__).resolve().parents[3] / "fixtures" / "slurm"
# The compact squeue lines: 22.05's from a capture on the shared testbed (DISPATCH_CAPTURE_SHARED,
# without the disruptive scenarios), 24.11's and 26.05's from full captures.
DIRS = {"22.05": FIX / "22.05", "24.11": FIX / "24.11", "26.05": FIX / "26.05"}
# Node views: 22.05's from the first full capture (tests/fixtures/slurm/).
NODE_DIRS = {"22.05": FIX, "24.11": FIX / "24.11", "26.05": FIX / "26.05"}


def test_the_query_asks_for_one_user_in_every_state() -> None:
    argv = squeue_argv("alice")
    assert argv[:7] == ["squeue", "-h", "--local", "-t", "all", "-u", "alice"]
    assert argv[-1] == SQUEUE_FORMAT and SQUEUE_FORMAT.endswith("Comment:|")
    assert len(SQUEUE_FORMAT.split(",")) == len(SQUEUE_FIELDS)


@pytest.mark.parametrize("version", sorted(DIRS))
def test_exit_codes_of_both_versions(version: str) -> None:
    """22.05 prints the raw wait status (exit 3 -> 768), 24.11 and 26.05 code:signal (3:0)."""
    d = DIRS[version]
    exit3 = {j.comment: j for j in parse_squeue_compact((d / "exit3.squeue.txt").read_text())}
    job = exit3["cap.exit3.0"]
    assert job.exit is not None and (job.exit.code, job.exit.signal) == (3, None)
    assert job.exit.text == {"22.05": "768", "24.11": "3:0", "26.05": "3:0"}[version]
    e137 = {j.comment: j for j in parse_squeue_compact((d / "exit137.squeue.txt").read_text())}
    assert e137["cap.exit137.0"].exit.code == 137  # type: ignore[union-attr]
    oom = {j.comment: j for j in parse_squeue_compact((d / "oom.squeue.txt").read_text())}
    derived = oom["cap.oom.0"].derived_exit
    assert derived is not None and derived.signal == 125  # SIG_OOM of the srun step


@pytest.mark.parametrize("version", sorted(DIRS))
def test_held_array_record(version: str) -> None:
    jobs = parse_squeue_compact((DIRS[version] / "array-held.squeue.txt").read_text())
    (job,) = jobs
    assert job.array_job_id == job.job_id and job.array_task_id is None
    assert job.array_task_string == "0-3"
    assert (job.state, job.reason) == ("PENDING", "JobHeldUser")


def test_description_printed_instead_of_the_reason() -> None:
    assert split_reason("JobHeldUser") == ("JobHeldUser", "")
    assert split_reason("job requeued in held state") == ("", "job requeued in held state")
    assert split_reason("ReqNodeNotAvail, UnavailableNodes:n4") == (
        "ReqNodeNotAvail", "ReqNodeNotAvail, UnavailableNodes:n4")
    assert split_reason("") == ("", "")


LINE = ("7|7|N/A|COMPLETED|None|0:0|0:0|0|1|n3|2026-12-01T08:20:57|2026-12-01T08:20:57|"
        "2026-12-01T08:20:58|2026-12-01T08:20:58|low|/tmp/%j.out|a|b|")


def test_a_comment_may_hold_the_separator() -> None:
    (job,) = parse_squeue_compact(LINE)
    assert job.comment == "a|b" and job.standard_output == "/tmp/%j.out"


@pytest.mark.parametrize(("line", "words"), [
    (LINE.replace("7|7|", "x|7|", 1), "JobID: not a number: 'x'"),
    (LINE.replace("|0|1|n3|", "|0|maybe|n3|"), "Requeue: not 0 or 1"),
    (LINE.replace("|0:0|0:0|", "|zero|0:0|"), "exit_code: not an exit code"),
    (LINE.replace("2026-12-01T08:20:58|low", "yesterday|low"), "EndTime: not a time"),
    (LINE.replace("|COMPLETED|", "|COMPLETED NOW|"), "State: not a state word"),
    (LINE[:-1], "expected 17 fields ending with '|'"),
    ("7|7|N/A|COMPLETED", "expected 17 fields"),
])
def test_a_word_it_cannot_read_is_an_error_naming_tool_and_line(line: str, words: str) -> None:
    with pytest.raises(SlurmOutputError) as err:
        parse_squeue_compact("\n" + line)
    assert err.value.tool == "squeue -O" and err.value.where == "line 2"
    assert words in err.value.message


def test_an_unknown_state_word_is_unknown_with_the_words() -> None:
    (job,) = parse_squeue_compact(LINE.replace("|COMPLETED|", "|LEVITATING|"))
    state, cause = classify(signal_from_squeue(job))
    assert (state, cause.kind) == (S.UNKNOWN, K.UNKNOWN)
    assert cause.detail.startswith("LEVITATING")


# ---------------------------------------------------------------------------------- nodes

# (version, snapshot): scontrol show node -o and sinfo -O (NodeList, StateComplete, Reason)
# taken at the same moment. (24.11's and 26.05's sinfo --json have no "nodes" list: sinfo.json
# there is kept as printed, and only the 22.05 one is read by parse_sinfo_json.)
NODE_SNAPSHOTS = [(v, n) for v in sorted(NODE_DIRS)
                  for n in ("idle", "nodedown", "notresponding", "notresponding-down")]


def sinfo_table(text: str) -> dict[str, tuple[str, set[str], str]]:
    out = {}
    for line in text.splitlines():
        name, state, reason, _at, _ = line.split("|")
        words = state.upper().split("+")
        out[name] = (words[0], set(words[1:]), "" if reason == "none" else reason)
    return out


@pytest.mark.parametrize(("version", "name"), NODE_SNAPSHOTS)
def test_scontrol_nodes_read_like_sinfo(version: str, name: str) -> None:
    d = NODE_DIRS[version]
    a = {n.name: n for n in parse_scontrol_nodes((d / f"{name}.scontrol-node.txt").read_text())}
    b = sinfo_table((d / f"{name}.sinfo.txt").read_text())
    assert sorted(a) == sorted(b) == ["n1", "n2", "n3", "n4"]
    for node in a:
        assert (a[node].state, set(a[node].flags), a[node].reason) == b[node], node
    if version == "22.05":
        c = {n.name: n for n in parse_sinfo_json((d / f"{name}.sinfo.json").read_text())}
        assert {n: (c[n].state, set(c[n].flags), c[n].reason, c[n].reason_by) for n in c} == \
            {n: (a[n].state, set(a[n].flags), a[n].reason, a[n].reason_by) for n in a}


def test_a_node_that_stopped_answering_is_down_with_its_reason() -> None:
    """Every version: DOWN+NOT_RESPONDING, reason "Not responding" set by root (SlurmUser).
    (In nodedown.* n2 is already back: ReturnToService=2 returns it as soon as its slurmd
    answers.)"""
    for version in sorted(NODE_DIRS):
        path = NODE_DIRS[version] / "notresponding-down.scontrol-node.txt"
        n1 = {n.name: n for n in parse_scontrol_nodes(path.read_text())}["n1"]
        assert (n1.state, n1.flags, n1.reason) == ("DOWN", ("NOT_RESPONDING",), "Not responding")
        assert n1.reason_by == "root" and n1.reason_at is not None, version


def test_a_node_line_it_cannot_read_is_an_error() -> None:
    with pytest.raises(SlurmOutputError) as err:
        parse_scontrol_nodes("NodeName=n1 State=IDLE\nNode n9 not found\n")
    assert (err.value.tool, err.value.where) == ("scontrol show node", "line 2")
    with pytest.raises(SlurmOutputError, match="State: not a node state"):
        parse_scontrol_nodes("NodeName=n1 State=IDLE+ Arch=x\n")


def test_a_negative_wait_status_is_kept_as_words_never_a_code() -> None:
    """Seen on 22.05.8: a NODE_FAIL job prints DerivedEC -2 (NO_VAL); it is no exit code."""
    line = ("286|286|N/A|NODE_FAIL|NodeDown|15|-2|0|0|n4|2026-12-01T08:29:46|2026-12-01T08:29:46|"
            "2026-12-01T08:29:49|2026-12-01T08:29:50|low|/tmp/x/%j.out|cap.nodefail.0|")
    (job,) = parse_squeue_compact(line + "\n")
    assert job.derived_exit is not None and job.derived_exit.text == "-2"
    assert (job.derived_exit.code, job.derived_exit.signal) == (None, None)
    assert classify(signal_from_squeue(job))[1].kind is K.NODE_LOST


def test_the_capture_script_asks_what_the_tick_asks() -> None:
    """The compact fixtures are only evidence for the tick if capture.sh ran its query."""
    script = (Path(__file__).resolve().parents[3] / "fixtures" / "slurm" / "capture.sh").read_text()
    assert f"SQUEUE_FORMAT='{SQUEUE_FORMAT}'" in script
    asked = " ".join(squeue_argv("USER")[:-1]).replace("USER", '"$(id -un)"')
    assert script.count(asked + ' "$SQUEUE_FORMAT"') == 2
