"""A steady kubeflow look's CPU when it maps every TrainJob (before issue 49's changed looks)
and when it maps only those whose objects changed (backends/kubeflow/changes.py), on the
stand-in API server (tests/kube_fake, in this process). A benchmark, not a test: it asserts
nothing and prints markdown for bench/RESULTS.md. No cluster needed.

    .venv/bin/python bench/bench_kubeflow_changed_look.py --jobs 1000 --jobs 5000

Per N: N TrainJobs submitted through the real KubeflowBackend (suspended, as most of
bench_k8s_scale's are), RUNNING of them materialized with a running pod each; one first look,
then LOOKS steady looks each way (the same backend, the same informer cache; "every job
mapped" forgets the kept reports before each look). CPU is the process's (every thread; the
stand-in is idle on a steady look, which makes no request). Then one TrainJob's pod changes
and the next look's mapped count is read.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "tests"), str(ROOT)]

from tests.specs import parse_spec  # noqa: E402

from dispatch.backends.base import Submission  # noqa: E402
from dispatch.backends.kubeflow.backend import KubeflowBackend  # noqa: E402
from kube_fake import FakeApiServer  # noqa: E402
from kube_fake import trainer as tr  # noqa: E402

LOOKS = 10


def run(n: int, running: int) -> dict[str, float]:
    fake = FakeApiServer().start()
    with tempfile.TemporaryDirectory() as tmp:
        conf = fake.write_kubeconfig(Path(tmp) / "kubeconfig", namespace="team")
        fake.put(tr.node("n1"))
        backend = KubeflowBackend(kubeconfig=str(conf), timeout_s=60)
        spec = parse_spec({"name": "bench", "command": ["torchrun", "train.py"],
                           "backend": "kubeflow", "nodes": 1,
                           "kubeflow": {"runtime": "torch-distributed", "image": "trainer:1"}})
        tokens, refs = [], []
        for i in range(n):
            token = f"job-{i}.0"
            refs.append(backend.submit(Submission(job_id=f"job-{i}", number=0, token=token,
                                                  spec=spec, gated=i >= running)))
            tokens.append(token)
        pods = {}
        for ref in refs[:running]:
            ns, name = ref.split("/")
            pods[ref] = tr.materialize(fake, ns, name, ["n1"])
        backend.discover(tokens, refs)
        time.sleep(1.0)  # let the watches deliver the materialized objects
        backend.discover(tokens, refs)

        def steady(forget: bool) -> list[float]:
            out = []
            for _ in range(LOOKS):
                if forget:
                    backend._reports.kept.clear()
                c0 = time.process_time()
                backend.discover(tokens, refs)
                out.append((time.process_time() - c0) * 1000)
            return out

        full = steady(True)
        backend.discover(tokens, refs)  # keeps every report again
        changed = steady(False)
        mapped = backend._reports.mapped
        ns, _ = refs[0].split("/")
        tr.terminate(fake, ns, pods[refs[0]][0], reason="Error", exit_code=1, at=tr.T2)
        time.sleep(1.0)
        backend.discover(tokens, refs)
        one = backend._reports.mapped - mapped
        backend.close()
    fake.stop()
    return {"full": statistics.median(full), "changed": statistics.median(changed),
            "one": one}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--jobs", type=int, action="append", default=[])
    ap.add_argument("--running", type=int, default=64)
    args = ap.parse_args()
    sizes = sorted(args.jobs or [1000])
    print(f"### bench_kubeflow_changed_look: {', '.join(f'{n:,}' for n in sizes)} TrainJobs "
          f"({args.running} running), the stand-in API server")
    print(f"\n{platform.python_implementation()} {platform.python_version()}, "
          f"{platform.machine()}; median of {LOOKS} steady looks each way\n")
    print("| TrainJobs | steady look, every job mapped | steady look, changed only "
          "| TrainJobs mapped after one pod changes |")
    print("| --- | --- | --- | --- |")
    for n in sizes:
        r = run(n, min(args.running, n))
        print(f"| {n:,} | {r['full']:.1f} ms CPU | {r['changed']:.1f} ms CPU | {r['one']:.0f} |",
              flush=True)


if __name__ == "__main__":
    main()
