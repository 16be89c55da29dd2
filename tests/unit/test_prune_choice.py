"""stores/prune.py's choice: whole supersede chains, every job finished and old enough."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dispatch.stores.prune import ChainRow, chosen


def row(job_id: str, us: int, terminal: bool = True, supersedes: str | None = None
        ) -> ChainRow:
    return ChainRow(job_id, supersedes, terminal, us)


def test_old_finished_jobs_only() -> None:
    rows = [row("a", 1), row("b", 2, terminal=False), row("c", 9)]
    assert chosen(rows, 5) == ["a"]


def test_a_chain_with_one_keeper_is_kept_whole() -> None:
    rows = [row("a", 1), row("b", 2, supersedes="a"), row("c", 3, False, supersedes="b")]
    assert chosen(rows, 5) == []
    assert chosen([*rows[:2], row("c", 3, supersedes="b")], 5) == ["a", "b", "c"]
    assert chosen([*rows[:2], row("c", 7, supersedes="b")], 5) == []


def test_a_predecessor_already_gone_starts_the_chain() -> None:
    assert chosen([row("b", 2, supersedes="gone")], 5) == ["b"]


@given(st.lists(st.tuples(st.integers(0, 9), st.booleans(), st.integers(-1, 5)),
                max_size=6), st.integers(0, 10))
def test_no_kept_job_names_a_pruned_one(spec: list[tuple[int, bool, int]], cut: int) -> None:
    rows: list[ChainRow] = []
    taken: set[str] = set()  # one successor per job, as the store enforces
    for i, (us, term, p) in enumerate(spec):
        before = f"j{p}" if 0 <= p < i and f"j{p}" not in taken else None
        if before is not None:
            taken.add(before)
        rows.append(row(f"j{i}", us, term, before))
    gone = set(chosen(rows, cut))
    for r in rows:
        if r.job_id in gone:
            assert r.terminal and r.created_us < cut
        elif r.supersedes is not None:
            assert r.supersedes not in gone
    for r in rows:
        if r.supersedes in gone:
            assert r.job_id in gone
