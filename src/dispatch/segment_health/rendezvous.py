"""A torchrun rendezvous backend that runs the segment health check, then delegates to c10d.

For plain torchrun users (ft_launcher has its own consumer)::

    srun --kill-on-bad-exit=1 --ntasks-per-node=1 torchrun \\
        --rdzv-backend=dispatch-segment-c10d --rdzv-endpoint=HOST:PORT --rdzv-id=$SLURM_JOB_ID \\
        --rdzv-conf=segment_health_check_dir=/shared/job/segment-health ... train.py

How torch 2.13 finds it (torch/distributed/elastic/rendezvous/registry.py,
``_register_out_of_tree_handlers``): importing ``torch.distributed.elastic.rendezvous``
loads every entry point of the group ``torchrun.handlers``, calls the loaded object with no
arguments, and registers what it returns under the entry point's name. So the entry point
name is the ``--rdzv-backend`` value, ``create_handler`` takes no arguments and returns the
creator ``(RendezvousParameters) -> RendezvousHandler``, and the handler's ``get_backend()``
must return that same name (the registry checks it).

The directory comes from ``--rdzv-conf segment_health_check_dir=DIR`` or, for paths with a
comma or "=", from ``$DISPATCH_SEGMENT_DIR``. Neither: the check is not installed (the seed:
omitting the directory disables consumption) and a warning says so, since choosing this
backend without a directory is probably a mistake.

This module imports torch; nothing else in dispatch imports it, so torch stays optional.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch.distributed.elastic.rendezvous.api import RendezvousHandler, RendezvousParameters


# The entry point comes first, before this module imports torch: if this module is imported
# before torch's rendezvous package, importing that package registers out-of-tree handlers,
# which loads this (partially initialised) module and calls create_handler. Defined here,
# it exists by then; the creator looks the real function up only when torchrun calls it.
def create_handler() -> Callable[[RendezvousParameters], RendezvousHandler]:
    """Entry point ``torchrun.handlers: dispatch-segment-c10d``: returns the creator.

    Always the same function object, so a second registration (two installed copies of
    the entry point) is accepted by torch's registry instead of refused as a conflict.
    """
    return _creator


def _creator(params: Any) -> Any:
    return create_segment_rendezvous_handler(params)


import logging  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from torch.distributed.elastic.rendezvous.api import (  # noqa: E402
    RendezvousError,
    RendezvousHandler,
    RendezvousInfo,
    RendezvousParameters,
)

from dispatch.errors import DispatchError  # noqa: E402
from dispatch.segment_health.consumer import CheckResult, SegmentCheck, install  # noqa: E402

BACKEND_NAME = "dispatch-segment-c10d"
DIR_CONF_KEY = "segment_health_check_dir"
DIR_ENV = "DISPATCH_SEGMENT_DIR"

log = logging.getLogger("dispatch.segment_health.rendezvous")


class SegmentExcludedError(RendezvousError, DispatchError):
    """This allocation unit is excluded by a segment health decision; do not rejoin.

    A RendezvousError that is not RendezvousGracefulExitError: the elastic agent lets it
    propagate, torchrun exits non-zero, and ``srun --kill-on-bad-exit=1`` ends the step.
    Also a DispatchError, as every error dispatch raises.
    """

    def __init__(self, result: CheckResult) -> None:
        super().__init__(result.reason)
        self.result = result


class SegmentHealthRendezvousHandler(RendezvousHandler):
    """Runs the segment check before every rendezvous round, then the c10d handler's."""

    def __init__(
        self, inner: RendezvousHandler, segment_check: SegmentCheck | None, backend: str
    ) -> None:
        self._inner = inner
        self._check = segment_check
        self._backend = backend

    def get_backend(self) -> str:
        return self._backend

    @property
    def use_agent_store(self) -> bool:
        return self._inner.use_agent_store

    def next_rendezvous(self) -> RendezvousInfo:
        if self._check is not None:
            result = self._check.run(log)
            if result.excluded:
                log.error("%s", result.reason)
                raise SegmentExcludedError(result)
        return self._inner.next_rendezvous()

    def is_closed(self) -> bool:
        return self._inner.is_closed()

    def set_closed(self) -> None:
        self._inner.set_closed()  # type: ignore[no-untyped-call]  # torch leaves it unannotated

    def num_nodes_waiting(self) -> int:
        return self._inner.num_nodes_waiting()

    def get_run_id(self) -> str:
        return self._inner.get_run_id()

    def shutdown(self) -> bool:
        return self._inner.shutdown()


def _ensure_visible(logger: logging.Logger) -> None:
    # torchrun configures no root handler; without one our install line and warnings
    # would be dropped. Add a stderr handler only where nothing would print them.
    if not logger.hasHandlers():
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("[%(levelname)s] %(name)s: %(message)s"))
        logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.INFO:
        logger.setLevel(logging.INFO)


def create_segment_rendezvous_handler(params: RendezvousParameters) -> RendezvousHandler:
    """The creator torch registers under BACKEND_NAME: c10d behind the segment check."""
    from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import create_backend
    from torch.distributed.elastic.rendezvous.dynamic_rendezvous import (
        create_handler as create_dynamic_handler,
    )

    _ensure_visible(log)
    directory = params.get(DIR_CONF_KEY) or os.environ.get(DIR_ENV) or None
    if directory is None:
        log.warning(
            "%s: no segment health directory (--rdzv-conf %s=DIR or $%s); "
            "the segment health check is not installed",
            params.backend,
            DIR_CONF_KEY,
            DIR_ENV,
        )
    # Before the store is created: a relative directory is refused here (DirectoryNotAbsolute).
    segment_check = install(directory, os.environ, log)
    backend, store = create_backend(params)
    inner = create_dynamic_handler(store, backend, params)
    return SegmentHealthRendezvousHandler(inner, segment_check, params.backend)
