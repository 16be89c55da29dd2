"""How ``ls``'s table fits a terminal (issues 36, 48): the columns a person scans (the job's
id, name, state) keep a readable width, and the "why" (the cause, with its exit code, and the
application's error) keeps as much as the terminal allows. Pure: natural widths in, chosen
widths out; render.py lays the table out with them.

When the natural widths do not fit, the columns of least value are left out first, whole,
while the table is too wide: BUDGET USED, AGE, SUBMISSIONS (all three are in ``dispatch
status``). Only then are columns cut, in this order, each no lower than its floor: NAME,
ERROR, CAUSE; if that is still too wide, ERROR is left out (whole in ``dispatch status``).
A cut table heads SUBMISSIONS as SUBS and BUDGET USED as BUDGET. The id, the state and the
forecast are never cut, nor left out: an id that is cut cannot be pasted into the next
command; a column that is shown is cut or whole, never both for a reason of less value.
"""

from __future__ import annotations

from collections.abc import Mapping

GAP = 2  # Rich's padding between two columns of a box-less table (one each side)

# The narrowest a cut column may get (a cell narrower than its floor is never widened).
FLOORS: dict[str, int] = {"ERROR": 12, "NAME": 16, "CAUSE": 14}
# Left out whole, in this order, before anything is cut (issue 48: the "why" was cut first).
DROPPED_FIRST = ("BUDGET USED", "AGE", "SUBMISSIONS")
CUT_ORDER = ("NAME", "ERROR", "CAUSE")
LEFT_OUT_LAST = ("ERROR",)
SHORT_HEADERS = {"SUBMISSIONS": "SUBS", "BUDGET USED": "BUDGET"}


def table_width(widths: Mapping[str, int]) -> int:
    return sum(widths.values()) + GAP * max(len(widths) - 1, 0)


def fit(natural: Mapping[str, int], width: int,
        short: Mapping[str, int] | None = None) -> dict[str, int]:
    """The width of each column shown, in ``natural``'s order; a column left out is absent.
    ``natural``: each column's widest cell (its header included); ``short``: the natural
    width of a column under its short header (SHORT_HEADERS), used once the table is cut."""
    if table_width(natural) <= width:
        return dict(natural)
    chosen = {k: (short or {}).get(k, v) for k, v in natural.items()}
    for dropped in DROPPED_FIRST:
        if table_width(chosen) <= width:
            return chosen
        chosen.pop(dropped, None)
    for left_out in (None, *LEFT_OUT_LAST):
        if left_out is not None:
            chosen.pop(left_out, None)
        cut = _cut(chosen, width)
        if table_width(cut) <= width:
            return cut
    return cut


def _cut(widths: dict[str, int], width: int) -> dict[str, int]:
    out = dict(widths)
    excess = table_width(out) - width
    for col in CUT_ORDER:
        if excess <= 0:
            break
        if col not in out:
            continue
        room = max(out[col] - FLOORS[col], 0)
        take = min(room, excess)
        out[col] -= take
        excess -= take
    return out
