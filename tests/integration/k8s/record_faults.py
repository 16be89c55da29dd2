"""Record what the real API server says to dispatch's watches through a fault, for the fault
replays (tests/unit/backends/kubeflow/test_kubeflow_replay_faults.py). Run against a testbed of
your own, as record_fixtures.py (it deletes everything in the namespace before and after, and
restarts that testbed's kube-apiserver); it rewrites tests/fixtures/k8s-recorded/fault-*.jsonl
(docs/k8s-testbed.md):

    python tests/integration/k8s/record_faults.py [FAULT...]

Each fault is recorded while a short job (dispatch's runtime, one node) runs to success with the
real CLI, as in test_kubeflow_faults.py: ``apiserver`` restarts kube-apiserver mid-watch;
``compact`` compacts etcd past every resourceVersion the watches hold and then restarts
kube-apiserver, so that a resumed watch is answered the real 410 Gone (how: compact_then_restart);
``apiserver-end`` restarts kube-apiserver mid-watch and keeps the informer's re-LISTs back
until the job has succeeded, so the end reaches the informer only through its re-LIST.

The recorder is dispatch's own informer (informer.py: a Reflector per collection, the same
collections discover() reads) over a client that writes down every request it makes and every
answer, in the order this process received them across the collections, one JSON line each:
{"seq", "at", "kind", "type", "object"}. So the requests are the ones the informer itself makes
at the fault (a re-WATCH after a stream the server ended, a re-LIST after a 410 or a broken
connection, with its backoff), and each is answered by the real API server. The types:

- ``LIST``: a LIST answered; ``object.metadata.resourceVersion`` is the list's; its items
  follow as ``LISTED`` lines (as in record_fixtures.py).
- ``WATCH``: a WATCH answered (200); ``object.metadata.resourceVersion`` is the version it was
  asked from (where the informer resumed).
- ``ADDED`` / ``MODIFIED`` / ``DELETED`` / ``BOOKMARK`` / ``ERROR``: a line of the watch's
  stream, verbatim (an ``ERROR``'s object is the API server's Status, e.g. the 410 Expired).
- ``ENDED``: the stream ended: ``{"how": "closed"}`` (the server ended it cleanly) or
  ``{"how": "broken", "error": ...}`` (the connection failed mid-stream).
- ``FAILED``: a LIST or WATCH that got no list or stream: ``{"request": "LIST"|"WATCH",
  "raised": the client's exception class, "error": its words}``, and for an answer
  (``ApiAnswer``) its ``code``, ``reason`` and ``message`` (the API server down: connection
  refused, SchedulerUnreachable; just restarted, its authorizer not yet ready: 403 Forbidden;
  a 410 before the stream: WatchExpired).

Objects are slimmed as record_fixtures.py does (no managedFields, no last-applied annotation,
no Node images)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx2
import yaml

from dispatch.backends.kubeflow.client import (
    ApiAnswer,
    ClientSettings,
    KubeClient,
    ResourceType,
    WatchStream,
)
from dispatch.backends.kubeflow.informer import Informer, InformerSettings
from dispatch.backends.kubeflow.look import NODES, collections_of, events_of

sys.path.insert(0, str(Path(__file__).resolve().parent))
from k8s_helpers import TESTBED, etcd_compact, kubectl  # noqa: E402
from record_fixtures import OURS, OUT, RESUBMIT, Run, clean, slim  # noqa: E402


class Tap:
    """A KubeClient as the informer uses it (LIST, WATCH), writing down each request's answer."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        # While set, a LIST or WATCH waits (unrecorded) until released: ``held`` counts them.
        self.holding = threading.Event()
        self.released = threading.Event()
        self.held = 0
        self.lines: list[dict[str, Any]] = []
        self.lock = threading.RLock()
        self.stopping = threading.Event()

    def add(self, kind: str, etype: str, obj: dict[str, Any]) -> None:
        obj = copy.deepcopy(obj)
        if etype in ("LISTED", "ADDED", "MODIFIED", "DELETED"):
            slim(obj)  # an ERROR's Status (its "status" a word), a BOOKMARK: verbatim
        with self.lock:
            self.lines.append({"seq": len(self.lines) + 1, "at": datetime.now(UTC).isoformat(),
                               "kind": kind, "type": etype, "object": obj})

    def failed(self, kind: str, request: str, err: Exception, rv: str | None = None) -> None:
        if self.stopping.is_set():
            return
        said: dict[str, Any] = {"request": request, "raised": type(err).__name__,
                                "error": str(getattr(err, "reason", "") or err)}
        if isinstance(err, ApiAnswer):  # the API server's Status, as the client keeps it
            said.update(code=err.code, reason=err.reason, message=err.message)
        if rv is not None:
            said["metadata"] = {"resourceVersion": rv}  # a WATCH: the version asked from
        self.add(kind, "FAILED", said)

    def list_versioned(self, res: ResourceType, namespace: str | None, labels: Any,
                       fields: Any = None, keep: Any = None
                       ) -> tuple[list[dict[str, Any]], str]:
        kind = res._api_info.resource.kind
        self._wait_if_held()
        try:
            items, rv = self.kube.list_versioned(res, namespace, labels, fields)
        except Exception as err:
            self.failed(kind, "LIST", err)
            raise
        with self.lock:  # the LIST and its items together, in the order received
            self.add(kind, "LIST", {"metadata": {"resourceVersion": rv}})
            for obj in items:
                self.add(kind, "LISTED", obj)
        # recorded whole, handed on as the informer keeps them
        return [keep(o) for o in items] if keep is not None else items, rv

    def open_watch(self, res: ResourceType, namespace: str | None, labels: Any,
                   resource_version: str, server_timeout_s: int,
                   fields: Any = None) -> WatchStream:
        kind = res._api_info.resource.kind
        self._wait_if_held()
        try:
            stream = self.kube.open_watch(res, namespace, labels, resource_version,
                                          server_timeout_s, fields)
        except Exception as err:
            self.failed(kind, "WATCH", err, resource_version)
            raise
        self.add(kind, "WATCH", {"metadata": {"resourceVersion": resource_version}})
        return WatchStream(_Tapped(self, kind, stream._response), stream._what)

    def _wait_if_held(self) -> None:
        if self.holding.is_set():
            with self.lock:
                self.held += 1
            self.released.wait(180)

    def release(self) -> None:
        self.holding.clear()
        self.released.set()

    def probe(self) -> None:
        self.kube.probe()

    def close(self) -> None:
        self.kube.close()


