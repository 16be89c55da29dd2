"""The list's query parameters and cursors: pure functions."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from dispatch.backends.registry import names
from dispatch.core.model import CauseKind, State
from dispatch.service.listing import (
    COLUMNS,
    MOST,
    BadParameter,
    Column,
    ListRequest,
    decode_cursor,
    encode_cursor,
    parse_list_request,
    whole_number,
)

BACKENDS = names()  # as routes_jobs.py passes them


def test_no_parameters_is_newest_first_fifty() -> None:
    assert parse_list_request({}, BACKENDS) == ListRequest(order="created", descending=True,
                                                            limit=50)


def test_parameters_are_read() -> None:
    req = parse_list_request({"order": "name", "limit": "7", "state": "held",
                              "cause": "node-lost", "backend": "slurm", "q": " ab "}, BACKENDS)
    assert (req.order, req.descending, req.limit, req.state, req.cause, req.backend,
            req.search) == ("name", False, 7, State.HELD, CauseKind.NODE_LOST, "slurm", "ab")
    assert parse_list_request({"order": "-submissions"}, BACKENDS).descending
    assert parse_list_request({"state": "live"}, BACKENDS).live_only
    since = parse_list_request({"since": "2026-12-01"}, BACKENDS).since_us
    assert since == int(datetime(2026, 12, 1, tzinfo=UTC).timestamp()) * 1_000_000


@pytest.mark.parametrize(("params", "name", "says"), [
    ({"limit": "0"}, "limit", "1 to 500"), ({"limit": "x"}, "limit", "1 to 500"),
    ({"order": "size"}, "order", "created, name, backend, job, state"),
    ({"state": "runing"}, "state", "pending, held"),
    ({"cause": "preemted"}, "cause", "preempted"),
    ({"backend": "pbs"}, "backend", ", ".join(BACKENDS)),
    ({"after": "!!"}, "after", "cursor"),
    ({"since": "yesterday"}, "since", "ISO 8601"),
])
def test_a_bad_parameter_names_itself_and_the_valid_values(
        params: dict[str, str], name: str, says: str) -> None:
    with pytest.raises(BadParameter) as err:
        parse_list_request(params, BACKENDS)
    assert err.value.parameter == name and f"'{name}'" in str(err.value)
    assert says in str(err.value) and err.value.exit_code == 2


def test_a_cursor_round_trips_only_in_its_own_order() -> None:
    key = ("train", 1_700_000_000_000_000, "abc123")
    text = encode_cursor("name", False, key)
    assert decode_cursor(text, "name", False) == key
    with pytest.raises(BadParameter):
        decode_cursor(text, "name", True)
    with pytest.raises(BadParameter):
        decode_cursor(text, "created", False)


def _crafted(doc: object) -> str:
    return base64.urlsafe_b64encode(json.dumps(doc).encode()).decode().rstrip("=")


# Crafted cursors (issue 45 item 5): each gave a 500 and a traceback in serve's log (the
# store refused an integer past 64 bits or a lone surrogate, sorted() compared str and int,
# int() refused 4,300 digits, json recursed past the stack).
CRAFTED = {
    "huge int": ("created", _crafted(["created", True, 10**30, "abc"])),
    "negative": ("created", _crafted(["created", True, -1, "abc"])),
    "4400 digits": ("created", base64.urlsafe_b64encode(
        b'["created",true,' + b"9" * 4400 + b',"a"]').decode()),
    "short": ("name", _crafted(["name", False, "train"])),
    "long": ("created", _crafted(["created", True, 1, "abc", "x"])),
    "no key": ("created", _crafted(["created", True])),
    "mixed": ("submissions", _crafted(["submissions", True, "x", 1, "abc"])),
    "swapped": ("name", _crafted(["name", False, 1, "train", "abc"])),
    "float": ("created", _crafted(["created", True, 1.5, "abc"])),
    "bool": ("created", _crafted(["created", True, True, "abc"])),
    "null": ("state", _crafted(["state", True, None, 1, "abc"])),
    "list": ("cause", _crafted(["cause", True, ["x"], 1, "abc"])),
    "surrogate": ("created", base64.urlsafe_b64encode(
        b'["created",true,1,"\\udce9"]').decode()),
    "deep": ("created", base64.urlsafe_b64encode(b"[" * 100_000).decode()),
    "not base64": ("created", "\u0667\u0667"),
    "not a list": ("created", _crafted({"created": 1})),
}


@pytest.mark.parametrize(("order", "text"), CRAFTED.values(), ids=CRAFTED.keys())
def test_a_crafted_cursor_is_a_bad_after(order: Column, text: str) -> None:
    with pytest.raises(BadParameter) as err:
        decode_cursor(text, order, order != "name")
    assert err.value.parameter == "after" and err.value.exit_code == 2


@pytest.mark.parametrize("order", COLUMNS)
def test_every_orders_cursor_round_trips(order: Column) -> None:
    first: dict[str, str | int] = {"name": "train", "backend": "local", "job": "abc",
                                   "state": "held", "cause": "preempted", "submissions": 3,
                                   "ended": 1_700_000_000_000_001, "duration": 30_000_000}
    key = ((first[order],) if order in first else ()) + (1_700_000_000_000_000, "abc")
    assert decode_cursor(encode_cursor(order, True, key), order, True) == key


@pytest.mark.parametrize(("name", "raw"), [
    ("limit", "9" * 4400), ("limit", "\u0667"), ("limit", "\u00b2"), ("limit", "-1"),
    ("limit", "501"), ("limit", ""), ("limit", "1e3"), ("limit", " 5")],
    ids=["4400 digits", "arabic-indic", "superscript", "-1", "501", "empty", "1e3", "space"])
def test_a_bad_limit_names_itself(name: str, raw: str) -> None:
    with pytest.raises(BadParameter) as err:
        parse_list_request({name: raw}, BACKENDS)
    assert err.value.parameter == name and len(str(err.value)) < 300


@pytest.mark.parametrize(("raw", "least", "most"), [
    ("9" * 4400, 0, MOST), ("9" * 19, 0, MOST), (str(2**63), 0, MOST), ("0", 1, MOST),
    ("91", 1, 90), ("\u0667", 0, 90), ("\u00b2", 0, 90), ("+1", 0, 90), ("", 0, 90)],
    ids=["4400 digits", "19 nines", "2**63", "0", "91", "arabic-indic", "superscript", "+1",
         "empty"])
def test_a_whole_number_parameter_is_bounded(raw: str, least: int, most: int) -> None:
    with pytest.raises(BadParameter) as err:
        whole_number("tail", raw, least, most)
    assert err.value.parameter == "tail" and "'tail'" in str(err.value)


def test_a_whole_number_parameter_at_its_bounds() -> None:
    assert whole_number("days", "1", 1, 90) == 1 and whole_number("days", "090", 1, 90) == 90
    assert whole_number("tail", str(MOST), 0) == MOST
