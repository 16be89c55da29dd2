"""The ``path`` fixture of the recorded replays (test_kubeflow_replay*.py), and every pure
reader a test module imports checked against the informer's projection (projected.py)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, cast

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from projected import readers_checked  # noqa: E402


@pytest.fixture(params=["lists", "informer"])
def path(request: pytest.FixtureRequest) -> Literal["lists", "informer"]:
    """Each replay runs through both ways discover() reads: lists per tick (informer=False)
    and the informer's list+watch cache (the default), fed the recorded events on its
    watches."""
    return cast(Literal["lists", "informer"], request.param)


@pytest.fixture(autouse=True, scope="module")
def _read_projected_too(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every call a test makes to a reader (report_trainjob, pod_end_signals, ...) also reads
    its objects as the informer's cache keeps them, and must say exactly the same (issue 49:
    a projection that drops a field a reader reads is a bug)."""
    with readers_checked(request.module):
        yield
