"""The Slurm integration suite runs against the real testbed (scripts/slurm-testbed up).

A missing testbed is a FAILURE, not a skip: skipped tests are not coverage. Set
DISPATCH_SKIP_SLURM=1 to deselect the slurm-marked tests instead (say so in what you report).

The suite runs against the Slurm whose tools are on PATH: the 22.05 testbed on the host, or
the 24.11 one through ``scripts/slurm-testbed exec --version 24.11 python -m pytest ...``
(scripts/test runs it against every version in DISPATCH_SLURM_VERSIONS). DISPATCH_SLURM_VERSION
names the version the run is meant for (exec sets it); the ``slurm_version`` fixture fails
when the tools on PATH are another release.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from slurm_helpers import SKIP_ENV, TESTBED, Cluster, slurm_release, testbed_problem
from tests.e2e.conftest import Dispatch

VERSION_ENV = "DISPATCH_SLURM_VERSION"


def pytest_report_header(config: pytest.Config) -> str:
    return f"slurm: {os.environ.get(VERSION_ENV, '22.05')} wanted, tools say {slurm_release()}"


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


@pytest.fixture(scope="session")
def slurm_version(testbed: None) -> str:
    """The Slurm major version under test ("22.05", "24.11"): what the tools on PATH say,
    and what DISPATCH_SLURM_VERSION asked for (a mismatch is a failure, not a silent run
    against the wrong cluster)."""
    wanted = os.environ.get(VERSION_ENV, "22.05")
    release = slurm_release()
    if not release.startswith(wanted + "."):
        pytest.fail(f"{VERSION_ENV}={wanted} but the Slurm tools on PATH are {release}",
                    pytrace=False)
    return wanted


@pytest.fixture
def cluster(slurm_version: str, tmp_path_factory: pytest.TempPathFactory,
            request: pytest.FixtureRequest) -> Iterator[Cluster]:
    out = tmp_path_factory.mktemp("slurm-out")
    out.chmod(0o777)
    c = Cluster(out, request.node.name.replace("[", "-").replace("]", ""))
    yield c
    if c.refs:
        subprocess.run(["scancel", *c.refs], capture_output=True, timeout=30, check=False)


@pytest.fixture
def cli(slurm_version: str, tmp_path: Path) -> Iterator[Dispatch]:
    """The dispatch CLI on a record of its own; the Slurm jobs of every spec the test wrote
    are cancelled after it (a failed test must not leave nodes busy for the next)."""
    tmp_path.chmod(0o777)  # the testbed's jobs run as another user and write here
    d = Dispatch(tmp_path)
    try:
        yield d
    finally:
        d.close()
        for name in [p.stem for p in tmp_path.glob("*.yaml")]:
            done = d("status", name, "--json")
            refs = json.loads(done.stdout).get("objects", []) if done.returncode == 0 else []
            if refs:
                subprocess.run(["scancel", *refs], capture_output=True, timeout=30,
                               check=False)
