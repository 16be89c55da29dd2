"""cli/fit.py: how ``ls``'s table fits a terminal (issue 36): ERROR is cut first, the
columns a person scans never below their floors, a column left out only when cutting to the
floors is not enough."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatch.cli.fit import FLOORS, fit, table_width

ROW = {"JOB": 10, "NAME": 31, "STATE": 9, "CAUSE": 22, "SUBMISSIONS": 11,
       "BUDGET USED": 11, "AGE": 3, "ERROR": 80}
SHORT = {"SUBMISSIONS": 4, "BUDGET USED": 6}


def test_a_table_that_fits_is_left_whole() -> None:
    assert fit(ROW, 1000, SHORT) == ROW


def test_error_is_cut_first() -> None:
    got = fit(ROW, 150, SHORT)
    assert table_width(got) == 150
    assert {k: got[k] for k in ("JOB", "NAME", "STATE", "CAUSE")} == {
        "JOB": 10, "NAME": 31, "STATE": 9, "CAUSE": 22}
    assert got["ERROR"] < ROW["ERROR"] and got["SUBMISSIONS"] == 4


def test_at_80_columns_budget_is_left_out_and_the_rest_keep_their_floors() -> None:
    got = fit(ROW, 80, SHORT)
    assert "BUDGET USED" not in got and table_width(got) <= 80
    assert got["JOB"] == 10 and got["STATE"] == 9
    assert got["NAME"] >= FLOORS["NAME"] and got["CAUSE"] >= FLOORS["CAUSE"]
    assert got["ERROR"] >= FLOORS["ERROR"]


def test_a_narrow_cell_is_never_widened_to_its_floor() -> None:
    narrow = {**ROW, "NAME": 2, "CAUSE": 4}
    got = fit(narrow, 90, SHORT)
    assert got["NAME"] == 2 and got["CAUSE"] == 4


@given(st.dictionaries(st.sampled_from(list(ROW)), st.integers(1, 200), min_size=8),
       st.integers(40, 300))
def test_id_state_age_are_never_cut_and_floors_hold(natural: dict[str, int],
                                                   width: int) -> None:
    natural = {k: natural[k] for k in ROW}  # the table's order
    got = fit(natural, width, {"SUBMISSIONS": min(4, natural["SUBMISSIONS"])})
    for col in ("JOB", "STATE", "AGE"):
        assert got[col] == natural[col]
    for col, floor in FLOORS.items():
        if col in got:
            assert got[col] >= min(floor, natural[col])
    assert list(got) == [k for k in natural if k in got]
