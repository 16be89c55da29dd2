"""The backend contract suite (tests/integration/backends/contract.py) for Kubeflow: on the
stand-in API server here, on the real control plane in the k8s lane (scripts/test runs this
module there with DISPATCH_KUBECONFIG: see conftest.py's ``target``). Neither runs containers
(the testbed's nodes are KWOK's), so the logs check asks for the streams, not their words."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubeflow_support import KubeflowBackend, Target, make_backend
from tests.integration.backends.contract import CHECK_IDS, CHECKS, WORD, Harness, running

from dispatch.backends.base import Backend
from dispatch.core.spec import JobSpec


def unreachable_kubeconfig(path: Path, namespace: str) -> Path:
    """A kubeconfig naming an API server nobody listens on (port 1 of this machine)."""
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "gone",
        "clusters": [{"name": "gone", "cluster": {"server": "http://127.0.0.1:1"}}],
        "users": [{"name": "gone", "user": {"token": "none"}}],
        "contexts": [{"name": "gone", "context": {"cluster": "gone", "user": "gone",
                                                  "namespace": namespace}}]}))
    return path


@pytest.fixture
def harness(target: Target, tmp_path: Path) -> Iterator[Harness]:
    def fresh() -> Backend:
        if target.fake is not None:
            (tmp_path / "fresh").mkdir(exist_ok=True)
            return make_backend(target.fake, tmp_path / "fresh", target.clock)
        return KubeflowBackend(kubeconfig=os.environ["DISPATCH_KUBECONFIG"],
                               namespaces=[target.namespace], clock=target.clock)

    def unreachable() -> Backend:
        config = unreachable_kubeconfig(tmp_path / "gone-kubeconfig", target.namespace)
        return KubeflowBackend(kubeconfig=str(config), namespaces=[target.namespace],
                               clock=target.clock, retries=1, backoff_s=0.0, timeout_s=2.0)

    def spec(command: tuple[str, ...]) -> JobSpec:
        return JobSpec(name="contract", command=command, backend="kubeflow",
                       kubeflow={"namespace": target.namespace, "runtime": target.runtime})

    with running(Harness(name="kubeflow", backend=target.backend, fresh=fresh,
                         unreachable=unreachable, spec=spec,
                         long=("python", "-c", "import time; time.sleep(600)"),
                         short=("echo", WORD), runs_commands=False)) as h:
        yield h


@pytest.mark.parametrize("check", CHECKS, ids=CHECK_IDS)
def test_contract(harness: Harness, check: Callable[[Harness], None]) -> None:
    check(harness)
