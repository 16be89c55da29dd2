"""Shared pieces of the kubeflow backend's integration tests (a unique module name, so it
never collides with another folder's conftest)."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dispatch.backends.kubeflow import KubeflowBackend  # noqa: E402
from kube_fake import FakeApiServer  # noqa: E402


@dataclass
class Clock:
    now: datetime = field(default_factory=lambda: datetime(2026, 3, 1, 10, 6, tzinfo=UTC))

    def __call__(self) -> datetime:
        return self.now


@dataclass
class Target:
    backend: KubeflowBackend
    namespace: str
    runtime: str
    real: bool
    fake: FakeApiServer | None
    clock: Clock


def make_backend(
    fake: FakeApiServer, tmp_path: Path, clock: Clock, **kw: object
) -> KubeflowBackend:
    kubeconfig = fake.write_kubeconfig(tmp_path / "kubeconfig", namespace="team")
    options: dict[str, object] = {"retries": 1, "backoff_s": 0.0, "timeout_s": 2.0}
    options.update(kw)
    return KubeflowBackend(kubeconfig=str(kubeconfig), clock=clock, **options)  # type: ignore[arg-type]
