"""A look's index of objects by job (Discovery.of_job), built once a tick over every object
(issue 49: inlined for speed), groups exactly the objects whose token parse_token reads as
that job's, in the look's order; an object with no token, or one not of ours, is no job's."""

from __future__ import annotations

from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from dispatch.core.model import Cause, CauseKind, Discovery, ObjectReport, State, parse_token

TOKENS = st.one_of(
    st.none(),
    st.builds(lambda j, n: f"{j}.{n}", st.sampled_from(["a", "b", "a.b", "", "x.1"]),
              st.sampled_from(["1", "2", "10", "", "x", "1a", "²"])),
    st.text(alphabet="ab.12", max_size=6))


@given(st.lists(TOKENS, max_size=12))
def test_of_job_groups_what_parse_token_reads(tokens: list[str | None]) -> None:
    objects = tuple(ObjectReport(ref=f"r{i}", token=t, state=State.RUNNING,
                                 cause=Cause(kind=CauseKind.NONE))
                    for i, t in enumerate(tokens))
    look = Discovery(at=datetime(2026, 1, 1, tzinfo=UTC), objects=objects)
    want: dict[str, list[ObjectReport]] = {}
    for o in objects:
        parsed = parse_token(o.token) if o.token is not None else None
        if parsed is not None:
            want.setdefault(parsed[0], []).append(o)
    assert look.index() == {j: tuple(os) for j, os in want.items()}
    for j, os in want.items():
        assert look.of_job(j) == tuple(os)
    assert look.of_job("no-such-job") == ()
