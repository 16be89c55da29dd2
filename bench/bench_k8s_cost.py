"""What refreshing N live TrainJobs costs the API server: dispatch's informer against the
Kubeflow SDK 0.5.0, counted by the API server itself (issue 35, "Cost, measured by the API
server"). A benchmark, not a test: it asserts nothing and prints markdown for bench/RESULTS.md.

    export DISPATCH_K8S_STATE=/var/lib/dispatch-k8s-testbed-bench DISPATCH_K8S_PORT_OFFSET=200
    scripts/k8s-testbed up && eval "$(scripts/k8s-testbed env)"
    export DISPATCH_K8S_STATE DISPATCH_K8S_PORT_OFFSET
    python3 -m venv /tmp/kfsdk-venv && /tmp/kfsdk-venv/bin/pip install 'kubeflow==0.5.0'
    .venv/bin/python bench/bench_k8s_cost.py --jobs 1000
    scripts/k8s-testbed down

What it does, in order:

1. Adds KWOK nodes (110 pods each) so that every job's one pod can run, and submits N
   one-node TrainJobs through dispatch's own path (a SQLite record, ``create_job``, the
   ``Supervisor``'s ticks: create suspended, open the gate), each pod running for a day.
2. Waits until the N pods are Running, then closes that supervisor (its watches end).
3. Baseline: the control plane alone (its leases, KWOK's heartbeats) for as long as the
   measured ticks last, so the figures below can be read against it.
4. dispatch: a fresh backend and supervisor on the same record (a restarted ``dispatch
   supervise``): the first tick (one LIST per collection, then watches), then K steady ticks
   every INTERVAL seconds. ``apiserver_request_total`` is scraped before and after each
   window, the kube-apiserver's CPU time read from /proc; the supervisor's RSS growth over its
   first tick; then, apart (tracing would slow the ticks), what a fresh backend's informer
   holds once synced, as tracemalloc counts it.
5. The SDK (bench/kfsdk_peer.py, its own venv, the same least-privilege identity): R refreshes
   of ``TrainerClient.list_jobs()``, then one refresh of ``get_job(name)`` for every job.
6. Deletes the TrainJobs and the added nodes.
"""

from __future__ import annotations

import argparse
import gc
import math
import os
import platform
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import k8s_bench as kb  # noqa: E402

POD_CAPACITY = 110  # the testbed's KWOK nodes' pod capacity
EXTRA = "kwok-bench-"


def add_nodes(count: int) -> list[str]:
    names = [f"{EXTRA}{i}" for i in range(1, count + 1)]
    for n in names:
        kb.kubectl(
            "apply",
            "-f",
            "-",
            input=f"""apiVersion: v1
kind: Node
metadata:
  name: {n}
  labels: {{dispatch.testbed/kwok: managed, kubernetes.io/hostname: {n},
           kubernetes.io/os: linux, kubernetes.io/arch: amd64, type: kwok}}
  annotations: {{node.alpha.kubernetes.io/ttl: "0"}}
status:
  allocatable: {{cpu: "8", memory: 32Gi, pods: "{POD_CAPACITY}"}}
  capacity: {{cpu: "8", memory: 32Gi, pods: "{POD_CAPACITY}"}}
""",
        )
    return names


def cleanup(nodes: list[str]) -> None:
    kb.kubectl(
        "delete",
        "trainjobs",
        "-n",
        kb.NAMESPACE,
        "-l",
        "dispatch.io/managed=true",
        "--wait=false",
        check=False,
    )
    for n in nodes:
        kb.kubectl("delete", "node", n, "--wait=false", check=False)


def count_pods(phase: str) -> int:
    out = kb.kubectl(
        "get",
        "pods",
        "-n",
        kb.NAMESPACE,
        "--no-headers",
        "-o",
        "name",
        f"--field-selector=status.phase={phase}",
        check=False,
    )
    return len(out.split())


def rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


class Window:
    """Requests and API-server CPU between ``start`` and ``stop``."""

    def __init__(self, api: kb.ApiServer) -> None:
        self.api = api
        self.counts: Counter[tuple[str, str]] = Counter()
        self.cpu = 0.0
        self.wall = 0.0

    def __enter__(self) -> Window:
        self._req, self._cpu, self._t = self.api.requests(), self.api.cpu_s(), time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.wall = time.monotonic() - self._t
        self.cpu = self.api.cpu_s() - self._cpu
        self.counts = kb.delta(self._req, self.api.requests())


