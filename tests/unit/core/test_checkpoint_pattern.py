"""A spec's log pattern for a training that cannot write the progress file (G3): checked at
parse time, and what one line of output says."""

from __future__ import annotations

import pytest
from tests.specs import parse_spec

from dispatch.core.progress import (
    MATCH_COST,
    MOST_LINE_BYTES,
    MOST_PATTERN_CHARS,
    MOST_PATTERN_GROUPS,
    MOST_PATTERN_PROGRAM,
    checkpoint_step,
    compile_pattern,
    most_matched_line_bytes,
)
from dispatch.core.spec import SpecError
from dispatch.errors import BadInput

BASE = {"name": "t", "command": ["train"]}


def _problem(pattern: object, **more: object) -> SpecError:
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, **more, "progress": {"checkpoint_pattern": pattern}}, "s.yaml")
    return caught.value


def test_a_good_pattern_is_kept() -> None:
    spec = parse_spec({**BASE, "progress": {
        "checkpoint_pattern": r"saved checkpoint at step (?P<step>\d+)"}})
    assert spec.progress is not None
    assert spec.progress.checkpoint_pattern.startswith("saved checkpoint")


def test_a_bad_regex_is_refused_naming_the_key() -> None:
    err = _problem("saved (step")
    assert err.where == "progress.checkpoint_pattern"
    assert "not an RE2 regular expression" in err.message
    assert "missing )" in err.message  # RE2's own words


@pytest.mark.parametrize(("pattern", "words"), [
    (r"(step)\1", r"invalid escape sequence: \1"),  # a backreference
    (r"saved(?= checkpoint)", "invalid perl operator: (?="),  # lookahead
    (r"(?<!un)saved", "invalid perl operator: (?<"),  # lookbehind
])
def test_what_re2_cannot_compile_is_refused_with_its_words(pattern: str, words: str) -> None:
    # A backtracking engine would be needed for these: RE2 matches in linear time.
    err = _problem(pattern)
    assert isinstance(err, BadInput)
    assert err.where == "progress.checkpoint_pattern"
    assert words in err.message


def test_a_pattern_too_costly_to_match_is_refused() -> None:
    err = _problem(r"[\w\W]{1000}x")
    assert err.where == "progress.checkpoint_pattern"
    assert str(MOST_PATTERN_PROGRAM) in err.message


@pytest.mark.parametrize("pattern", [
    r"(?P<step>(?:a?){600}a{600})",  # the audit's: 1806 instructions, ~75 ms a 4 KiB line
    r"(?:a?){200}a{200}",
    r"((a{10}){10}){10}",
    r"(?:a|b)*a(?:a|b){600}",  # a DFA of 2^600 states: every byte a new one
])
def test_a_nested_repetition_too_costly_to_match_is_refused(pattern: str) -> None:
    err = _problem(pattern)
    assert err.where == "progress.checkpoint_pattern"
    assert f"more than {MOST_PATTERN_PROGRAM}" in err.message
    assert "instructions" in err.message and "cost" in err.message


def test_many_capturing_groups_are_refused() -> None:
    # RE2's NFA copies every group on each step: 62 of them in 254 instructions cost
    # ~20 ms a 4 KiB line.
    err = _problem("(?:" + "".join(f"({c}?)" for c in "abcdefghijklmnopq") + ")+!")
    assert err.where == "progress.checkpoint_pattern"
    assert f"17 capturing groups, more than {MOST_PATTERN_GROUPS}" in err.message
    parse_spec({**BASE, "progress": {"checkpoint_pattern": "(?:" + "".join(
        f"(?:{c}?)" for c in "abcdefghijklmnopq") + ")+!"}})


def test_the_lines_matched_are_shorter_for_a_costlier_pattern() -> None:
    assert compile_pattern(r"saved checkpoint at step (?P<step>\d+)").most_line_bytes \
        == MOST_LINE_BYTES
    assert most_matched_line_bytes(64) == MOST_LINE_BYTES
    assert most_matched_line_bytes(MOST_PATTERN_PROGRAM) == 910
    for instructions in range(1, MOST_PATTERN_PROGRAM + 1):  # the cost bound holds
        most = most_matched_line_bytes(instructions)
        assert most * (instructions + 64) <= MATCH_COST and most >= 910
    costly = compile_pattern(r"(?:a?){100}a{100}")  # just under the bound
    assert costly.regex.programsize <= MOST_PATTERN_PROGRAM
    assert costly.most_line_bytes < MOST_LINE_BYTES


@pytest.mark.parametrize("pattern", ["", "x*", "^", "(step)?", "a|"])
def test_a_pattern_that_matches_the_empty_string_is_refused(pattern: str) -> None:
    err = _problem(pattern)
    assert err.where == "progress.checkpoint_pattern"


def test_a_pattern_too_long_is_refused() -> None:
    err = _problem("a" * (MOST_PATTERN_CHARS + 1))
    assert err.where == "progress.checkpoint_pattern"
    assert str(MOST_PATTERN_CHARS) in err.message
    parse_spec({**BASE, "progress": {"checkpoint_pattern": "a" * MOST_PATTERN_CHARS}})


def test_unknown_keys_and_wrong_types_are_refused() -> None:
    with pytest.raises(SpecError) as caught:
        parse_spec({**BASE, "progress": {"checkpoint_pattern": "x", "step_grup": "s"}})
    assert "step_grup" in str(caught.value)
    assert _problem(12).where.startswith("progress")


def test_only_the_local_backend_reads_a_pattern() -> None:
    err = _problem("saved", backend="slurm")
    assert err.where == "progress"
    assert "local" in err.message


def test_a_line_says_its_step_or_counts() -> None:
    with_step = compile_pattern(r"saved checkpoint at step (?P<step>\d+)")
    assert checkpoint_step(with_step, "[rank0] saved checkpoint at step 6", 0) == 6
    assert checkpoint_step(with_step, "step 6 done", 0) is None
    counted = compile_pattern(r"checkpoint saved")
    assert checkpoint_step(counted, "checkpoint saved", 0) == 1
    assert checkpoint_step(counted, "checkpoint saved", 4) == 5
    optional = compile_pattern(r"saved(?: at (?P<step>\w+))?")
    assert checkpoint_step(optional, "saved at six", 0) is None  # not a whole number
    assert checkpoint_step(optional, "saved", 0) is None
    assert checkpoint_step(with_step, "saved checkpoint at step " + "9" * 30, 0) is None


def test_a_pattern_that_backtracks_for_ever_in_re_is_matched_in_linear_time() -> None:
    # ^(a+)+$ against a..ab: 2^4000 tries for a backtracking engine, one pass for RE2.
    pattern = compile_pattern("^(a+)+$")
    assert checkpoint_step(pattern, "a" * 4000 + "b", 0) is None
    assert checkpoint_step(pattern, "a" * 4000, 0) == 1
    # \d is ASCII in RE2: an Arabic-Indic digit is no step.
    assert checkpoint_step(compile_pattern(r"step (?P<step>\d+)"), "step \u0667", 0) is None
