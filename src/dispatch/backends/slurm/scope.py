"""The scope of the Slurm backend: ``slurm:<ClusterName>``, asked of ``scontrol show config``
(it can hang: supervise/scopes.py asks on a thread of its own)."""

from __future__ import annotations

from dispatch.backends.base import Backend
from dispatch.backends.slurm.tools import NAME, run_tool
from dispatch.core.model import SchedulerUnreachable


def slurm_cluster_name(config_text: str) -> str | None:
    """ClusterName from ``scontrol show config`` output (``ClusterName = x``)."""
    for line in config_text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() == "ClusterName" and value.strip():
            return value.strip()
    return None


def slurm_scope(name: str = NAME, backend: Backend | None = None) -> str:
    res = run_tool(["scontrol", "show", "config"], 30.0)
    if res.returncode != 0:
        raise SchedulerUnreachable(NAME, f"scontrol show config failed (exit {res.returncode}):"
                                   f" {res.words or 'no words'}")
    cluster = slurm_cluster_name(res.stdout)
    if cluster is None:
        raise SchedulerUnreachable(NAME, "scontrol show config names no ClusterName")
    return f"{name}:{cluster}"
