"""A spec's log pattern for a training that cannot write the progress file (G3): checked at
parse time, and what one line of output says."""

from __future__ import annotations

import pytest

from dispatch.core.progress import (
    MOST_PATTERN_CHARS,
    MOST_PATTERN_PROGRAM,
    checkpoint_step,
    compile_pattern,
)
from dispatch.core.spec import SpecError, parse_spec
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
