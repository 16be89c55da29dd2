"""The Slurm integration suite runs against the real testbed (scripts/slurm-testbed up).

A missing testbed is a FAILURE, not a skip: skipped tests are not coverage. Set
DISPATCH_SKIP_SLURM=1 to deselect the slurm-marked tests instead (say so in what you report).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator

import pytest
from slurm_helpers import SKIP_ENV, TESTBED, Cluster, testbed_problem


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(SKIP_ENV) != "1":
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("slurm") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


@pytest.fixture(scope="session")
def testbed() -> None:
    problem = testbed_problem()
    if problem is not None:
        pytest.fail(f"the Slurm testbed is not up ({problem}). Start it with "
                    f"`sudo {TESTBED} up`, or set {SKIP_ENV}=1 to deselect the Slurm tests.",
                    pytrace=False)


@pytest.fixture
def cluster(testbed: None, tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    out = tmp_path_factory.mktemp("slurm-out")
    out.chmod(0o777)
    c = Cluster(out, request.node.name.replace("[", "-").replace("]", ""))
    yield c
    if c.refs:
        subprocess.run(["scancel", *c.refs], capture_output=True, timeout=30, check=False)
