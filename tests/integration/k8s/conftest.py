"""The suites that run against the real Kubernetes control plane (scripts/k8s-testbed up).

A missing testbed is a FAILURE, not a skip: skipped tests are not coverage. scripts/test
brings the testbed up and runs this folder in its Kubeflow lane with the exports of
`scripts/k8s-testbed env` (DISPATCH_KUBECONFIG: a least-privilege identity, not admin).
"""

from __future__ import annotations

import os

import pytest
from k8s_helpers import testbed_problem


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
