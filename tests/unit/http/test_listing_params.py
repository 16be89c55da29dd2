"""The list's query parameters, cursors and the timeline's durations: pure functions."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dispatch.core.model import CauseKind, State
from dispatch.http.timeline import durations
from dispatch.service.listing import (
    BadParameter,
    ListRequest,
    decode_cursor,
    encode_cursor,
    parse_list_request,
    shown_cause,
)

BACKENDS = ("local", "slurm", "kubeflow")


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


@pytest.mark.parametrize(("params", "name", "says"), [
    ({"limit": "0"}, "limit", "1 to 500"), ({"limit": "x"}, "limit", "1 to 500"),
    ({"order": "size"}, "order", "created, name, backend, job, state"),
    ({"state": "runing"}, "state", "pending, held"),
    ({"cause": "preemted"}, "cause", "preempted"),
    ({"backend": "pbs"}, "backend", "local, slurm, kubeflow"),
    ({"after": "!!"}, "after", "cursor"),
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


def test_the_list_shows_the_cause_a_job_recovered_from() -> None:
    assert shown_cause({"cause": {"kind": "preempted"}}) == "preempted"
    assert shown_cause({"cause": None, "history": [
        {"cause": {"kind": "node-lost"}}, {"cause": None}]}) == "node-lost"
    assert shown_cause({"cause": None, "history": []}) == ""


def _iso(t0: datetime, s: float) -> str:
    return (t0 + timedelta(seconds=s)).isoformat()


def test_durations_split_the_life_of_a_recovered_and_held_job() -> None:
    t0 = datetime(2026, 12, 1, tzinfo=UTC)
    tl = {
        "start": _iso(t0, 0), "end": _iso(t0, 100),
        "holds": [{"start": _iso(t0, 40), "end": _iso(t0, 60)}],
        "submissions": [
            {"intended_at": _iso(t0, 0), "bound_at": _iso(t0, 5), "end": _iso(t0, 30)},
            {"intended_at": _iso(t0, 30), "bound_at": _iso(t0, 70), "end": _iso(t0, 100)},
        ],
    }
    # queued 0-5; running 5-30 and 70-100; recovering 30-70 less the hold 40-60
    assert durations(tl) == {"queued": 5.0, "running": 55.0, "recovering": 20.0,
                             "held": 20.0, "total": 100.0}
