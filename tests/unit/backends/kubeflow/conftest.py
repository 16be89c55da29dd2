"""The ``path`` fixture of the recorded replays (test_kubeflow_replay*.py)."""

from __future__ import annotations

from typing import Literal, cast

import pytest


@pytest.fixture(params=["lists", "informer"])
def path(request: pytest.FixtureRequest) -> Literal["lists", "informer"]:
    """Each replay runs through both ways discover() reads: lists per tick (informer=False)
    and the informer's list+watch cache (the default), fed the recorded events on its
    watches."""
    return cast(Literal["lists", "informer"], request.param)
