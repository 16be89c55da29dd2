"""A spec's log pattern for a training that cannot write the progress file (G3): checked at
parse time, and what one line of output says."""

from __future__ import annotations

import re

import pytest

from dispatch.core.progress import MOST_PATTERN_CHARS, checkpoint_step
from dispatch.core.spec import SpecError, parse_spec

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
    assert "not a Python regular expression" in err.message


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
    with_step = re.compile(r"saved checkpoint at step (?P<step>\d+)")
    assert checkpoint_step(with_step, "[rank0] saved checkpoint at step 6", 0) == 6
    assert checkpoint_step(with_step, "step 6 done", 0) is None
    counted = re.compile(r"checkpoint saved")
    assert checkpoint_step(counted, "checkpoint saved", 0) == 1
    assert checkpoint_step(counted, "checkpoint saved", 4) == 5
    optional = re.compile(r"saved(?: at (?P<step>\w+))?")
    assert checkpoint_step(optional, "saved at six", 0) is None  # not a whole number
    assert checkpoint_step(optional, "saved", 0) is None
    assert checkpoint_step(with_step, "saved checkpoint at step " + "9" * 30, 0) is None
