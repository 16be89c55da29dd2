"""Fixtures for the kubeflow backend's tests: the stand-in API server, or a real cluster.

DISPATCH_KUBECONFIG unset (the default, and CI): ``target`` is the stand-in (tests/kube_fake).
DISPATCH_KUBECONFIG=/path/to/kubeconfig: ``target`` is that cluster (with Kubeflow Trainer
installed), namespace $DISPATCH_K8S_NAMESPACE (default "default"), runtime
$DISPATCH_K8S_RUNTIME (default "torch-distributed"). Scenarios that need a controller to write
a particular status (OOMKilled, preemption, a lost node) can only be staged on the stand-in and
always run there.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubeflow_support import Clock, FakeApiServer, KubeflowBackend, Target, make_backend


@pytest.fixture
def fake() -> Iterator[FakeApiServer]:
    server = FakeApiServer().start()
    try:
        yield server
    finally:
        server.stop()
    assert server.violations == [], "schema violations: " + "; ".join(server.violations)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def backend(fake: FakeApiServer, tmp_path: Path, clock: Clock) -> Iterator[KubeflowBackend]:
    b = make_backend(fake, tmp_path, clock)
    yield b
    b.close()


@pytest.fixture
def target(tmp_path: Path, clock: Clock) -> Iterator[Target]:
    real = os.environ.get("DISPATCH_KUBECONFIG")
    if real:
        namespace = os.environ.get("DISPATCH_K8S_NAMESPACE", "default")
        b = KubeflowBackend(kubeconfig=real, namespaces=[namespace], clock=clock)
        try:
            yield Target(
                b,
                namespace,
                os.environ.get("DISPATCH_K8S_RUNTIME", "torch-distributed"),
                True,
                None,
                clock,
            )
        finally:
            b.close()
        return
    server = FakeApiServer().start()
    b = make_backend(server, tmp_path, clock)
    try:
        yield Target(b, "team", "torch-distributed", False, server, clock)
    finally:
        b.close()
        server.stop()
    assert server.violations == [], "schema violations: " + "; ".join(server.violations)
