"""The backend contract suite (tests/integration/backends/contract.py) for Slurm, on the real
testbed of each version's lane (scripts/test runs tests/integration/slurm against every
version in DISPATCH_SLURM_VERSIONS)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta

import pytest
from slurm_helpers import Cluster
from tests.integration.backends.contract import CHECK_IDS, CHECKS, WORD, Harness, running

from dispatch.backends.base import Backend
from dispatch.backends.slurm.backend import SlurmBackend
from dispatch.backends.slurm.tools import Result, run_tool
from dispatch.core.spec import JobSpec

pytestmark = pytest.mark.slurm


def cut_off(argv: Sequence[str], timeout: float) -> Result:
    """The real tools, pointed at a configuration that is not there: they cannot ask any
    controller (as on a machine whose slurm.conf is gone, or not mounted)."""
    return run_tool(["env", "SLURM_CONF=/nonexistent/slurm.conf", *argv], timeout)


@pytest.fixture
def harness(cluster: Cluster) -> Iterator[Harness]:
    def unreachable() -> Backend:
        return SlurmBackend(node_loss_window=timedelta(seconds=30),
                            output_dir=cluster.out_dir, runner=cut_off)

    def spec(command: tuple[str, ...]) -> JobSpec:
        return JobSpec(name="contract", command=command, backend="slurm")

    with running(Harness(name="slurm", backend=cluster.backend, fresh=cluster.new_backend,
                         unreachable=unreachable, spec=spec, long=("sleep", "300"),
                         short=("echo", WORD))) as h:
        yield h


@pytest.mark.parametrize("check", CHECKS, ids=CHECK_IDS)
def test_contract(harness: Harness, check: Callable[[Harness], None]) -> None:
    check(harness)