def submit_all(rig: kb.DispatchRig, n: int, timeout: float) -> dict[str, float]:
    t0 = time.monotonic()
    ids = [rig.add_job(f"cost-{i:04d}", {"DISPATCH_TESTBED_SECONDS": "86400"}) for i in range(n)]
    ticks = 0
    while time.monotonic() - t0 < timeout:
        rig.supervisor.tick()
        ticks += 1
        running = count_pods("Running")
        print(
            f"  submit tick {ticks}: {running}/{n} pods Running ({time.monotonic() - t0:.0f} s)",
            file=sys.stderr,
        )
        if running >= n:
            break
        time.sleep(2)
    states = Counter(rig.status(j).state.value for j in ids)
    return {
        "seconds": time.monotonic() - t0,
        "ticks": ticks,
        "running_pods": count_pods("Running"),
        **{f"dispatch {k}": v for k, v in states.items()},
    }


def measure_dispatch(store: Any, api: kb.ApiServer, ticks: int, interval: float) -> dict[str, Any]:
    watches0 = api.watches()
    rig = kb.reopen_rig(store)
    gc.collect()
    rss0 = rss_kib()
    with Window(api) as first:
        t = time.monotonic()
        rep = rig.supervisor.tick()
        first_wall = time.monotonic() - t
    rss1 = rss_kib()
    time.sleep(interval)
    walls = []
    informer = rig.backend.informer
    probes0 = informer.probes if informer is not None else 0
    with Window(api) as steady:
        for _ in range(ticks):
            t = time.monotonic()
            rig.supervisor.tick()
            walls.append(time.monotonic() - t)
            time.sleep(max(0.0, interval - walls[-1]))
    # GET /version asked because every watch was silent for stall_after_s (the bench's
    # totals leave /version out with the controllers' discovery: counted here, dispatch's own)
    probes = (informer.probes if informer is not None else 0) - probes0
    disc = rig.backend.last
    states = Counter(o.state.value for o in disc.objects) if disc else Counter()
    watches = api.watches()
    watches.subtract(watches0)
    rig.close()
    return {
        "first": first,
        "steady": steady,
        "first_wall": first_wall,
        "walls": walls,
        "jobs": rep.jobs,
        "states": states,
        "rss": (rss1 - rss0) * 1024,
        "watches": watches,
        "probes": probes,
    }


def informer_memory() -> tuple[int, int]:
    """What a fresh backend's informer holds once synced (its first discover), as tracemalloc
    counts it (one frame: cheap): (bytes still held after it and a gc, the peak during it).
    Measured apart from the ticks, which tracing would slow."""
    backend = kb.KubeflowBackend(kubeconfig=kb.KUBECONFIG, namespaces=[kb.NAMESPACE])
    gc.collect()
    tracemalloc.start(1)
    try:
        backend.discover([], [])
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        backend.close()
    return held, peak


def measure_sdk(api: kb.ApiServer, refreshes: int, names: list[str]) -> dict[str, Any]:
    peer = kb.SdkPeer()
    try:
        with Window(api) as lst:
            answers = [peer.ask("list") for _ in range(refreshes)]
        with Window(api) as get:
            got = peer.ask("get " + " ".join(names))
    finally:
        peer.close()
    statuses = Counter(v.split(";")[0] for v in answers[-1]["jobs"].values())
    return {
        "list": lst,
        "get": get,
        "list_walls": [a["seconds"] for a in answers],
        "get_wall": got["seconds"],
        "statuses": statuses,
        "get_statuses": Counter(v.split(";")[0] for v in got["jobs"].values()),
    }


