"""The list's query parameters and cursors: pure functions."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from dispatch.backends.registry import names
from dispatch.core.model import CauseKind, State
from dispatch.service.listing import (
    BadParameter,
    ListRequest,
    decode_cursor,
    encode_cursor,
    parse_list_request,
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
