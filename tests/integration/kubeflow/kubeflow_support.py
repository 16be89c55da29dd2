"""Shared pieces of the kubeflow backend's integration tests (a unique module name, so it
never collides with another folder's conftest)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from dispatch.backends.kubeflow import KubeflowBackend  # noqa: E402
from dispatch.backends.kubeflow.informer import InformerSettings  # noqa: E402
from dispatch.core.model import Discovery  # noqa: E402
from kube_fake import FakeApiServer  # noqa: E402

SETTLE_BOUND_S = 10.0  # a bound on waiting for watch events, never a timing assertion


def caught_up(backend: KubeflowBackend, fake: FakeApiServer) -> bool:
    """Wait (bounded) until every collection the backend watches has seen the stand-in's newest
    resourceVersion (an event or a bookmark); False if the bound passed first."""
    informer = backend._informer
    if informer is None:
        return True
    target = fake.resource_version
    deadline = time.monotonic() + SETTLE_BOUND_S
    while time.monotonic() < deadline:
        if all(rv and int(rv) >= target for rv in informer.resource_versions()):
            return True
        time.sleep(0.005)
    return False


class SettledBackend(KubeflowBackend):
    """The backend, but discover() first lets the watch deliver what the test (playing the
    controllers) just wrote: on a cluster that is the next tick; here it is a bounded wait,
    which makes no request."""

    fake: FakeApiServer

    def discover(self, tokens: Iterable[str], refs: Iterable[str]) -> Discovery:
        caught_up(self, self.fake)
        return super().discover(tokens, refs)


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
    options: dict[str, object] = {
        "retries": 1,
        "backoff_s": 0.0,
        "timeout_s": 2.0,
        "informer_settings": InformerSettings(backoff_s=0.05, max_backoff_s=0.2),
    }
    options.update(kw)
    backend = SettledBackend(kubeconfig=str(kubeconfig), clock=clock, **options)  # type: ignore[arg-type]
    backend.fake = fake
    return backend
