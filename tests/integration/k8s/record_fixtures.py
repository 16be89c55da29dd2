"""Record what the real controllers write, as dispatch's watches see it, for the replay tests
(tests/unit/backends/kubeflow/test_kubeflow_replay.py). Run against the testbed (scripts/
k8s-testbed up, the `env` exports); it rewrites tests/fixtures/k8s-recorded/*.jsonl:

    python tests/integration/k8s/record_fixtures.py [SCENARIO...]

Each scenario is run with the real CLI (`dispatch run`, its own record in a temporary folder)
while one watch per collection dispatch reads (TrainJobs, JobSets, Jobs, Pods and Warning
Events of the namespace, the Nodes) writes every event, in the order this process received
them across the watches, one JSON line each: {"seq", "at" (UTC, when received), "kind",
"type", "object"}. The first lines of each collection are its LIST (type "LISTED"). Objects
keep everything but metadata.managedFields."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from dispatch.backends.kubeflow.client import ClientSettings, KubeClient, WatchStream
from dispatch.backends.kubeflow.look import NODES, collections_of, events_of

REPO = Path(__file__).resolve().parents[3]
OUT = REPO / "tests" / "fixtures" / "k8s-recorded"

# name -> (env of the trainer, nodes): the stock runtime (JobSet's webhook defaults its pods to
# restartPolicy OnFailure, so a failing container crash-loops until the Job's backoffLimit).
SCENARIOS: dict[str, tuple[dict[str, str], int]] = {
    "success": ({"DISPATCH_TESTBED_SECONDS": "2"}, 2),
    "exit3": (
        {
            "DISPATCH_TESTBED_SECONDS": "1",
            "DISPATCH_TESTBED_EXIT": "3",
            "DISPATCH_TESTBED_MESSAGE": "loss is nan at step 7",
        },
        1,
    ),
    "oom": ({"DISPATCH_TESTBED_SECONDS": "1", "DISPATCH_TESTBED_OOM": "1"}, 1),
}


class Recorder:
    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.lines: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.streams: list[WatchStream] = []
        self.threads: list[threading.Thread] = []
        self.ready = threading.Barrier(len(collections_of(namespace)) + 3)
        for w in [*collections_of(namespace), events_of(namespace), NODES]:
            t = threading.Thread(target=self._watch, args=(w,), daemon=True)
            self.threads.append(t)
            t.start()
        self.ready.wait(timeout=60)

    def _add(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        obj.get("metadata", {}).pop("managedFields", None)
        with self.lock:
            self.lines.append(
                {
                    "seq": len(self.lines) + 1,
                    "at": datetime.now(UTC).isoformat(),
                    "kind": kind,
                    "type": etype,
                    "object": obj,
                }
            )

    def _watch(self, w: Any) -> None:
        kind = w.res._api_info.resource.kind
        items, rv = self.kube.list_versioned(w.res, w.namespace, dict(w.labels), dict(w.fields))
        for obj in items:
            self._add(kind, "LISTED", obj)
        stream = self.kube.open_watch(w.res, w.namespace, dict(w.labels), rv, 600, dict(w.fields))
        with self.lock:
            self.streams.append(stream)
        self.ready.wait(timeout=60)
        try:
            for etype, obj in stream.events():
                if etype != "BOOKMARK":
                    self._add(kind, etype, obj)
        except Exception:  # noqa: BLE001 - aborted at the end
            if not self.stopping.is_set():
                raise

    def stop(self) -> list[dict[str, Any]]:
        self.stopping.set()
        with self.lock:
            for s in self.streams:
                s.abort()
        for t in self.threads:
            t.join(10)
        return self.lines


def record(name: str, namespace: str) -> Path:
    env_vars, nodes = SCENARIOS[name]
    kube = KubeClient(ClientSettings(kubeconfig=os.environ["DISPATCH_KUBECONFIG"]))
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / f"{name}.yaml"
        spec.write_text(
            yaml.safe_dump(
                {
                    "name": f"rec-{name}",
                    "backend": "kubeflow",
                    "command": ["python", "train.py"],
                    "nodes": nodes,
                    "env": env_vars,
                    "kubeflow": {"namespace": namespace, "runtime": "torch-distributed"},
                }
            )
        )
        env = {
            **os.environ,
            "DISPATCH_STORE": str(Path(tmp) / "record.sqlite3"),
            "XDG_STATE_HOME": str(Path(tmp) / "state"),
        }
        recorder = Recorder(kube, namespace)
        done = subprocess.run(
            [sys.executable, "-m", "dispatch.cli", "run", str(spec), "--json", "--poll", "0.5"],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        lines = recorder.stop()
        final = json.loads(done.stdout)
        for ref in final.get("objects", []):
            subprocess.run(
                [
                    str(REPO / "scripts" / "k8s-testbed"),
                    "kubectl",
                    "delete",
                    "trainjob",
                    ref.split("/")[-1],
                    "-n",
                    namespace,
                    "--wait=false",
                ],
                check=False,
                capture_output=True,
            )
    kube.close()
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    print(
        f"{path}: {len(lines)} events; dispatch said {final['state']} / "
        f"{(final.get('cause') or {}).get('kind')}"
    )
    return path


if __name__ == "__main__":
    for scenario in sys.argv[1:] or list(SCENARIOS):
        record(scenario, os.environ.get("DISPATCH_K8S_NAMESPACE", "dispatch"))
