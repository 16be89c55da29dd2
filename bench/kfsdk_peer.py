"""The Kubeflow SDK as a peer under measurement: a coprocess that bench_k8s_cost.py drives.

Runs under a separate venv holding the SDK (never the project's: it is measured, not used):

    python3 -m venv /tmp/kfsdk-venv && /tmp/kfsdk-venv/bin/pip install 'kubeflow==0.5.0'

It builds one ``TrainerClient`` (Kubernetes backend, the namespace and kubeconfig given), prints
``ready``, then answers one JSON line per command read from stdin:

- ``list``: ``list_jobs()`` once (what a refresh of every job costs the SDK);
- ``get NAME...``: ``get_job(name)`` for each name;
- ``quit``.

The answer: ``{"seconds": wall, "cpu": this process's CPU seconds for the command, "rss_kib":
its RSS after it, "hwm_kib": its peak RSS so far, "jobs": {name: "<status>; <step>: <phase>,
..."}}``, ``"error: ..."`` for a job whose call raised. Nothing else talks to the API server.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any


def failure(err: Exception) -> str:
    """One line: the SDK's error and the first line of its cause (an HTTP status)."""
    cause = str(err.__cause__ or "").strip().splitlines()
    return f"error: {type(err).__name__}: {err}" + (f" ({cause[0]})" if cause else "")


def words(job: Any) -> str:
    steps = ", ".join(f"{s.name}: {s.status}" for s in (job.steps or []))
    return f"{job.status}" + (f"; {steps}" if steps else "")


def status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def main() -> None:
    from kubeflow.common.types import KubernetesBackendConfig
    from kubeflow.trainer import TrainerClient

    namespace, kubeconfig = sys.argv[1], sys.argv[2]
    client = TrainerClient(
        backend_config=KubernetesBackendConfig(namespace=namespace, config_file=kubeconfig)
    )
    print("ready", flush=True)
    for line in sys.stdin:
        cmd, *names = line.split()
        if cmd == "quit":
            return
        started, cpu = time.monotonic(), cpu_s()
        jobs: dict[str, str] = {}
        if cmd == "list":
            try:
                for job in client.list_jobs():
                    jobs[job.name] = words(job)
            except Exception as err:  # noqa: BLE001 - the peer's failure is a result
                jobs["*"] = failure(err)
        else:
            for name in names:
                try:
                    jobs[name] = words(client.get_job(name))
                except Exception as err:  # noqa: BLE001 - the peer's failure is a result
                    jobs[name] = failure(err)
        out = {"seconds": time.monotonic() - started, "cpu": cpu_s() - cpu,
               "rss_kib": status_kib("VmRSS"), "hwm_kib": status_kib("VmHWM"), "jobs": jobs}
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
