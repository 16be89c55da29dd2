"""The kubeflow informer at 1,000 and 5,000 TrainJobs, measured by the API server, with the
Kubeflow SDK's cost for the same question in the same run (issue 49, the Kubernetes row). A
benchmark, not a test: it asserts nothing and prints markdown for bench/RESULTS.md.

    export DISPATCH_K8S_PORT_OFFSET=500 DISPATCH_K8S_STATE=/var/lib/dispatch-k8s-k8sscale
    scripts/k8s-testbed up
    python3 -m venv /tmp/kfsdk-venv && /tmp/kfsdk-venv/bin/pip install 'kubeflow==0.5.0'
    .venv/bin/python bench/bench_k8s_scale.py --jobs 1000 --jobs 5000 --running 100
    scripts/k8s-testbed down

For each N, in order:

1. Creates TrainJobs up to N, as the cluster's admin, ``--concurrency`` POSTs at a time. Each is
   the TrainJob dispatch itself submits (``build_trainjob``: its labels, token, gate
   annotation), *suspended* (a gated submission) except the first ``--running``, whose gate is
   open so that their pods run on the KWOK nodes and the cache holds pods too. Suspended
   jobs, because N running pods would need N/110 more KWOK nodes and minutes of scheduling on
   this 2-core machine; a suspended TrainJob still gets its JobSet and its (suspended) Job from
   the Trainer and JobSet controllers, so the informer lists and watches the same four
   collections. Waits until there is a JobSet and a Job per TrainJob (bounded).
2. Baseline: the control plane alone, for as long as the measured ticks last.
3. dispatch, in a child process of its own (so its RSS is the informer's and nothing else): a
   fresh ``KubeflowBackend`` with the testbed's least-privilege identity, its ``discover`` called
   with every job's token as the supervisor's tick calls it. The first discover (the informer's
   LIST per collection, then its watches), then K steady discovers every INTERVAL seconds.
   ``apiserver_request_total`` (by verb and resource) and ``apiserver_response_sizes_sum`` are
   scraped as the admin before and after each window; the kube-apiserver's CPU from /proc; the
   child's own CPU (every thread: the watches' too) and RSS. Then what the cache holds: the
   informer's objects walked per kind (every dict, list, string and number counted once, in
   the order TrainJob, JobSet, Job, Pod, Node, Event: a string shared by kinds is counted with
   the first), and, as bench_k8s_cost measures it, tracemalloc over a second fresh backend's
   first discover (held after a gc).
4. The SDK (bench/kfsdk_peer.py in its own venv, the same identity): ``list_jobs()`` once, its
   requests counted the same way, its wall time, CPU and peak RSS.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import ssl
import subprocess
import sys
import tempfile
import time
import tracemalloc
import urllib.request
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import k8s_bench as kb  # noqa: E402

from dispatch.backends.base import Submission  # noqa: E402
from dispatch.backends.kubeflow.manifest import build_trainjob  # noqa: E402

KINDS = ("TrainJob", "JobSet", "Job", "Pod", "Node", "Event")


# ---------------------------------------------------------------- the cluster, as its admin


class Admin:
    """Plain HTTPS as the cluster's admin (no kubectl: its discovery would be counted)."""

    def __init__(self) -> None:
        pki = kb.STATE / "pki"
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
        self.server = kb._server()

    def call(self, method: str, path: str, body: dict[str, Any] | None = None,
             content_type: str = "application/json") -> tuple[int, dict[str, Any]]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": content_type})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=120) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read() or b"{}")

    def count(self, path: str) -> int:
        """Objects in a collection: pages of metadata only (cheap), as the admin."""
        total, cont = 0, ""
        while True:
            _, got = self.call("GET", f"{path}?limit=2000" + (f"&continue={cont}" if cont else ""))
            total += len(got.get("items", []))
            cont = got.get("metadata", {}).get("continue", "")
            if not cont:
                return total


