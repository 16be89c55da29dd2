"""``submitit.JobEnvironment``: the running task's place in its job, read from the
environment dispatch gives every task (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
DISPATCH_JOB_ID; Slurm's own names where srun set them)."""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

from dispatch.errors import StateConflict


class JobEnvironment:
    """Inside a job: ``job_id``, ``global_rank``, ``local_rank``, ``node``, ``num_tasks``,
    ``num_nodes``, ``hostname``. Outside one: ``RuntimeError`` (a ``StateConflict``) on
    reading them, as submitit."""

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._env = os.environ if env is None else env

    def activated(self) -> bool:
        return "RANK" in self._env and "WORLD_SIZE" in self._env

    def _int(self, name: str, default: str | None = None) -> int:
        value = self._env.get(name, default)
        if value is None:
            raise NotInAJob(f"JobEnvironment: {name} is not set; this is not a dispatch job")
        return int(value)

    @property
    def cluster(self) -> str:
        return "slurm" if "SLURM_JOB_ID" in self._env else "local"

    @property
    def job_id(self) -> str:
        """What ``job.job_id`` says: on Slurm, Slurm's (``<array id>_<task>`` in an array);
        elsewhere the dispatch job id."""
        array, task = self._env.get("SLURM_ARRAY_JOB_ID"), self._env.get("SLURM_ARRAY_TASK_ID")
        if array and task:
            return f"{array}_{task}"
        job = self._env.get("SLURM_JOB_ID") or self._env.get("DISPATCH_JOB_ID")
        if not job:
            raise NotInAJob(
                "JobEnvironment: DISPATCH_JOB_ID is not set; this is not a dispatch job"
            )
        return f"{job}_{task}" if task else job

    @property
    def array_job_id(self) -> str:
        return self._env.get("SLURM_ARRAY_JOB_ID") or self.job_id

    @property
    def array_task_id(self) -> str | None:
        return self._env.get("SLURM_ARRAY_TASK_ID")

    @property
    def global_rank(self) -> int:
        return self._int("RANK")

    @property
    def num_tasks(self) -> int:
        return self._int("WORLD_SIZE")

    @property
    def local_rank(self) -> int:
        return self._int("LOCAL_RANK", "0")

    @property
    def tasks_per_node(self) -> int:
        return max(1, self._int("LOCAL_WORLD_SIZE", "1"))

    @property
    def node(self) -> int:
        """The task's node: Slurm's SLURM_NODEID where srun set it, else from the rank."""
        if self._env.get("SLURM_NODEID", "").isdigit():
            return int(self._env["SLURM_NODEID"])
        return self.global_rank // self.tasks_per_node

    @property
    def num_nodes(self) -> int:
        if self._env.get("SLURM_JOB_NUM_NODES", "").isdigit():
            return int(self._env["SLURM_JOB_NUM_NODES"])
        return max(1, self.num_tasks // self.tasks_per_node)

    @property
    def hostname(self) -> str:
        return socket.gethostname()

    def __repr__(self) -> str:
        if not self.activated():
            return "JobEnvironment(<not in a job>)"
        return (
            f"JobEnvironment(job_id={self.job_id}, hostname={self.hostname}, "
            f"local_rank={self.local_rank}({self.tasks_per_node}), node={self.node}"
            f"({self.num_nodes}), global_rank={self.global_rank}({self.num_tasks}))"
        )


class NotInAJob(StateConflict, RuntimeError):
    """``JobEnvironment`` read outside a job."""
