"""The suites that run against the real Kubernetes control plane (scripts/k8s-testbed up).

A missing testbed is a FAILURE, not a skip: skipped tests are not coverage. scripts/test
brings the testbed up and runs this folder in its Kubeflow lane with the exports of
`scripts/k8s-testbed env` (DISPATCH_KUBECONFIG: a least-privilege identity, not admin).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from k8s_helpers import kubectl, testbed_problem
from real_nodes import real_runtime, real_shared  # noqa: F401  (fixtures for this folder)
from tests.e2e.conftest import Dispatch


@pytest.fixture(scope="session", autouse=True)
def testbed() -> None:
    problem = testbed_problem()
    if problem is not None:
        pytest.fail(f"the Kubernetes testbed is not up ({problem}). Start it with "
                    "`sudo scripts/k8s-testbed up` and export what `scripts/k8s-testbed env` "
                    "prints.", pytrace=False)


@pytest.fixture
def namespace() -> str:
    return os.environ.get("DISPATCH_K8S_NAMESPACE", "dispatch")


@pytest.fixture
def cli(tmp_path: Path, namespace: str) -> Iterator[Dispatch]:
    """The real CLI with a record of its own; what its jobs left on the cluster is deleted
    (every job of the record: those of a spec file, of the API, of dispatch.Executor)."""
    d = Dispatch(tmp_path)
    d.env["DISPATCH_KUBEFLOW_NODE_LOSS_WINDOW"] = "90s"
    try:
        yield d
    finally:
        d.close()
        done = d("ls", "--all", "--json")
        rows = json.loads(done.stdout) if done.returncode == 0 else []
        for row in rows if isinstance(rows, list) else rows.get("jobs", []):
            for ref in row.get("objects", []):
                kubectl("delete", "trainjob", ref.split("/")[-1], "-n", namespace,
                        "--wait=false", check=False)