class _Tapped:
    """A watch's HTTP response whose lines (and end) are written down as they are read."""

    def __init__(self, tap: Tap, kind: str, response: Any) -> None:
        self.tap, self.kind, self.response = tap, kind, response
        self.extensions = response.extensions

    def iter_lines(self) -> Iterator[str]:
        try:
            for line in self.response.iter_lines():
                if line.strip():
                    event = json.loads(line)
                    self.tap.add(self.kind, str(event["type"]), event["object"])
                yield line
        except httpx2.TransportError as err:
            if not self.tap.stopping.is_set():
                self.tap.add(self.kind, "ENDED", {"how": "broken",
                                                  "error": f"{type(err).__name__}: {err}"})
            raise
        if not self.tap.stopping.is_set():
            self.tap.add(self.kind, "ENDED", {"how": "closed"})

    def close(self) -> None:
        self.response.close()


def restart_apiserver(run: Run, tap: Tap) -> None:
    # Mid-watch: every stream the API server had open breaks; the informer re-LISTs.
    _running(run)
    subprocess.run([str(TESTBED), "restart", "kube-apiserver"], check=True, timeout=180)


def compact_then_restart(run: Run, tap: Tap) -> None:
    # As test_kubeflow_faults.py: etcd's history up to now is gone and the API server restarts
    # on the compacted store (its watch cache starts after the compaction). A stream broken by
    # the restart is re-LISTed, never resumed (informer.py), so the resumed watches here are
    # those the server ended cleanly (their timeoutSeconds, WATCH_TIMEOUT_S): each re-WATCH
    # from the version it holds is kept back until the API server is back, as a reconnect
    # that reaches the restarted server would be, and is answered by it.
    _running(run)
    tap.holding.set()
    deadline = time.monotonic() + 3 * WATCH_TIMEOUT_S
    while tap.held < 6:  # every watch ended cleanly and waits to be resumed
        if time.monotonic() > deadline:  # a bound for a hung recording, not a timing check
            raise TimeoutError(f"only {tap.held} watches ended")
        time.sleep(0.1)
    held = json.loads(kubectl("get", "--raw", f"/api/v1/namespaces/{run.namespace}/pods?limit=1")
                      .stdout)["metadata"]["resourceVersion"]
    assert etcd_compact() >= int(held)
    subprocess.run([str(TESTBED), "restart", "kube-apiserver"], check=True, timeout=180)
    time.sleep(3)  # its authorizer ready (right after `up` it answers 403 for a moment)
    tap.release()


