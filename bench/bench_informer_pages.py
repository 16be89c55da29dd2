"""The informer's first LIST, whole or in pages (issue 49: "informer RSS after the first LIST").
A benchmark, not a test: it asserts nothing and prints markdown for bench/RESULTS.md.

    python bench/bench_informer_pages.py --jobs 5000 --before DIR   # DIR: another tree's root

The stand-in API server (tests/kube_fake, in a process of its own) holds N TrainJobs as
dispatch submits them, each with a ``kubectl.kubernetes.io/last-applied-configuration``
annotation of ``--annotation`` bytes (what ``kubectl apply`` leaves; the projection drops it,
as it drops ``managedFields``, which the stand-in's schema refuses). For each tree, a child
process of its own makes a fresh ``KubeflowBackend`` and calls ``discover`` once with one
job's token (the informer LISTs every collection, then watches): its peak Python allocation
(tracemalloc) and its peak RSS, and what the informer holds after a gc. The stand-in pages a
LIST only when asked (``limit``); the tree before asks for the whole list at once.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def serve(jobs: int, annotation: int, ready: Path) -> None:
    """A child: the stand-in API server with ``jobs`` TrainJobs, until killed."""
    sys.path[:0] = [str(HERE / "tests"), str(HERE / "src"), str(HERE)]
    from dispatch.backends.kubeflow.objects import MANAGED_LABEL, TOKEN_LABEL
    from kube_fake import FakeApiServer
    from kube_fake import trainer as tr

    fake = FakeApiServer().start()
    for n in ("n1", "n2"):
        fake.put(tr.node(n))
    for i in range(jobs):
        fake.put({"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
                  "metadata": {"name": f"job-{i:06d}", "namespace": "team",
                               "labels": {MANAGED_LABEL: "true", TOKEN_LABEL: f"j{i}.1"},
                               "annotations": {
                                   "dispatch.io/gate": "open",
                                   "kubectl.kubernetes.io/last-applied-configuration":
                                       "x" * annotation}},
                  "spec": {"runtimeRef": {"name": "torch-distributed"},
                           "trainer": {"numNodes": 2}}})
    config = fake.write_kubeconfig(ready.with_suffix(".kubeconfig"), namespace="team")
    ready.write_text(str(config))
    while True:
        time.sleep(3600)


def measure(src: str, kubeconfig: str) -> None:
    """A child: one tree's first discover against the running stand-in."""
    import gc
    import tracemalloc

    sys.path.insert(0, str(Path(src) / "src"))
    from dispatch.backends.kubeflow import KubeflowBackend

    backend = KubeflowBackend(kubeconfig=kubeconfig, retries=1, timeout_s=60.0)
    gc.collect()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    tracemalloc.start()
    cpu = time.process_time()
    backend.discover(["j0.1"], ["team/job-000000"])
    cpu = time.process_time() - cpu
    _, peak = tracemalloc.get_traced_memory()
    gc.collect()
    held, _ = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    print(json.dumps({"peak_alloc": peak, "held": held, "cpu": cpu, "rss_before_kib": rss0,
                      "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
    os._exit(0)  # the informer's threads: nothing to join


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, action="append")
    ap.add_argument("--annotation", type=int, default=8192)
    ap.add_argument("--before", help="another tree's root, measured against the same server")
    ap.add_argument("--serve", nargs=3)  # a child: jobs annotation ready-file
    ap.add_argument("--measure", nargs=2)  # a child: src kubeconfig
    a = ap.parse_args()
    if a.serve:
        serve(int(a.serve[0]), int(a.serve[1]), Path(a.serve[2]))
        return
    if a.measure:
        measure(*a.measure)
        return
    trees = [("this", str(HERE))] + ([("before", a.before)] if a.before else [])
    print("| TrainJobs | tree | peak allocation in the first discover | held after it | its CPU "
          "| peak RSS |\n| --- | --- | --- | --- | --- | --- |")
    for jobs in a.jobs or [1000]:
        with tempfile.TemporaryDirectory() as tmp:
            ready = Path(tmp) / "ready"
            server = subprocess.Popen([sys.executable, __file__, "--serve", str(jobs),
                                       str(a.annotation), str(ready)])
            try:
                while not ready.exists():
                    if server.poll() is not None:
                        raise SystemExit("the stand-in API server did not start")
                    time.sleep(0.2)
                for name, src in trees:
                    out = subprocess.run([sys.executable, __file__, "--measure", src,
                                          ready.read_text()], capture_output=True, text=True,
                                         check=True, timeout=1800).stdout
                    r = json.loads(out.strip().splitlines()[-1])
                    print(f"| {jobs:,} | {name} | {r['peak_alloc'] / 2**20:.1f} MiB "
                          f"| {r['held'] / 2**20:.1f} MiB | {r['cpu']:.2f} s "
                          f"| {r['peak_rss_kib'] / 1024:.0f} MiB |", flush=True)
            finally:
                server.kill()
                server.wait()


if __name__ == "__main__":
    main()
