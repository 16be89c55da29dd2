"""Issue 45 item 15: setting up a brand-new store is idempotent and serialised. Eight
processes opening one new database at the same moment (as ``supervise`` and ``submit``
started together do) all get the same usable store: none is refused, the schema is made
once. On SQLite and on a throwaway PostgreSQL, over many brand-new databases.

The openers are real processes (tests/integration/stores/opener_child.py), started once and
all waiting on a read: each round's URL reaches them at once. Before the fix, PostgreSQL
refused an opener in most rounds ("there is no schema table but there are tables"): the
one that waited on the setup lock re-checked the schema table through its session's
catalog cache, which still said "absent" from its look before the lock.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tests.conftest_pg import ThrowawayPostgres
from tests.conftest_pg import postgres_cluster as postgres_cluster  # noqa: F401  (fixture)
from tests.integration.stores.helpers import ROOT, Backdoor, child_env
from tests.integration.stores.test_contract import created

from dispatch.stores.base import SCHEMA_VERSION
from dispatch.stores.select import open_store

OPENERS = 8
ROUNDS = 12
CHILD = Path(__file__).with_name("opener_child.py")


@pytest.fixture
def openers() -> Iterator[list[subprocess.Popen[str]]]:
    children = [subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 env=child_env(), cwd=ROOT) for _ in range(OPENERS)]
    try:
        for c in children:  # imported and waiting on stdin
            assert c.stdout is not None
            line = c.stdout.readline().strip()
            assert line == "ready", (line, c.stderr.read() if c.stderr else "")
        yield children
    finally:
        for c in children:
            if c.stdin is not None:
                c.stdin.close()
        for c in children:
            try:
                c.wait(timeout=60)
            except subprocess.TimeoutExpired:
                c.kill()
                c.wait()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def new_database(request: pytest.FixtureRequest, tmp_path: Path) -> Callable[[int], str]:
    """A URL to a brand-new database for each round (SQLite: a file not made yet)."""
    if request.param == "sqlite":
        return lambda r: f"sqlite://{tmp_path / f'round-{r}.sqlite3'}"
    cluster: ThrowawayPostgres = request.getfixturevalue("postgres_cluster")
    return lambda _r: cluster.new_database()


def test_openers_starting_together_on_a_new_database_all_get_one_store(
        openers: list[subprocess.Popen[str]], new_database: Callable[[int], str]) -> None:
    refused: list[str] = []
    for r in range(ROUNDS):
        url = new_database(r)
        for c in openers:  # each child is blocked on its read: they all go now
            assert c.stdin is not None
            c.stdin.write(url + "\n")
            c.stdin.flush()
        answers = []
        for c in openers:
            assert c.stdout is not None
            answers.append(c.stdout.readline().strip())
        assert all(answers), f"round {r}: an opener died: {answers}"
        refused += [f"round {r}: {a}" for a in answers if a != "ok"]
        # Made once, whole, and usable by the next process.
        assert Backdoor(url).schema_version() == SCHEMA_VERSION  # one row: made once
        with open_store(url) as store:
            store.create(created(f"after-{r}"))
            assert [row.job_id for row in store.list_jobs()] == [f"after-{r}"]
    assert not refused, f"{len(refused)} of {ROUNDS * OPENERS} openers refused, the first:\n" \
        + "\n".join(refused[:5])
