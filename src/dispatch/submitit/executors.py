"""submitit's executors over ``dispatch.Executor``: ``AutoExecutor``, ``LocalExecutor``,
``SlurmExecutor`` and ``DebugExecutor``.

Each call is a dispatch job (recorded, supervised, recovered by rules): submitit's
parameters become the dispatch Executor's (parameters.py), submitit's requeueing becomes a
policy (preempted: resubmit; time-limit: resubmit at most ``slurm_max_num_timeout`` times
for a checkpointable callable), and a callable with a ``checkpoint`` method is asked for its
checkpoint on a stop (helpers.Resumable). Escalations and the supervisor's other log lines go
to ``<folder>/dispatch.log``, not to the terminal.

The folder is checked when the executor is made: a name no file system takes, or a place no
folder can be made, is a ``BadFolder`` (a ``ValueError``); a base folder (or ``.calls``) that
another user owns, or that others can write without the sticky bit, is an ``UnsafeFolder``
(dispatch.support.trusted_folders); the log is opened in it without following a link.
"""

from __future__ import annotations

import copy
import logging
import os
import shutil
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from dispatch.errors import BadInput, StateConflict
from dispatch.fn.bootstrap import RESULTS_VAR
from dispatch.fn.calls import UnsafeFolder
from dispatch.fn.executor import Executor as FunctionExecutor
from dispatch.submitit.core.utils import DelayedSubmission
from dispatch.submitit.folders import (
    BadFolder,
    FolderPatternError,
    base_folder,
    calls_folder,
    check_name,
)
from dispatch.submitit.helpers import _hook, resumable
from dispatch.submitit.job import DebugJob, Job
from dispatch.submitit.parameters import (
    CLUSTERS,
    BadParameterValue,
    check_names,
    dispatch_parameters,
    for_cluster,
    recovery_policy,
)
from dispatch.support.trusted_folders import FIX, Untrusted, make_folders, open_appending

R = TypeVar("R")
CLUSTER_VAR = "DISPATCH_SUBMITIT_CLUSTER"  # AutoExecutor's choice when cluster=None
DEFAULT_MAX_NUM_TIMEOUT = 3
LOG_NAME = "dispatch.log"
_LOGGED: set[Path] = set()


def which() -> str:
    """The cluster ``AutoExecutor`` picks when none is named: ``DISPATCH_SUBMITIT_CLUSTER``
    when set, else slurm where ``srun`` is on the PATH (as submitit), else local."""
    named = os.environ.get(CLUSTER_VAR)
    if named:
        return named
    return "slurm" if shutil.which("srun") else "local"


def log_to_folder(folder: Path) -> None:
    """dispatch's log lines (an ESCALATION, a supervisor's warning) into
    ``<folder>/dispatch.log`` instead of the terminal (Python's last-resort handler). The
    folder must pass the folder rule; the file is opened in it without following a link and
    must be a file of ours (0600 when made)."""
    if folder in _LOGGED:
        return
    stream = os.fdopen(open_appending(folder, LOG_NAME), "a", encoding="utf-8")
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.getLogger("dispatch").addHandler(handler)
    _LOGGED.add(folder)


def usable_folder(folder: object) -> Path:
    """The executor's ``folder``, absolute, with its base folder (and ``.calls`` under it)
    made and checked and its log opened: ``BadFolder`` (a ``ValueError``) for a folder that
    cannot be made, ``UnsafeFolder`` for one another user could change under dispatch."""
    if not isinstance(folder, (str, os.PathLike)) or not os.fspath(folder):
        raise BadFolder(f"folder={folder!r}: expected a directory path (str or os.PathLike)")
    path = Path(os.fspath(folder)).absolute()
    check_name(path)
    base = base_folder(path)
    try:
        if not base.is_dir():
            base.mkdir(parents=True, exist_ok=True)
        log_to_folder(base)
        make_folders(base, calls_folder(path))
    except Untrusted as err:
        raise UnsafeFolder(f"folder={str(folder)!r}: {err.path} {err.problem}: {FIX}") from None
    except OSError as err:
        raise BadFolder(f"folder={str(folder)!r}: cannot use {err.filename or base}: "
                        f"{err.strerror or err}") from None
    return path


