"""The artifact names, unit ids and the H4 state line (pure parts)."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dispatch.segment_health.artifact import (
    DirectoryNotAbsolute,
    InvalidUnitId,
    absolute_directory,
    lock_filename,
    parse_unit_filename,
    state_filename,
    unit_filename,
    unit_ids,
)
from dispatch.segment_health.state import (
    MAX_STATE_LINE_BYTES,
    StateFormatError,
    StateTooLarge,
    decode_state,
    encode_state,
    is_excluded,
)

# The shape the NVRx state reader accepts (its first line, without the newline).
NVRX_COMPACT = re.compile(rb'\[(?:"[0-9]+"(?:,"[0-9]+")*)?\]')

task_ids = st.integers(min_value=0, max_value=10**10).map(str)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("123",), ("123", "123")),  # a regular job: its job id for both
        ((123,), ("123", "123")),
        (("130", "123", "7"), ("123", "7")),  # an array task: array job id, array task id
        ((130, 123, 0), ("123", "0")),
    ],
)
def test_unit_ids(args, expected):
    assert unit_ids(*args) == expected


@pytest.mark.parametrize(
    "args",
    [
        ("130", "123", None),  # one array id without the other names the wrong unit
        ("130", None, "7"),
        ("12a",),
        ("",),
        ("../1",),
        (-1,),
        (True,),
        ("130", "123", "state"),
        ("130", "1.2", "7"),
    ],
)
def test_unit_ids_refuse_what_is_not_a_slurm_id(args):
    with pytest.raises(InvalidUnitId):
        unit_ids(*args)


def test_names():
    assert unit_filename("123", "7") == "segment_health_check.123.7"
    assert state_filename("123") == "segment_health_check.123.state"
    assert lock_filename("123").startswith(".")  # never a name a consumer derives
    assert parse_unit_filename("segment_health_check.123.7") == ("123", "7")
    for name in (
        "segment_health_check.123.state",
        ".segment_health_check.123.7.abc.tmp",
        "segment_health_check.123",
        "segment_health_check.123.7.x",
        "xsegment_health_check.123.7",
    ):
        assert parse_unit_filename(name) is None


@pytest.mark.parametrize("directory", ["relative/dir", "", "./x", "dec"])
def test_directory_must_be_absolute(directory):
    with pytest.raises(DirectoryNotAbsolute) as info:
        absolute_directory(directory)
    assert repr(directory) in str(info.value)


@pytest.mark.parametrize(
    ("ids", "line"),
    [
        ([], b"[]\n"),
        (["7"], b'["7"]\n'),
        (["12", "7", "7"], b'["7","12"]\n'),  # deduplicated, numeric order
        (["100", "20", "3"], b'["3","20","100"]\n'),
    ],
)
def test_encode_state_table(ids, line):
    assert encode_state(ids) == line


@given(st.lists(task_ids, max_size=60))
def test_state_round_trips_in_the_nvrx_shape(ids):
    line = encode_state(ids)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert NVRX_COMPACT.fullmatch(line[:-1])
    assert len(line) <= MAX_STATE_LINE_BYTES
    assert json.loads(line) == sorted(set(ids), key=int)  # it is JSON too, strings in it
    assert decode_state(line) == sorted(set(ids), key=int)


@given(st.lists(task_ids, max_size=30), task_ids)
def test_exclusion_is_an_exact_token_match(ids, probe):
    line = encode_state(ids)
    assert is_excluded(line, probe) == (probe in ids)


def test_7_does_not_match_17():
    assert not is_excluded(encode_state(["17", "70"]), "7")


@given(st.integers(min_value=1, max_value=3000))
def test_size_limit_is_enforced_exactly(count):
    ids = [str(10**9 + i) for i in range(count)]  # 10 digits: 13 bytes per id with quotes+comma
    size = 2 + count * 12 + (count - 1) + 1
    if size <= MAX_STATE_LINE_BYTES:
        assert len(encode_state(ids)) == size
    else:
        with pytest.raises(StateTooLarge) as info:
            encode_state(ids, job_id="99")
        assert info.value.size == size and "99" in str(info.value)


def test_the_largest_line_that_fits_is_8_kib():
    # "[" + '"d...d"' + "]\n": 8192 bytes in all
    line = encode_state(["1" * (MAX_STATE_LINE_BYTES - 5)])
    assert len(line) == MAX_STATE_LINE_BYTES
    with pytest.raises(StateTooLarge):
        encode_state(["1" * (MAX_STATE_LINE_BYTES - 4)])


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b'["7"]',  # not newline-terminated: a torn write
        b'["7",',
        b'["7", "8"]\n',  # not compact
        b"[7]\n",  # not strings
        b'["7",]\n',
        b'["x"]\n',
        b"{}\n",
        b"[" + b'"1",' * 3000 + b'"1"]\n',  # over 8 KiB
    ],
)
def test_decode_state_refuses_incomplete_or_foreign_lines(data):
    with pytest.raises(StateFormatError):
        decode_state(data)


def test_decode_state_reads_only_the_first_line():
    assert decode_state(b'["7","12"]\nanything after\n') == ["7", "12"]