TJ_PATH = f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{kb.NAMESPACE}/trainjobs"
JS_PATH = f"/apis/jobset.x-k8s.io/v1alpha2/namespaces/{kb.NAMESPACE}/jobsets"
JOB_PATH = f"/apis/batch/v1/namespaces/{kb.NAMESPACE}/jobs"
POD_PATH = f"/api/v1/namespaces/{kb.NAMESPACE}/pods"


def trainjob(i: int, gated: bool) -> dict[str, Any]:
    """The TrainJob dispatch submits for job ``i`` (one node, a day's run)."""
    from dispatch.backends.registry import traits
    from dispatch.core.spec import parse_spec

    spec = parse_spec({
        "name": f"scale-{i:05d}", "backend": "kubeflow", "command": ["python", "train.py"],
        "env": {"DISPATCH_TESTBED_SECONDS": "86400"},
        "kubeflow": {"namespace": kb.NAMESPACE, "runtime": kb.RUNTIME},
    }, f"<scale-{i}>", backends=traits())
    sub = Submission(job_id=f"scale{i:05d}", number=1, token=f"scale{i:05d}.1", spec=spec,
                     gated=gated)
    return build_trainjob(sub, kb.NAMESPACE)


def create_upto(admin: Admin, have: int, n: int, running: int, concurrency: int,
                settle_s: float) -> dict[str, Any]:
    t0 = time.monotonic()
    codes: Counter[int] = Counter()

    def one(i: int) -> int:
        for _ in range(5):  # a webhook timing out under load: the same POST again
            code, _ = admin.call("POST", TJ_PATH, trainjob(i, gated=i >= running))
            if code not in (500, 503, 504, 429):
                return code
            time.sleep(1)
        return code

    with ThreadPoolExecutor(concurrency) as pool:
        for code in pool.map(one, range(have, n)):
            codes[code] += 1
    created = time.monotonic() - t0
    # the controllers' share: a JobSet and a Job per TrainJob (bounded wait: the Trainer and
    # JobSet controllers make a few a second here, loaded; the run measures what is there)
    counts = {}
    while True:
        counts = {what: admin.count(p) for what, p in
                  (("trainjobs", TJ_PATH), ("jobsets", JS_PATH), ("jobs", JOB_PATH))}
        print(f"  N={n}: {counts} ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        if min(counts.values()) >= n or time.monotonic() - t0 > settle_s:
            break
        time.sleep(10)
    return {"create_s": created, "settled_s": time.monotonic() - t0, "codes": dict(codes),
            **counts, "pods": admin.count(POD_PATH)}


# ---------------------------------------------------------------- dispatch, in a child


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def cpu_s() -> float:
    t = os.times()
    return t.user + t.system


def deep_size(obj: Any, seen: set[int]) -> int:
    """Bytes of ``obj`` and everything it holds, each object counted once across calls."""
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    size = sys.getsizeof(obj)
    if isinstance(obj, dict):
        for k, v in obj.items():
            size += deep_size(k, seen) + deep_size(v, seen)
    elif isinstance(obj, list | tuple):
        for v in obj:
            size += deep_size(v, seen)
    return size


def window(api: kb.ApiServer) -> tuple[Counter[tuple[str, str, str]], Counter[tuple[str, str]],
                                       float, float]:
    return api.requests(), response_bytes(api), api.cpu_s(), time.monotonic()


def response_bytes(api: kb.ApiServer) -> Counter[tuple[str, str]]:
    out: Counter[tuple[str, str]] = Counter()
    for lab, v in api._scrape("apiserver_response_sizes_sum"):
        out[(lab.get("verb", ""), lab.get("resource", ""))] += int(v)
    return out


def closed(api: kb.ApiServer, start: tuple[Any, ...]) -> dict[str, Any]:
    req, sizes, cpu, t = start
    wall = time.monotonic() - t
    counts = kb.delta(req, api.requests())
    after = response_bytes(api)
    return {
        "wall": wall,
        "api_cpu": api.cpu_s() - cpu,
        "counts": {f"{v} {r}": n for (v, r), n in counts.items()},
        "bytes": {f"{v} {r}": after[k] - sizes.get(k, 0) for k in after
                  if (v := k[0]) and (r := k[1]) is not None and after[k] - sizes.get(k, 0)},
    }


def synced(backend: Any, tokens: list[str]) -> tuple[Any, list[str]]:
    """The first discover, tried again as the supervisor's next tick would while it raises
    SchedulerUnreachable (a first LIST slower than ``sync_timeout_s``): the answer, and each
    failed try's words."""
    from dispatch.core.model import SchedulerUnreachable

    unanswered = []
    while True:
        try:
            return backend.discover(tokens, []), unanswered
        except SchedulerUnreachable as err:
            unanswered.append(err.reason)
            if len(unanswered) >= 20:
                raise


def child(tokens_file: Path, ticks: int, interval: float) -> None:
    """dispatch's side, in its own process: prints one JSON line."""
    from dispatch.backends.kubeflow.backend import KubeflowBackend

    tokens = tokens_file.read_text().split()
    api = kb.ApiServer()
    gc.collect()
    rss0 = status_kib("VmRSS")
    backend = KubeflowBackend(kubeconfig=kb.KUBECONFIG, namespaces=[kb.NAMESPACE])
    w = window(api)
    c0 = cpu_s()
    first, unanswered = synced(backend, tokens)
    first_cpu = cpu_s() - c0
    first_w = closed(api, w)
    rss1 = status_kib("VmRSS")
    informer = backend.informer
    assert informer is not None
    lists0, probes0 = informer.lists(), informer.probes
    time.sleep(interval)
    walls, cpus = [], []
    w = window(api)
    c0 = cpu_s()
    for _ in range(ticks):
        t, c = time.monotonic(), cpu_s()
        disc = backend.discover(tokens, [])
        walls.append(time.monotonic() - t)
        cpus.append(cpu_s() - c)
        time.sleep(max(0.0, interval - walls[-1]))
    steady_cpu = cpu_s() - c0  # the ticks and the watch threads between them
    steady_w = closed(api, w)
    lists = informer.lists() - lists0
    probes = informer.probes - probes0
    rss2 = status_kib("VmRSS")
    # what the cache holds, per kind, walked
    seen: set[int] = set()
    per_kind: dict[str, list[int]] = {}
    with informer.cond:  # the watch threads apply events under it: they wait for the walk
        reflectors = list(informer._reflectors.values())
        for kind in KINDS:
            for r in reflectors:
                if r.kind == kind:
                    got = per_kind.setdefault(kind, [0, 0])
                    got[0] += deep_size(r.items, seen) + deep_size(r.gone, seen)
                    got[1] += len(r.items)
    backend.close()
    del backend, informer, reflectors
    gc.collect()
    # as bench_k8s_cost measures it: tracemalloc over a fresh backend's first discover
    again = KubeflowBackend(kubeconfig=kb.KUBECONFIG, namespaces=[kb.NAMESPACE])
    gc.collect()
    tracemalloc.start(1)
    try:
        synced(again, tokens)
        gc.collect()
        held, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        again.close()
    print(json.dumps({
        "first": first_w, "first_cpu": first_cpu, "steady": steady_w, "steady_cpu": steady_cpu,
        "walls": walls, "cpus": cpus, "lists": lists, "probes": probes,
        "rss0": rss0, "rss1": rss1, "rss2": rss2, "hwm": status_kib("VmHWM"),
        "per_kind": per_kind, "held": held, "peak": peak,
        "reports": len(first.objects), "unanswered": unanswered,
        "states": Counter(o.state.value for o in disc.objects),
    }))


def run_child(tokens: list[str], ticks: int, interval: float) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("w", suffix=".tokens", delete=False) as f:
        f.write("\n".join(tokens))
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", f.name, "--ticks", str(ticks),
             "--interval", str(interval)],
            capture_output=True, text=True, check=False, timeout=1800,
        )
    finally:
        os.unlink(f.name)
    if done.returncode != 0:
        raise RuntimeError(f"the dispatch child failed: {done.stderr[-3000:]}")
    answer: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return answer