def restart_apiserver_while_the_job_ends(run: Run, tap: Tap) -> None:
    # The API server restarts mid-watch and the informer's re-LISTs are kept back (as from a
    # client cut off from it) until the job has succeeded: the end reaches the informer only
    # through its re-LIST, never as a watch event.
    _running(run)
    tap.holding.set()
    subprocess.run([str(TESTBED), "restart", "kube-apiserver"], check=True, timeout=180)
    deadline = time.monotonic() + 60
    while tap.held < 6:  # every watch broke and its re-LIST waits
        if time.monotonic() > deadline:  # a bound for a hung recording, not a timing check
            raise TimeoutError(f"only {tap.held} watches broke")
        time.sleep(0.1)
    tj = run.trainjobs()[0]
    kubectl("wait", f"trainjob/{tj}", "-n", run.namespace, "--for=condition=Complete",
            "--timeout=120s", timeout=150)
    time.sleep(3)  # the controllers' last words
    tap.release()


def _running(run: Run) -> None:
    run.running_pod()
    time.sleep(2)  # the pod's Running reaches every watch first


WATCH_TIMEOUT_S = 6
# fault -> (what is done mid-job, the informer's watch timeoutSeconds, the job's seconds)
FAULTS: dict[str, tuple[Callable[[Run, Tap], None], int, str]] = {
    "apiserver": (restart_apiserver, InformerSettings().watch_timeout_s, "20"),
    "compact": (compact_then_restart, WATCH_TIMEOUT_S, "30"),
    "apiserver-end": (restart_apiserver_while_the_job_ends, InformerSettings().watch_timeout_s,
                      "12"),
}


def record(fault: str, namespace: str) -> Path:
    act, watch_timeout_s, seconds = FAULTS[fault]
    clean(namespace)
    name = f"fault-{fault}"
    kube = KubeClient(ClientSettings(kubeconfig=os.environ["DISPATCH_KUBECONFIG"]))
    tap = Tap(kube)
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / f"{name}.yaml"
        spec.write_text(yaml.safe_dump({
            "name": f"rec-{name}", "backend": "kubeflow", "command": ["python", "train.py"],
            "nodes": 1, "env": {"DISPATCH_TESTBED_SECONDS": seconds},
            "kubeflow": {"namespace": namespace, "runtime": OURS}, "policy": RESUBMIT,
        }))
        env = {**os.environ, "DISPATCH_STORE": str(Path(tmp) / "record.sqlite3"),
               "XDG_STATE_HOME": str(Path(tmp) / "state")}
        informer = Informer(tap, InformerSettings(watch_timeout_s=watch_timeout_s))  # type: ignore[arg-type]
        for w in [*collections_of(namespace), events_of(namespace), NODES]:
            informer.reflector(w)
        deadline = time.monotonic() + 60
        while informer.lists() < 6 or sum(ln["type"] == "WATCH" for ln in tap.lines) < 6:
            if time.monotonic() > deadline:  # a bound for a hung recording, not a timing check
                raise TimeoutError("the informer never listed and watched")
            time.sleep(0.1)
        proc = subprocess.Popen(
            [sys.executable, "-m", "dispatch.cli", "run", str(spec), "--json", "--poll", "0.5"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        try:
            act(Run(name, namespace, env), tap)
            out, err = proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        time.sleep(2)  # the controllers' last words after dispatch's end
        tap.stopping.set()
        informer.close()
        lines = tap.lines
        final = json.loads(out) if out.strip() else {"state": f"no JSON: {err[-500:]}"}
    kube.close()
    clean(namespace)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{name}.jsonl"
    path.write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines))
    said = sorted({f"{ln['kind']} {ln['type']}" for ln in lines
                   if ln["type"] in ("ERROR", "ENDED", "FAILED")})
    print(f"{path}: {len(lines)} lines, {path.stat().st_size} bytes; at the fault: {said}; "
          f"dispatch said {final['state']} / {(final.get('cause') or {}).get('kind')}, "
          f"{final.get('submissions')} submission(s)")
    return path


if __name__ == "__main__":
    for fault in sys.argv[1:] or list(FAULTS):
        record(fault, os.environ.get("DISPATCH_K8S_NAMESPACE", "dispatch"))
