"""Spec parsing for tests, with the registry's table of backends as every front end passes it
(core/spec.py takes the table as data: the pure core may not import the registry)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dispatch.backends.registry import traits
from dispatch.core import spec as core_spec
from dispatch.core.backend_traits import BackendTraits
from dispatch.core.spec import JobSpec


def parse_spec(data: Any, source: str = "<spec>", *,
               backends: Mapping[str, BackendTraits] | None = None) -> JobSpec:
    """core.spec.parse_spec with the backends registered now (a test's throwaway one too)."""
    return core_spec.parse_spec(data, source, backends=traits() if backends is None
                                else backends)


def check_spec(spec: JobSpec, source: str = "<spec>", *,
               backends: Mapping[str, BackendTraits] | None = None) -> None:
    core_spec.check_spec(spec, source, backends=traits() if backends is None else backends)
