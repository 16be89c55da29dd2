"""The distributed environment a function's node sees: RANK, WORLD_SIZE, LOCAL_RANK,
LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Pure: the environment is passed in.

The local backend sets them itself (backends/local/nodes.py); Slurm's srun sets its own
SLURM_* names instead, so they are derived from those: the rank from SLURM_PROCID, the
master from the first host of the job's node list, the port from the job id (every task of
one job computes the same one)."""

from __future__ import annotations

import re
from collections.abc import Mapping

NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
PORT_BASE = 20_000
PORT_SPAN = 20_000
_RANGE_START = re.compile(r"^([^\[]*)\[([^\],\-]+)[^\]]*\](.*)$")


def first_host(nodelist: str) -> str:
    """The first host of a Slurm host list: ``n[1-3,7]`` -> ``n1``, ``a,b`` -> ``a``."""
    depth = 0
    end = len(nodelist)
    for i, c in enumerate(nodelist):
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
        elif c == "," and depth == 0:
            end = i
            break
    first = nodelist[:end]
    m = _RANGE_START.match(first)
    return m.group(1) + m.group(2) + m.group(3) if m else first


def distributed_environment(env: Mapping[str, str]) -> dict[str, str]:
    """The variables to add to ``env``: none when the backend set them (RANK and WORLD_SIZE
    present), else from Slurm's, else those of a single process."""
    if "RANK" in env and "WORLD_SIZE" in env:
        return {}
    if "SLURM_PROCID" in env:
        job = env.get("SLURM_JOB_ID", "0")
        nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "127.0.0.1"
        tasks = env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS") or "1"
        per_node = (env.get("SLURM_NTASKS_PER_NODE") or "1").split("(")[0].split(",")[0]
        return {
            "RANK": env["SLURM_PROCID"],
            "WORLD_SIZE": tasks,
            "LOCAL_RANK": env.get("SLURM_LOCALID", "0"),
            "LOCAL_WORLD_SIZE": per_node,
            "MASTER_ADDR": first_host(nodelist),
            "MASTER_PORT": str(PORT_BASE + int(job) % PORT_SPAN if job.isdigit() else 29500),
        }
    return {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500"}


TASKS_VAR = "DISPATCH_FN_TASKS_PER_NODE"


def tasks_per_node_environment(env: Mapping[str, str]) -> dict[str, str]:
    """With ``DISPATCH_FN_TASKS_PER_NODE`` = T > 1 (the local backend runs nodes x T
    processes, one per task), each task's LOCAL_RANK (RANK mod T) and LOCAL_WORLD_SIZE (T)."""
    tasks = env.get(TASKS_VAR, "")
    if not tasks.isdigit() or int(tasks) < 2 or not env.get("RANK", "").isdigit():
        return {}
    return {"LOCAL_RANK": str(int(env["RANK"]) % int(tasks)), "LOCAL_WORLD_SIZE": tasks}
