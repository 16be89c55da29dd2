"""Issue 48 item 3: a name pattern (support/name_glob.py) means the same in the jobs table of
both stores (SQLite's GLOB, PostgreSQL's regular expressions) as ``fnmatchcase`` says."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from dispatch.core.events import JobCreated
from dispatch.core.policy import Declarations
from dispatch.core.spec import JobSpec
from dispatch.stores.base import RecordStore
from dispatch.stores.query import JobQuery
from dispatch.support.name_glob import glob_matches

T0 = datetime(2026, 1, 1, tzinfo=UTC)
NAMES = ["sweep-1", "sweep-2", "sweep-9", "sweep-10", "sweep-11", "Sweep-3", "sweep",
         "eval", "a.b", "a+b", "x[1]", "x1", "50%_done", "50x-done", "tab\there", "ümlaut-7",
         "back\\slash", "caret^", "sweep-1-retry"]
PATTERNS = ["sweep-*", "sweep-1*", "sweep-?", "sweep-[0-9]", "sweep-[!1]", "sweep-[!0-9]*",
            "sweep", "*", "?", "a.b", "a?b", "x[1]", "x[[]1]", "50%_done", "50?_done",
            "*%*", "*_*", "*\t*", "ü*", "[sS]weep-3", "back\\slash", "*^", "[]x]*",
            "sweep-1[", "*-[12]", "[!s]*", "*.*", "**", "sweep-1-*", "S*"]


@pytest.fixture
def fleet(store: RecordStore) -> RecordStore:
    store.create_many([
        JobCreated(seq=1, at=T0 + timedelta(seconds=i), job_id=f"j{i:02d}",
                   spec=JobSpec(name=name, command=("true",), backend="local"),
                   declarations=Declarations(backend="local"))
        for i, name in enumerate(NAMES)])
    return store


def test_each_pattern_means_what_fnmatchcase_says(fleet: RecordStore) -> None:
    for pattern in PATTERNS:
        got = [r.name for r in fleet.query_jobs(JobQuery(name_glob=pattern))]
        assert got == [n for n in NAMES if glob_matches(pattern, n)], pattern
