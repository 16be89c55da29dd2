"""Bytes the kubeflow informer's cache holds per job, the fields dispatch reads only (issue 49,
``projection.py``) against the objects kept whole (``managedFields`` dropped, the cache before),
on the real API objects of a recording (tests/fixtures/k8s-recorded/, Trainer v2.3.0, JobSet
v0.12.0, Kubernetes v1.36.3 on the testbed). A benchmark, not a test: it asserts nothing and
prints markdown for bench/RESULTS.md. No cluster needed.

    .venv/bin/python bench/bench_informer_memory.py --jobs 1000 --jobs 5000

What it does: takes the recording's objects as they stood while its job ran (``success``: a
TrainJob, its JobSet, one Job and two pods, after the event ``--at``), makes N copies of each
with their own names, uids, resourceVersions and timestamps (every timestamp moved by a few
seconds per copy: no two jobs share one, which is the worst case for the interning), and for
each kind does what a reflector does with a LIST's answer: one ``json.loads`` of the whole
list, then keeps each object (projected, or whole) and drops the answer. tracemalloc (one
frame) counts what is still allocated after a gc, per kind; "per job" is a TrainJob, a JobSet,
a Job and one pod (the one-node jobs of bench_k8s_cost) or two (the recording's).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import sys
import tracemalloc
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from dispatch.backends.kubeflow.projection import project  # noqa: E402

RECORDED = ROOT / "tests" / "fixtures" / "k8s-recorded"
STAMP = re.compile(r'"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)"')
UID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
KINDS = ("TrainJob", "JobSet", "Job", "Pod")


def running_state(scenario: str, at: int) -> dict[str, list[dict[str, Any]]]:
    """The recording's objects as its first ``at`` lines leave them, by kind."""
    state: dict[tuple[str, str], dict[str, Any]] = {}
    for line in (RECORDED / f"{scenario}.jsonl").read_text().splitlines()[:at]:
        ln = json.loads(line)
        key = (ln["kind"], ln["object"]["metadata"]["name"])
        if ln["type"] == "DELETED":
            state.pop(key, None)
        else:
            state[key] = ln["object"]
    out: dict[str, list[dict[str, Any]]] = {k: [] for k in KINDS}
    for (kind, _), obj in state.items():
        if kind in out:
            out[kind].append(obj)
    return out


def copies(objs: list[dict[str, Any]], n: int, name: str) -> str:
    """A LIST answer's JSON: ``n`` copies of ``objs``, each with its own identity and times."""
    text = json.dumps(objs)
    out = []
    for i in range(n):
        t = text.replace(name, f"{name}-{i:05d}")
        uids = {u: str(uuid.uuid4()) for u in set(UID.findall(t))}
        t = UID.sub(lambda m, u=uids: u[m.group(0)], t)  # type: ignore[misc]
        t = STAMP.sub(lambda m, i=i: '"' + (datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%SZ")
                      + timedelta(seconds=7 * i)).strftime("%Y-%m-%dT%H:%M:%SZ") + '"', t)
        t = re.sub(r'"resourceVersion": "(\d+)"', lambda m, i=i: f'"resourceVersion": '
                   f'"{int(m.group(1)) + 100000 * i}"', t)
        out.append(t[1:-1])
    return "[" + ", ".join(o for o in out if o) + "]"


