"""cli/fit.py: how ``ls``'s table fits a terminal (issues 36, 48): budget, age and
submissions are left out before the "why" (cause, error) is cut, the columns a person scans
never below their floors, the id and the state never cut."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatch.cli.fit import DROPPED_FIRST, FLOORS, fit, table_width

ROW = {"JOB": 10, "NAME": 31, "STATE": 9, "CAUSE": 22, "SUBMISSIONS": 11,
       "BUDGET USED": 11, "AGE": 3, "ERROR": 80}
SHORT = {"SUBMISSIONS": 4, "BUDGET USED": 6}


def test_a_table_that_fits_is_left_whole() -> None:
    assert fit(ROW, 1000, SHORT) == ROW


def test_budget_is_left_out_before_anything_is_cut() -> None:
    got = fit(ROW, 173, SHORT)
    assert "BUDGET USED" not in got and table_width(got) <= 173
    assert {k: got[k] for k in ("JOB", "NAME", "STATE", "CAUSE", "AGE", "ERROR")} == {
        "JOB": 10, "NAME": 31, "STATE": 9, "CAUSE": 22, "AGE": 3, "ERROR": 80}
    assert got["SUBMISSIONS"] == 4


def test_at_80_columns_age_and_submissions_go_before_the_cause_is_cut() -> None:
    # issue 48: the cause kept "non-zero-exit (…" and the error 12 characters while the
    # age and the submissions were shown whole
    got = fit(ROW, 80, SHORT)
    assert table_width(got) <= 80
    assert not set(DROPPED_FIRST) & set(got)
    assert got["JOB"] == 10 and got["STATE"] == 9 and got["CAUSE"] == 22
    assert got["NAME"] == FLOORS["NAME"] and got["ERROR"] > FLOORS["ERROR"]


def test_a_narrow_cell_is_never_widened_to_its_floor() -> None:
    narrow = {**ROW, "NAME": 2, "CAUSE": 4}
    got = fit(narrow, 90, SHORT)
    assert got["NAME"] == 2 and got["CAUSE"] == 4


@given(st.dictionaries(st.sampled_from(list(ROW)), st.integers(1, 200), min_size=8),
       st.integers(40, 300))
def test_id_and_state_are_never_cut_and_the_why_is_cut_last(natural: dict[str, int],
                                                            width: int) -> None:
    natural = {k: natural[k] for k in ROW}  # the table's order
    short = {"SUBMISSIONS": min(4, natural["SUBMISSIONS"])}
    got = fit(natural, width, short)
    for col in ("JOB", "STATE"):
        assert got[col] == natural[col]
    for col in ("AGE", "SUBMISSIONS", "BUDGET USED"):  # whole or left out, never cut
        assert col not in got or got[col] in (natural[col], short.get(col))
    for col, floor in FLOORS.items():
        if col in got:
            assert got[col] >= min(floor, natural[col])
    if any(col in got and got[col] < natural[col] for col in ("CAUSE", "ERROR")):
        assert not set(DROPPED_FIRST) & set(got)  # the "why" is cut only once they are gone
    assert list(got) == [k for k in natural if k in got]