# ---------------------------------------------------------------- the SDK


def measure_sdk(api: kb.ApiServer) -> dict[str, Any]:
    peer = kb.SdkPeer()
    try:
        w = window(api)
        answer = peer.ask("list")
        out = closed(api, w)
    finally:
        peer.close()
    out["answer_wall"] = answer["seconds"]
    out["cpu"] = answer.get("cpu")
    out["rss_kib"] = answer.get("rss_kib")
    out["hwm_kib"] = answer.get("hwm_kib")
    out["statuses"] = Counter(v.split(";")[0] for v in answer["jobs"].values())
    return out


# ---------------------------------------------------------------- the report


def counted(w: dict[str, Any], verbs: set[str], per: float = 1.0) -> float:
    skip = kb.NOISE | kb.DISCOVERY
    return sum(n for k, n in w["counts"].items()
               if k.split(" ", 1)[0] in verbs and k.split(" ", 1)[1] not in skip) / per


def every(w: dict[str, Any], per: float = 1.0) -> str:
    skip = kb.NOISE
    items = sorted((k, n / per) for k, n in w["counts"].items() if k.split(" ", 1)[1] not in skip)
    return ", ".join(f"{k} {n:g}" for k, n in items) or "none"


def report(n: int, made: dict[str, Any], base: dict[str, Any], d: dict[str, Any],
           s: dict[str, Any] | None, ticks: int, interval: float) -> None:
    rate = base["api_cpu"] / base["wall"]
    print(f"#### N = {n:,} TrainJobs")
    print()
    print(f"- on the cluster: {made['trainjobs']:,} TrainJobs, {made['jobsets']:,} JobSets, "
          f"{made['jobs']:,} Jobs, {made['pods']:,} pods; this step's POSTs took "
          f"{made['create_s']:.0f} s (answers {made['codes']}), settled after "
          f"{made['settled_s']:.0f} s")
    print()
    print("| | LIST | GET | WATCH | API-server CPU ms (minus baseline) | wall s | "
          "LIST answers' bytes | every request (leases, endpoints, probes left out) |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")

    def line(what: str, w: dict[str, Any], per: float) -> None:
        listed = sum(v for k, v in w["bytes"].items() if k.startswith("LIST "))
        print(f"| {what} | {counted(w, {'LIST'}, per):g} | {counted(w, {'GET'}, per):g} | "
              f"{counted(w, {'WATCH'}, per):g} | {w['api_cpu'] / per * 1000:.0f} "
              f"({(w['api_cpu'] - rate * w['wall']) / per * 1000:.0f}) | {w['wall'] / per:.2f} | "
              f"{listed / per / 2**20:.1f} MiB | {every(w, per)} |")

    line(f"baseline: the control plane alone, per {interval:g} s", base, ticks)
    line("dispatch: first discover (a fresh informer)", d["first"], 1)
    line(f"dispatch: steady discover (mean of {ticks})", d["steady"], ticks)
    if s is not None:
        line("SDK `list_jobs()` (one refresh)", s, 1)
    print()
    kib = 1024
    tj = d["per_kind"].get("TrainJob", [0, 1])
    print(f"- dispatch's informer: **{d['held'] / n / kib:.1f} KiB per TrainJob** held in all "
          f"(tracemalloc over a fresh backend's first discover: {d['held'] / 2**20:.1f} MiB "
          f"held, peak {d['peak'] / 2**20:.1f} MiB; everything the cache holds, its JobSets, "
          f"Jobs, pods, nodes and Warning Events included, over the {n:,} TrainJobs)")
    print("- the cache walked per kind: " + "; ".join(
        f"{k} {v[1]:,} objects, {v[0] / max(v[1], 1):,.0f} B each ({v[0] / 2**20:.1f} MiB)"
        for k, v in d["per_kind"].items()) + f"; TrainJob alone {tj[0] / max(tj[1], 1) / kib:.1f}"
          " KiB")
    print(f"- the child's RSS: {d['rss0'] / kib:.0f} MiB before, {d['rss1'] / kib:.0f} MiB "
          f"after the first discover, {d['rss2'] / kib:.0f} MiB after the steady ticks, peak "
          f"{d['hwm'] / kib:.0f} MiB (before the tracemalloc pass: {d['rss2'] / kib:.0f})")
    tries = d["unanswered"]
    print(f"- the first discover: {d['first']['wall']:.2f} s wall, {d['first_cpu']:.2f} s of "
          f"the child's CPU; {d['reports']:,} jobs reported"
          + (f"; answered at try {len(tries) + 1}, the ones before raised "
             f"SchedulerUnreachable ({tries[0]})" if tries else ""))
    print(f"- a steady discover: {min(d['walls']) * 1000:.0f}-{max(d['walls']) * 1000:.0f} ms "
          f"wall, {sum(d['cpus']) / len(d['cpus']) * 1000:.0f} ms CPU (mean; the whole window's "
          f"CPU, the watch threads' included: {d['steady_cpu'] / ticks * 1000:.0f} ms per "
          f"{interval:g} s); the informer's own LISTs in the window: {d['lists']}, its "
          f"GET /version probes: {d['probes']}; states {dict(d['states'])}")
    if s is not None:
        print(f"- the SDK's `list_jobs()`: {s['answer_wall']:.1f} s wall, {s['cpu']:.1f} s "
              f"CPU, RSS {s['rss_kib'] / kib:.0f} MiB after, peak {s['hwm_kib'] / kib:.0f} MiB; "
              f"statuses {dict(s['statuses'])}")
    print()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, action="append", default=[])
    ap.add_argument("--running", type=int, default=100,
                    help="of the TrainJobs, this many with their gate open (pods run)")
    ap.add_argument("--ticks", type=int, default=10, help="steady discovers (K)")
    ap.add_argument("--interval", type=float, default=2.0, help="seconds between them")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--settle", type=float, default=900.0,
                    help="seconds to wait, per N, for a JobSet and a Job per TrainJob")
    ap.add_argument("--no-sdk", action="store_true")
    ap.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        child(args.child, args.ticks, args.interval)
        return
    api = kb.ApiServer()
    admin = Admin()
    print(f"### bench_k8s_scale: {', '.join(f'{n:,}' for n in args.jobs)} TrainJobs")
    print(f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; machine: {platform.node()} "
          f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}; "
          f"load average {os.getloadavg()[0]:.1f} at the start; Kubernetes v1.36.3, JobSet "
          f"v0.12.0, Trainer v2.3.0, KWOK v0.8.0 (4 nodes); kubeflow SDK {kb.sdk_version()}")
    print(f"command: {sys.executable} bench/bench_k8s_scale.py " + " ".join(sys.argv[1:]))
    print()
    have = admin.count(TJ_PATH)
    for n in sorted(args.jobs):
        made = create_upto(admin, have, n, args.running, args.concurrency, args.settle)
        have = n
        tokens = [f"scale{i:05d}.1" for i in range(n)]
        time.sleep(5)
        w = window(api)
        time.sleep(args.ticks * args.interval)
        base = closed(api, w)
        d = run_child(tokens, args.ticks, args.interval)
        s = None if args.no_sdk else measure_sdk(api)
        report(n, made, base, d, s, args.ticks, args.interval)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