class Executor:
    """The executors' common part: ``update_parameters``, ``submit``, ``map_array``,
    ``batch``. ``cluster``: slurm or local (the dispatch backend)."""

    cluster = "local"

    def __init__(
        self,
        folder: str | os.PathLike[str],
        *,
        cluster: str = "local",
        max_num_timeout: int = DEFAULT_MAX_NUM_TIMEOUT,
    ) -> None:
        self.cluster = cluster
        self.folder = usable_folder(folder)
        self._functions = FunctionExecutor(calls_folder(self.folder), backend=cluster)
        self._functions.update_parameters(env={RESULTS_VAR: "every"})
        self.max_num_timeout = max_num_timeout
        self.parameters: dict[str, Any] = {}
        self._in_batch = False
        self._batched: list[Job[Any]] = []

    def __repr__(self) -> str:
        return f"{type(self).__name__}(folder={str(self.folder)!r}, cluster={self.cluster!r})"

    def _prefix(self, parameters: dict[str, Any]) -> dict[str, Any]:
        return parameters

    def update_parameters(self, **kwargs: Any) -> None:
        """submitit's names (generic, or prefixed with a cluster); an unknown name raises
        ``NameError`` (``UnknownParameter``) with the closest valid one."""
        self.update_named(self._prefix(kwargs))

    def update_named(self, named: dict[str, Any]) -> None:
        """``update_parameters`` with the names as AutoExecutor takes them (prefixed)."""
        if self._in_batch:
            raise StateConflict(
                "update_parameters: not inside executor.batch() (every job "
                "of a batch has the same parameters)"
            )
        check_names(named)
        mine = for_cluster(named, self.cluster)
        mapped = dispatch_parameters(mine, self.cluster)
        try:
            self._functions.update_parameters(**mapped)
        except BadInput as err:
            raise self._culprit(mine, err) from None
        if "max_num_timeout" in mine:
            self.max_num_timeout = int(mine["max_num_timeout"])
        self.parameters.update(named)

    def _culprit(self, mine: dict[str, Any], err: BadInput) -> BadInput:
        """``err`` (a value the dispatch Executor refused, in its own names) as a
        ``BadParameterValue`` naming the submitit parameter it came from: the first one
        refused alone, else all of them (refused together, as nodes with tasks_per_node).
        Nothing is changed."""
        if isinstance(err, BadParameterValue):
            return err
        named = list(mine)
        for key in mine:
            trial = copy.deepcopy(self._functions)
            try:
                trial.update_parameters(**dispatch_parameters({key: mine[key]}, self.cluster))
            except BadInput:
                named = [key]
                break
        shown = ", ".join(f"{self._name_of(k)}={mine[k]!r}" for k in named)
        return BadParameterValue(f"{shown}: {err}")

    def _name_of(self, key: str) -> str:
        """A cluster's parameter as the user gave it (``slurm_partition``)."""
        from dispatch.submitit.parameters import GENERIC

        return key if key in GENERIC else f"{self.cluster}_{key}"

    def _tasks(self) -> int:
        nodes = self._functions.parameters.get("nodes", 1)
        return int(nodes) * self._functions.tasks_per_node

    def _prepare(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        checkpointable = _hook(fn) is not None
        self._functions.update_parameters(
            policy=recovery_policy(checkpointable, self.max_num_timeout)
        )
        return resumable(fn)

    def submit(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> Job[R]:
        wrapped = self._prepare(fn)
        handle = self._functions.submit(wrapped, *args, **kwargs)
        job = Job(
            handle, DelayedSubmission(fn, *args, **kwargs), self._tasks(), self.cluster, self.folder
        )
        return self._submitted([job])[0]

    def _submitted(self, jobs: list[Job[R]]) -> list[Job[R]]:
        """Each job's ``%j`` folder, now that it has its id (at the end of a batch)."""
        if self._in_batch:
            self._batched.extend(jobs)
        else:
            _link_each(jobs)
        return jobs

    def map_array(self, fn: Callable[..., R], *iterables: Iterable[Any]) -> list[Job[R]]:
        """One job per item of the zipped iterables; on Slurm one job array (at most
        ``slurm_array_parallelism`` tasks at once: ``%N``), job ids ``<id>_<i>``."""
        items = [tuple(item) for item in zip(*iterables, strict=False)]
        wrapped = self._prepare(fn)
        handles = self._functions.map_array(wrapped, *zip(*items, strict=True)) if items else []
        tasks = self._tasks()
        return self._submitted(
            [
                Job(h, DelayedSubmission(fn, *item), tasks, self.cluster, self.folder)
                for h, item in zip(handles, items, strict=True)
            ]
        )

    @contextmanager
    def batch(self, allow_implicit_submissions: bool = False) -> Iterator[None]:
        """The ``submit`` calls of the block are recorded when it ends; an error in the
        block records none. The jobs' methods work once the block has ended."""
        self._in_batch = True
        self._batched = []
        try:
            with self._functions.batch():
                yield
        finally:
            self._in_batch = False
            batched, self._batched = self._batched, []
        _link_each(batched)


def _link_each(jobs: list[Job[Any]]) -> None:
    """Each submitted job's folder link. A folder the job's id does not fit (``%a`` for a
    job that is no array task) is no reason to lose the jobs: ``job.paths`` raises it, as
    submitit's does; so does a ``%j`` folder that cannot be made or that another user planted
    (never followed)."""
    for job in jobs:
        try:
            job.link_folder()
        except (FolderPatternError, UnsafeFolder, BadFolder) as err:
            logging.getLogger(__name__).warning("%s", err)


class LocalExecutor(Executor):
    """Jobs on this machine: dispatch's local backend (real processes, one per task)."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        max_num_timeout: int = DEFAULT_MAX_NUM_TIMEOUT,
        **_: Any,
    ) -> None:
        super().__init__(folder, cluster="local", max_num_timeout=max_num_timeout)

    def _prefix(self, parameters: dict[str, Any]) -> dict[str, Any]:
        from dispatch.submitit.parameters import GENERIC

        return {k if k in GENERIC else f"local_{k}": v for k, v in parameters.items()}


class SlurmExecutor(Executor):
    """Jobs on Slurm: dispatch's Slurm backend (sbatch; ``map_array`` as one job array).
    Takes submitit's Slurm names without the prefix (``partition``, ``time``, ``mem``,
    ``ntasks_per_node``, ``array_parallelism``, ...)."""

    def __init__(
        self,
        folder: str | os.PathLike[str],
        max_num_timeout: int = DEFAULT_MAX_NUM_TIMEOUT,
        **_: Any,
    ) -> None:
        super().__init__(folder, cluster="slurm", max_num_timeout=max_num_timeout)

    def _prefix(self, parameters: dict[str, Any]) -> dict[str, Any]:
        return {f"slurm_{k}": v for k, v in parameters.items()}


class DebugExecutor:
    """Runs each call in this process when its result is asked for (``pdb`` works); no
    dispatch job, no record."""

    cluster = "debug"

    def __init__(self, folder: str | os.PathLike[str], **_: Any) -> None:
        self.folder = Path(os.fspath(folder)).absolute()
        self.parameters: dict[str, Any] = {}

    def update_parameters(self, **kwargs: Any) -> None:
        check_names(kwargs)
        self.parameters.update(kwargs)

    def submit(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> DebugJob[R]:
        return DebugJob(DelayedSubmission(fn, *args, **kwargs))

    def map_array(self, fn: Callable[..., R], *iterables: Iterable[Any]) -> list[DebugJob[R]]:
        return [self.submit(fn, *item) for item in zip(*iterables, strict=False)]

    @contextmanager
    def batch(self, allow_implicit_submissions: bool = False) -> Iterator[None]:
        yield


class AutoExecutor:
    """submitit's AutoExecutor: ``cluster`` "slurm", "local" or "debug" (None: see
    ``which``); ``slurm_max_num_timeout`` (default 3) and other ``<cluster>_`` keywords as
    submitit's."""

    def __init__(
        self, folder: str | os.PathLike[str], cluster: str | None = None, **kwargs: Any
    ) -> None:
        self.cluster = cluster or which()
        if self.cluster not in CLUSTERS:
            raise BadInput(
                f"AutoExecutor doesn't know any executor named {self.cluster}"
                f" (known: {', '.join(CLUSTERS)})"
            )
        for name in kwargs:
            prefix = name.split("_")[0]
            if "_" not in name or prefix not in CLUSTERS:
                raise BadInput(
                    "Extra arguments must be prefixed by executor named, received "
                    f"unknown arg '{name}'. Known executors: {', '.join(CLUSTERS)}."
                )
        own = {k.split("_", 1)[1]: v for k, v in kwargs.items() if k.startswith(self.cluster + "_")}
        self._executor: Executor | DebugExecutor
        if self.cluster == "debug":
            self._executor = DebugExecutor(folder)
        else:
            cls = SlurmExecutor if self.cluster == "slurm" else LocalExecutor
            self._executor = cls(folder, **own)
        self.folder = self._executor.folder

    def __repr__(self) -> str:
        return f"AutoExecutor(folder={str(self.folder)!r}, cluster={self.cluster!r})"

    @property
    def parameters(self) -> dict[str, Any]:
        return self._executor.parameters

    def update_parameters(self, **kwargs: Any) -> None:
        if isinstance(self._executor, DebugExecutor):
            self._executor.update_parameters(**kwargs)
        else:
            self._executor.update_named(kwargs)

    def submit(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> Any:
        return self._executor.submit(fn, *args, **kwargs)

    def map_array(self, fn: Callable[..., R], *iterables: Iterable[Any]) -> list[Any]:
        return list(self._executor.map_array(fn, *iterables))

    @contextmanager
    def batch(self, allow_implicit_submissions: bool = False) -> Iterator[None]:
        with self._executor.batch():
            yield
