"""``dispatch.Executor``: submit Python functions the way submitit users do, supervised the
way dispatch supervises any job.

    executor = dispatch.Executor(folder="runs", backend="slurm")
    executor.update_parameters(nodes=2, timeout_min=60, slurm_partition="low",
                               policy={"rules": [{"on": ["preempted"], "action": "resubmit",
                                                  "budget": 3}]})
    job = executor.submit(train, cfg)
    print(job.result())

Each call is one job whose spec is made from the executor's parameters (submitit's names
mapped onto the spec's keys; the spec's own keys are taken too) and whose command is the
bootstrap ``python -m dispatch.fn FOLDER`` (dispatch/fn/bootstrap.py), run isolated
(``python -I``, dispatch/support/isolated.py) so that nothing in the job's working directory or
PYTHONPATH is imported as dispatch or as one of its dependencies. The function and its
arguments are cloudpickled into the call's own folder under ``folder`` before anything is
recorded, so a function that cannot be pickled fails at ``submit``.
"""

from __future__ import annotations

import copy
import math
import os
import re
import secrets
import sys
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

from dispatch.api import BadArgument, Store, _store_url
from dispatch.api import submit as submit_spec
from dispatch.core.spec import MAX_NODES, JobSpec, parse_spec
from dispatch.core.suggest import did_you_mean
from dispatch.errors import BadInput, StateConflict
from dispatch.fn.calls import (
    Call,
    Names,
    check_executor_folder,
    encode_call,
    make_folder,
    write_file,
)
from dispatch.fn.distributed import TASKS_VAR
from dispatch.fn.job import FunctionJob
from dispatch.support.isolated import isolated_argv, package_parent

__all__ = ["Executor"]

P = ParamSpec("P")
R = TypeVar("R")

# submitit's names with the same meaning, and the spec key (or slurm: key) each one sets.
SLURM_KEYS = {
    "slurm_partition": "partition",
    "slurm_account": "account",
    "slurm_qos": "qos",
    "slurm_constraint": "constraint",
    "slurm_exclude": "exclude",
    "slurm_nodelist": "nodelist",
    "slurm_reservation": "reservation",
    "slurm_exclusive": "exclusive",
    "gpus_per_node": "gpus_per_node",
    "slurm_gpus_per_node": "gpus_per_node",
    "cpus_per_task": "cpus_per_task",
    "slurm_cpus_per_task": "cpus_per_task",
}
SUBMITIT_NAMES = frozenset({"timeout_min", "mem_gb", "tasks_per_node",
                            "slurm_additional_parameters", "slurm_array_parallelism",
                            *SLURM_KEYS})
# The spec's own keys an executor takes as they are (the command is the bootstrap's).
SPEC_NAMES = frozenset(JobSpec.__struct_fields__) - {"command"}
NAMES = SUBMITIT_NAMES | SPEC_NAMES
_NAME_CHARS = re.compile(r"[^A-Za-z0-9_.-]+")