def row(what: str, w: Window, per: int, base_rate: float) -> str:
    cpu = (w.cpu - base_rate * w.wall) / per
    return (
        f"| {what} | {kb.total(w.counts, ['LIST']) / per:g} | "
        f"{kb.total(w.counts, ['GET']) / per:g} | "
        f"{kb.total(w.counts, ['WATCH']) / per:g} | {w.cpu / per * 1000:.1f} | "
        f"{cpu * 1000:.1f} | {w.wall / per:.2f} | "
        f"{kb.fmt(w.counts, per, kb.NOISE)} |"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=1000)
    ap.add_argument("--ticks", type=int, default=10, help="steady dispatch ticks (K)")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between ticks")
    ap.add_argument("--sdk-refreshes", type=int, default=3)
    ap.add_argument("--submit-timeout", type=float, default=1800.0)
    ap.add_argument(
        "--reuse",
        type=Path,
        default=None,
        help="the work folder of an earlier run whose jobs still run: measure them again",
    )
    ap.add_argument("--keep", action="store_true", help="leave the jobs and nodes on the cluster")
    args = ap.parse_args()
    api = kb.ApiServer()
    extra = max(0, math.ceil(args.jobs / POD_CAPACITY) + 1 - 4)
    nodes = [f"{EXTRA}{i}" for i in range(1, extra + 1)]
    if args.reuse is None:
        cleanup(nodes)
    work = args.reuse or Path(tempfile.mkdtemp(prefix="dispatch-bench-k8s-cost-"))
    print(f"work folder: {work}", file=sys.stderr)
    try:
        rig = kb.dispatch_rig(work)
        if args.reuse is None:
            add_nodes(extra)
            sub = submit_all(rig, args.jobs, args.submit_timeout)
        else:
            sub = {"reused": 1.0, "running_pods": count_pods("Running")}
        rig.close()
        print(f"submitted: {sub}", file=sys.stderr)
        time.sleep(5)
        with Window(api) as base:
            time.sleep(args.ticks * args.interval)
        base_rate = base.cpu / base.wall
        d = measure_dispatch(rig.store, api, args.ticks, args.interval)
        print(f"dispatch done: {d['states']}", file=sys.stderr)
        d["held"], d["peak"] = informer_memory()
        names = sorted(
            kb.kubectl(
                "get", "trainjobs", "-n", kb.NAMESPACE, "-o", "jsonpath={.items[*].metadata.name}"
            ).split()
        )
        s = measure_sdk(api, args.sdk_refreshes, names)
    finally:
        if not args.keep:
            cleanup(nodes)
    print(f"### bench_k8s_cost: {args.jobs} TrainJobs, {len(names)} on the cluster")
    print(
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.node()} "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"Kubernetes v1.36.3, JobSet v0.12.0, Trainer v2.3.0, KWOK v0.8.0 "
        f"({4 + extra} nodes); kubeflow SDK {kb.sdk_version()}"
    )
    print(f"command: {sys.executable} bench/bench_k8s_cost.py " + " ".join(sys.argv[1:]))
    if "reused" in sub:
        print(f"submission: reused the jobs of {work}; {sub['running_pods']:.0f} pods Running")
    else:
        print(
            f"submission: {sub['seconds']:.0f} s, {sub['ticks']:.0f} supervisor ticks, "
            f"{sub['running_pods']:.0f} pods Running; dispatch states "
            + ", ".join(f"{k.split()[1]} {v}" for k, v in sub.items() if k.startswith("disp"))
        )
    print()
    print(
        "| per refresh | LIST | GET | WATCH ended | API-server CPU ms | minus baseline ms "
        "| wall s | every request (leases, endpoints left out) |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    print(
        row(
            f"baseline: nothing of ours, {base.wall:.0f} s (per {args.interval:g} s)",
            base,
            args.ticks,
            0.0,
        )
    )
    print(row("dispatch: first tick (fresh informer)", d["first"], 1, base_rate))
    print(row(f"dispatch: steady tick (mean of {args.ticks})", d["steady"], args.ticks, base_rate))
    print(
        row(
            f"SDK list_jobs() (mean of {args.sdk_refreshes})",
            s["list"],
            args.sdk_refreshes,
            base_rate,
        )
    )
    print(row(f"SDK get_job() x {len(names)} (one refresh)", s["get"], 1, base_rate))
    print()
    print(
        f"- dispatch: {d['jobs']} live jobs ticked; its discovery: {dict(d['states'])}; "
        f"first tick {d['first_wall']:.2f} s wall, steady ticks "
        f"{min(d['walls']):.3f}-{max(d['walls']):.3f} s (mean "
        f"{sum(d['walls']) / len(d['walls']):.3f} s)"
    )
    print(
        f"- dispatch's informer, synced: {d['held'] / 2**20:.1f} MiB held (peak "
        f"{d['peak'] / 2**20:.1f} MiB; tracemalloc over a fresh backend's first discover, "
        f"the six collections listed and watched); the supervisor's RSS grew "
        f"{d['rss'] / 2**20:.1f} MiB over its first tick"
    )
    print(
        f"- dispatch's own GET /version over the {args.ticks} steady ticks (the informer's "
        f"liveness probe when every watch has been silent for 10 s): {d['probes']}"
    )
    print(
        f"- watches dispatch holds open after the steady ticks "
        f"(apiserver_longrunning_requests, after minus before): "
        f"{kb.fmt(+d['watches'])}"
    )
    print(
        f"- SDK list_jobs(): {', '.join(f'{w:.1f}' for w in s['list_walls'])} s wall; "
        f"statuses {dict(s['statuses'])}; get_job() x {len(names)}: {s['get_wall']:.1f} s "
        f"wall, statuses {dict(s['get_statuses'])}"
    )


if __name__ == "__main__":
    main()
