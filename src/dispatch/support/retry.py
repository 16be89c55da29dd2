"""One retry rule with exponential backoff, for every call that may fail for a moment (a
webhook, the Kubernetes API): tenacity, configured in one place."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import tenacity

T = TypeVar("T")


def with_backoff(fn: Callable[[], T], *, attempts: int, backoff: float,
                 retry_on: type[BaseException] | tuple[type[BaseException], ...],
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, tried up to ``attempts`` times while it raises ``retry_on``, waiting
    ``backoff``, 2x``backoff``, 4x``backoff``... between tries; the last error is raised."""
    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(max(1, attempts)),
        wait=tenacity.wait_exponential(multiplier=backoff, exp_base=2, min=0),
        retry=tenacity.retry_if_exception_type(retry_on),
        sleep=sleep,
        reraise=True,
    )
    return retrying(fn)