class Executor:
    """Submits functions as dispatch jobs. ``folder``: where each call's folder goes (the
    pickled call, the result, each rank's exception and output copy, a checkpoint); it must
    be reachable at the same path from every node (a shared file system on Slurm), and be
    yours (``UnsafeFolder``, a ``BadInput``, for one another user owns, or that everybody
    can write without the sticky bit).
    ``backend``: local, slurm or kubeflow. ``store``: the record store, as ``dispatch.submit``.
    Other keywords: as ``update_parameters``."""

    def __init__(self, folder: str | os.PathLike[str], backend: str = "local", *,
                 store: Store = None, **parameters: Any) -> None:
        if not isinstance(folder, (str, os.PathLike)) or not os.fspath(folder):
            raise BadArgument("folder", "a directory path (str or os.PathLike)", folder)
        _store_url(store)
        self.folder = Path(os.fspath(folder)).absolute()
        check_executor_folder(self.folder)  # again at each submit, once it exists
        self.store = store
        self._fields: dict[str, Any] = {"backend": backend}
        self._array_parallelism: int | None = None
        self._tasks_per_node = 1
        # a batch's calls: the handle, the job's name, the pickled call (Slurm: its folder
        # is made when the block ends) or None (written already)
        self._batch: list[tuple[FunctionJob[Any], str, bytes | None]] | None = None
        self.update_parameters(**parameters)

    def __repr__(self) -> str:
        return f"Executor(folder={str(self.folder)!r}, backend={self.backend!r})"

    @property
    def backend(self) -> str:
        return str(self._fields["backend"])

    @property
    def tasks_per_node(self) -> int:
        return self._tasks_per_node

    @property
    def parameters(self) -> dict[str, Any]:
        """The spec fields the executor's jobs get (a copy)."""
        return copy.deepcopy(self._fields)

    def update_parameters(self, **parameters: Any) -> None:
        """Set job parameters: submitit's names where the meaning is the same (``nodes``,
        ``tasks_per_node`` (1: one process per node; more on the local backend and Slurm,
        one process per task, each with its RANK and LOCAL_RANK; not on kubeflow),
        ``timeout_min``, ``mem_gb``,
        ``gpus_per_node``, ``cpus_per_task``, ``slurm_partition``, ``slurm_account``,
        ``slurm_qos``, ``slurm_constraint``, ``slurm_exclude``, ``slurm_nodelist``,
        ``slurm_reservation``, ``slurm_exclusive``, ``slurm_additional_parameters`` (a mapping
        of sbatch options, e.g. ``{"mail_type": "END"}``), ``slurm_array_parallelism``,
        ``name``), and the spec's own keys (``policy``, ``env``, ``workdir``, ``slurm``, ...;
        docs/spec.md). Every value is checked as a spec's is; an unknown name is refused
        with the valid names."""
        unknown = sorted(set(parameters) - NAMES)
        if unknown:
            word = unknown[0]
            raise BadInput(f"Executor: unknown parameter {word!r}"
                           f"{did_you_mean(word, NAMES)} (valid: {', '.join(sorted(NAMES))})")
        fields = copy.deepcopy(self._fields)
        parallelism = self._array_parallelism
        tasks = self._tasks_per_node
        for key, value in parameters.items():
            if key == "slurm_array_parallelism":
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise BadArgument(key, "a whole number of 1 or more", value)
                parallelism = value
            elif key == "tasks_per_node":
                tasks = _whole(key, value)
                if tasks > 1 and fields["backend"] == "kubeflow":
                    raise BadInput(f"tasks_per_node: on kubeflow dispatch runs one process "
                                   f"per node (got {value}); start more per node from the "
                                   "function (torchrun, multiprocessing) or use more nodes")
            else:
                _set(fields, key, value)
        nodes = fields.get("nodes", 1)
        if tasks > 1 and isinstance(nodes, int) and nodes * tasks > MAX_NODES:
            raise BadArgument("tasks_per_node", f"at most {MAX_NODES // nodes} with {nodes} "
                              f"node(s) (a job runs at most {MAX_NODES} processes)", tasks)
        self._check(fields)
        self._fields = fields
        self._array_parallelism = parallelism
        self._tasks_per_node = tasks

    def _check(self, fields: dict[str, Any]) -> JobSpec:
        spec = parse_spec({"name": "fn", **fields, "command": ["python"]}, "<executor>")
        if spec.backend == "slurm":  # the slurm section as sbatch would get it, checked now
            from dispatch.backends.slurm.script import validate_spec

            validate_spec(spec)
        return spec

    # ---- submitting ---------------------------------------------------------------------
    def submit(self, fn: Callable[P, R], /, *args: P.args, **kwargs: P.kwargs
               ) -> FunctionJob[R]:
        """Run ``fn(*args, **kwargs)`` as a job (on every node: rank 0's return value is the
        result). The call is pickled first: ``NotPicklable`` / ``CallTooLarge`` (both
        ``BadInput``) before anything is recorded. Inside ``batch()`` the job is recorded
        when the block ends."""
        if not callable(fn):
            raise BadArgument("fn", "a callable", fn)
        data = encode_call(Call(fn, args, kwargs))
        name = self._name(fn)
        if self._batch is not None and self.backend == "slurm":
            # its folder (or its item of the batch's array) is made when the block ends
            job: FunctionJob[R] = FunctionJob(self.folder)
            self._batch.append((job, name, data))
            return job
        folder = make_folder(self._new_folder(fn))
        write_file(Names(folder, "").call(), data)
        job = FunctionJob(folder)
        if self._batch is not None:
            self._batch.append((job, name, None))
            return job
        job._job = submit_spec(self._spec(folder, name), store=self.store)
        return job

    def map_array(self, fn: Callable[..., R], /, *iterables: Iterable[Any]
                  ) -> list[FunctionJob[R]]:
        """``fn`` called on each item of the zipped iterables, one job each (as submitit's
        ``map_array``). On Slurm the calls are one job array (``slurm.array``, at most
        ``slurm_array_parallelism`` at once): one dispatch job, each handle one task of it.
        Every call is pickled before anything is recorded."""
        if not callable(fn):
            raise BadArgument("fn", "a callable", fn)
        items = list(zip(*iterables, strict=False))
        calls = [encode_call(Call(fn, tuple(item), {})) for item in items]
        if not calls:
            return []
        if self.backend != "slurm":
            if self._batch is not None:
                return [self._submit_encoded(fn, data) for data in calls]
            with self.batch():
                return [self._submit_encoded(fn, data) for data in calls]
        folder = make_folder(self._new_folder(fn))
        for i, data in enumerate(calls):
            write_file(Names(folder, "", i).call(), data)
        spread = f"0-{len(calls) - 1}"
        if self._array_parallelism is not None:
            spread += f"%{self._array_parallelism}"
        spec = self._spec(folder, self._name(fn), array=spread)
        job = submit_spec(spec, store=self.store)
        return [FunctionJob(folder, i, job) for i in range(len(calls))]

    def _submit_encoded(self, fn: Callable[..., R], data: bytes) -> FunctionJob[R]:
        folder = make_folder(self._new_folder(fn))
        write_file(Names(folder, "").call(), data)
        job: FunctionJob[R] = FunctionJob(folder)
        assert self._batch is not None
        self._batch.append((job, self._name(fn), None))
        return job

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Collect ``submit`` calls and record them when the block ends without an error
        (as submitit's ``batch``); the handles get their jobs then. On Slurm, two calls or
        more are one job array (as ``map_array``, whatever their functions and arguments;
        at most ``slurm_array_parallelism`` at once, named after the first call): one
        dispatch job, each handle one task of it. An error in the block records none."""
        if self._batch is not None:
            raise StateConflict("Executor.batch() blocks do not nest")
        self._batch = []
        try:
            yield
            pending, self._batch = self._batch, None
            if self.backend == "slurm" and len(pending) > 1:
                self._submit_array(pending)
                return
            for job, name, data in pending:
                if data is not None:  # one call on Slurm: a job of its own
                    job.folder = make_folder(self._folder_for(name))
                    write_file(Names(job.folder, "").call(), data)
                job._job = submit_spec(self._spec(job.folder, name), store=self.store)
        finally:
            self._batch = None

    def _submit_array(self, pending: list[tuple[FunctionJob[Any], str, bytes | None]]
                      ) -> None:
        """A batch's calls as one Slurm job array: item i is call i (``call.t<i>.pkl``)."""
        name = pending[0][1]
        folder = make_folder(self._folder_for(name))
        for i, (_, _, data) in enumerate(pending):
            assert data is not None
            write_file(Names(folder, "", i).call(), data)
        spread = f"0-{len(pending) - 1}"
        if self._array_parallelism is not None:
            spread += f"%{self._array_parallelism}"
        job = submit_spec(self._spec(folder, name, array=spread), store=self.store)
        for i, (handle, _, _) in enumerate(pending):
            handle.folder, handle.task, handle._job = folder, i, job

    # ---- the spec -----------------------------------------------------------------------
    def _name(self, fn: Callable[..., Any]) -> str:
        if "name" in self._fields:
            return str(self._fields["name"])
        target = fn.func if hasattr(fn, "func") else fn  # functools.partial
        name = getattr(target, "__name__", None) or type(target).__name__
        return _NAME_CHARS.sub("-", str(name)).strip("-") or "fn"

    def _new_folder(self, fn: Callable[..., Any]) -> Path:
        return self._folder_for(self._name(fn))

    def _folder_for(self, name: str) -> Path:
        return self.folder / f"{name[:40]}-{secrets.token_hex(6)}"

    def _spec(self, folder: Path, name: str, array: str | None = None) -> JobSpec:
        # The submitter's Python and dispatch where the nodes share this machine's paths; a
        # pod runs its image's python (which must have dispatch installed). Isolated either
        # way: nothing in the job's working directory or PYTHONPATH runs as dispatch.
        args = [str(folder)] if array is None else [str(folder), "--array"]
        if self.backend == "kubeflow":
            command = isolated_argv("python", "dispatch.fn", args, None)
        else:
            command = isolated_argv(sys.executable, "dispatch.fn", args, package_parent())
        fields = copy.deepcopy(self._fields)
        if array is not None:
            fields.setdefault("slurm", {})["array"] = array
        if self._tasks_per_node > 1 and self.backend == "slurm":  # srun starts each task
            fields.setdefault("slurm", {})["ntasks_per_node"] = self._tasks_per_node
        elif self._tasks_per_node > 1:  # local: one process per task, nodes x tasks
            fields["nodes"] = fields.get("nodes", 1) * self._tasks_per_node
            fields["env"] = {**fields.get("env", {}),
                             TASKS_VAR: str(self._tasks_per_node)}
        return parse_spec({**fields, "name": name, "command": command}, "<executor>")


def _set(fields: dict[str, Any], key: str, value: Any) -> None:
    """One parameter into the spec fields (submitit's units into the spec's)."""
    if key in SLURM_KEYS:
        fields.setdefault("slurm", {})[SLURM_KEYS[key]] = value
    elif key == "timeout_min":
        fields["time_limit"] = _whole(key, value) * 60
    elif key == "mem_gb":
        if (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0
                or not math.isfinite(value)):
            raise BadArgument(key, "a positive, finite number of GiB", value)
        fields["memory"] = int(value * 1024**3)
    elif key == "slurm_additional_parameters":
        if not isinstance(value, dict):
            raise BadArgument(key, "a mapping of sbatch options", value)
        extra = list(fields.setdefault("slurm", {}).get("extra", []))
        for option, setting in value.items():
            flag = "--" + str(option).replace("_", "-")
            extra.append(flag if setting is True else f"{flag}={setting}")
        fields["slurm"]["extra"] = extra
    elif key in ("slurm", "local", "kubeflow", "env") and isinstance(value, dict):
        fields[key] = {**fields.get(key, {}), **value}
    else:
        fields[key] = value


def _whole(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadArgument(key, "a whole number of 1 or more", value)
    return value