def held(kind: str, answer: str, projected: bool) -> tuple[int, int]:
    """(bytes still held, objects) once a reflector has kept a LIST answer's objects."""
    gc.collect()
    tracemalloc.start(1)
    try:
        items = json.loads(answer)
        kept = {f"{o['metadata']['name']}": project(kind, o) if projected else o for o in items}
        del items
        gc.collect()
        size, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    count = len(kept)
    del kept
    return size, count


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, action="append", default=[])
    ap.add_argument("--scenario", default="success")
    ap.add_argument("--at", type=int, default=21, help="lines of the recording applied")
    ap.add_argument("--standin", type=int, action="append", default=[],
                    help="also serve N jobs from the stand-in API server (tests/kube_fake)")
    args = ap.parse_args()
    state = running_state(args.scenario, args.at)
    name = state["TrainJob"][0]["metadata"]["name"]
    print(f"### bench_informer_memory: the `{args.scenario}` recording's running job "
          f"(its first {args.at} lines: {', '.join(f'{len(v)} {k}' for k, v in state.items())})")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.node()} "
          f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.2f}")
    print(f"command: {sys.executable} bench/bench_informer_memory.py " + " ".join(sys.argv[1:]))
    print()
    print("| N jobs | kind | whole (managedFields dropped): bytes per object | projected: bytes "
          "per object | JSON per object, whole / projected |")
    print("| --- | --- | --- | --- | --- |")
    for n in args.jobs or [1000]:
        per: dict[tuple[str, bool], float] = {}
        for kind in KINDS:
            objs = state[kind]
            answer = copies(objs, n, name)
            one = json.loads(answer)[: len(objs)]
            for projected in (False, True):
                size, count = held(kind, answer, projected)
                per[(kind, projected)] = size / count
            sent = sum(len(json.dumps(o)) for o in one) / len(one)
            kept = sum(len(json.dumps(project(kind, o))) for o in one) / len(one)
            print(f"| {n:,} | {kind} | {per[(kind, False)]:,.0f} | {per[(kind, True)]:,.0f} | "
                  f"{sent:,.0f} / {kept:,.0f} |")
        for pods in (1, 2):
            whole = sum(per[(k, False)] for k in KINDS[:3]) + pods * per[("Pod", False)]
            kept = sum(per[(k, True)] for k in KINDS[:3]) + pods * per[("Pod", True)]
            print(f"| {n:,} | **a job** (TrainJob, JobSet, Job, {pods} pod{'s' * (pods > 1)}) | "
                  f"{whole / 1024:.1f} KiB | **{kept / 1024:.1f} KiB** | |")
    for n in args.standin:
        standin(n, state, name)


def standin(n: int, state: dict[str, list[dict[str, Any]]], name: str) -> None:
    """The same objects served by the stand-in API server (tests/kube_fake: HTTP, lightkube's
    decoding, the real informer), N copies of the job: what a fresh backend's informer holds
    once synced (tracemalloc over its first discover, as bench_k8s_cost measures it), with the
    projection and with the objects kept whole; then the requests of 5 steady discovers. The
    stand-in runs in this process: the peak counts its answers' encoding too, the held figure
    (after a gc) only what stays, which is the cache."""
    import tempfile
    import time

    sys.path.insert(0, str(ROOT / "tests"))
    from dispatch.backends.kubeflow import informer as inf  # noqa: PLC0415
    from dispatch.backends.kubeflow.backend import KubeflowBackend  # noqa: PLC0415
    from kube_fake import FakeApiServer  # noqa: PLC0415

    fake = FakeApiServer().start()
    # its built-in schemas are a subset of the API reference; the real objects carry more
    fake._validate = lambda _kind, _obj: None  # type: ignore[method-assign]
    try:
        for kind in KINDS:
            for obj in json.loads(copies(state[kind], n, name)):
                obj.setdefault("kind", kind)
                fake.put(obj)
        ns = state["TrainJob"][0]["metadata"]["namespace"]
        conf = fake.write_kubeconfig(Path(tempfile.mkdtemp()) / "kubeconfig", namespace=ns)
        print()
        each = ", ".join(f"{len(state[k])} {k}" for k in KINDS)
        print(f"The stand-in API server, {n:,} jobs ({each} each):")
        print()
        print("| cache | held once synced | per job | peak during the first discover |")
        print("| --- | --- | --- | --- |")
        kept = inf.project
        whole = ("whole", lambda _kind, obj: obj)
        # twice each, alternately: the first backend of a process holds one-time allocations
        for label, keep in (whole, ("projected", kept), whole, ("projected", kept)):
            inf.project = keep  # type: ignore[assignment]
            backend = KubeflowBackend(kubeconfig=str(conf), namespaces=[ns], timeout_s=300,
                                      informer_settings=inf.InformerSettings(sync_timeout_s=600))
            gc.collect()
            tracemalloc.start(1)
            try:
                backend.discover([], [])
                gc.collect()
                size, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
                inf.project = kept
            print(f"| {label} | {size / 2**20:.1f} MiB | {size / n / 1024:.1f} KiB | "
                  f"{peak / 2**20:.1f} MiB |")
            if label == "projected":
                time.sleep(1)
                fake.reset_requests()
                for _ in range(5):
                    backend.discover([], [])
                asked = [(r.method, r.path) for r in fake.requests]
                print(f"\nrequests of 5 steady discovers after the sync: {asked or 'none'}")
            backend.close()
    finally:
        fake.stop()


if __name__ == "__main__":
    main()
