"""An in-process stand-in for the Kubernetes API server: a real HTTP server on 127.0.0.1.

It speaks the REST shapes the kubeflow backend uses, for TrainJobs, JobSets, batch/v1 Jobs,
Pods (namespaced) and Nodes (cluster-wide):

- list (``labelSelector``: ``k=v``, ``k==v``, ``k!=v``, ``k``, ``!k``, ``k in (a,b)``,
  ``k notin (a,b)``; the list carries ``metadata.resourceVersion``; ``limit`` and
  ``continue`` page it, a continue from before a ``compact()`` is 410), get, create (POST),
  merge-patch (PATCH ``application/merge-patch+json``), delete (``propagationPolicy``
  Foreground / Background / Orphan, owners found by ``ownerReferences``);
- watch (``?watch=1``, optionally ``resourceVersion=N``, ``labelSelector``, ``timeoutSeconds``,
  ``allowWatchBookmarks``): a chunked stream of newline-delimited JSON events ADDED / MODIFIED /
  DELETED (an object leaving the selector is DELETED, entering it ADDED, as the real server
  does), and BOOKMARK every ``bookmark_s`` when asked. Without a resourceVersion (or "0") the
  stream opens with an ADDED per current object. Events are kept in a bounded history
  (``history`` events); a resourceVersion older than it is answered, as the real server does,
  with 200 and one ERROR event carrying a ``Status`` with code 410 (reason Expired). The stream
  ends cleanly after ``timeoutSeconds``, on ``drop_watches()`` (what a server restart or its
  own watch timeout does) and on ``stop()``;
- a pod's log (``pods/{name}/log``, text/plain; ``podlogs``: tests write what a container
  printed with ``write_log``; 404 for a missing pod, 400 for a container not started);
- errors as ``Status`` objects: 404 NotFound, 409 AlreadyExists, 422 Invalid, 415, 400;
  injected 5xx (``fail_next``) and hangs (``hang_next``); ``stop()`` ends every watch stream
  and closes the port, so the next call is refused.

Every TrainJob or JobSet it stores, whether a client sent it or a test put it, is validated
against the real CRD schemas (``schemas``); a violation is answered 422 *and* recorded in
``violations``, which the test fixtures assert empty, so a schema violation fails the test.
Every request, watches included, is recorded in ``requests``, so tests count what a tick costs.

What it is not: no controllers run. Tests play Trainer, JobSet, the Job controller and the
kubelet by writing objects (see ``trainer.py``). Pods on a node named in ``unreachable`` cannot
finish deleting (no kubelet confirms), as on a real cluster that lost the node.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from . import schemas
from .podlogs import LogRefused, PodLogs


@dataclass(frozen=True)
class Kind:
    kind: str
    group: str
    version: str
    plural: str
    namespaced: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


KINDS = {
    k.plural: k
    for k in (
        Kind("TrainJob", "trainer.kubeflow.org", "v1alpha1", "trainjobs"),
        Kind("JobSet", "jobset.x-k8s.io", "v1alpha2", "jobsets"),
        Kind("Job", "batch", "v1", "jobs"),
        Kind("Pod", "", "v1", "pods"),
        Kind("Node", "", "v1", "nodes", namespaced=False),
        Kind("Namespace", "", "v1", "namespaces", namespaced=False),
        Kind("Event", "", "v1", "events"),
        Kind("ClusterTrainingRuntime", "trainer.kubeflow.org", "v1alpha1",
             "clustertrainingruntimes", namespaced=False),
        Kind("TrainingRuntime", "trainer.kubeflow.org", "v1alpha1", "trainingruntimes"),
    )
}
BY_KIND = {k.kind: k for k in KINDS.values()}
VALIDATED = ("TrainJob", "JobSet", "Job", "Pod", "Node")

_LOG_PATH = re.compile(r"^/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log/?$")
_PATH = re.compile(
    r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))"
    r"(?:/namespaces/(?P<ns>[^/]+))?/(?P<plural>[^/]+)(?:/(?P<name>[^/]+))?/?$"
)


def access_of(method: str, path: str, query: dict[str, str]
              ) -> tuple[str, str, str, str] | None:
    """The RBAC (verb, group, resource, namespace) a request needs, as the API server's
    authorizer reads it; None for a path that is no resource (``/version``, discovery)."""
    log = _LOG_PATH.match(path)
    if log is not None:
        return "get", "", "pods/log", log.group("ns")
    m = _PATH.match(path)
    if not m or m.group("plural") not in KINDS:
        return None
    kind = KINDS[m.group("plural")]
    verb = {"POST": "create", "PATCH": "patch", "DELETE": "delete",
            "PUT": "update"}.get(method, "get" if m.group("name") else "list")
    if query.get("watch") in ("true", "1"):
        verb = "watch"
    return verb, kind.group, kind.plural, m.group("ns") or ""


def now_rfc3339() -> str:
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]


@dataclass
class _Fault:
    code: int | None
    delay_s: float
    match: Callable[[str, str], bool]
    reason: str = "InternalError"
    message: str = "injected failure"


class ApiFailure(Exception):
    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out


def _split_selector(text: str) -> list[str]:
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        parts.append(cur.strip())
    return parts


def fields_match(selector: str, obj: dict[str, Any]) -> bool:
    """A field selector (``a.b=v``, ``a.b==v``, ``a.b!=v``, comma-joined), as the API server
    reads it for the fields it supports; a missing field reads as ""."""
    for term in (t.strip() for t in selector.split(",") if t.strip()):
        negate = "!=" in term
        path, _, want = term.replace("!=", "=").replace("==", "=").partition("=")
        value: Any = obj
        for part in path.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if (str(value if value is not None else "") == want) == negate:
            return False
    return True


def selector_matches(selector: str, labels: dict[str, str]) -> bool:
    for term in _split_selector(selector):
        m = re.match(r"^(\S+)\s+(in|notin)\s+\((.*)\)$", term)
        if m:
            values = {v.strip() for v in m.group(3).split(",")}
            has = m.group(1) in labels and labels[m.group(1)] in values
            if (m.group(2) == "in") != has:
                return False
        elif "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k.strip()) == v.strip():
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k.strip()) != v.strip():
                return False
        elif term.startswith("!"):
            if term[1:].strip() in labels:
                return False
        elif term not in labels:
            return False
    return True


@dataclass(frozen=True)
class _Event:
    """One change, as a watch reports it: ``old`` is the object before a MODIFIED (so a watch
    with a selector can tell an object leaving or entering it)."""

    rv: int
    type: str  # ADDED | MODIFIED | DELETED
    plural: str
    namespace: str
    obj: dict[str, Any]
    old: dict[str, Any] | None


@dataclass
class FakeApiServer:
    """Start with ``start()`` (or as a context manager); ``url`` then names it."""

    unreachable: set[str] = field(default_factory=set)
    requests: list[Request] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    history: int = 1000  # watch events kept; an older resourceVersion is answered 410
    bookmark_s: float = 1.0  # BOOKMARK interval for watches that allow them
    # RBAC as the test sets it: (verb, group, resource) this identity may not do; a request
    # doing one is answered 403 in the API server's words, and an access review says denied.
    denied: set[tuple[str, str, str]] = field(default_factory=set)
    # API discovery: the versions each API group serves (a group not here is a 404).
    api_groups: dict[str, list[str]] = field(default_factory=lambda: {
        "trainer.kubeflow.org": ["v1alpha1"], "jobset.x-k8s.io": ["v1alpha2"]})
    user: str = "fake"
    # Compact (``compact()``) right after the next LIST page that has more to follow: its
    # continue token then names a snapshot etcd no longer has (410 Expired).
    compact_after_page: bool = False
    # The kube-system namespace's UID: which cluster this is (backends/kubeflow/scope.py).
    cluster_uid: str = field(default_factory=lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        self._lock = threading.RLock()
        self._changed = threading.Condition(self._lock)
        self._objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self._rv = 1000
        self._events: deque[_Event] = deque()
        self._compacted_rv = self._rv  # a watch from an rv below this one is 410 Gone
        self._watch_epoch = 0  # bumped to end every open watch stream
        self._stopping = False
        self._faults: list[_Fault] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._open_watches = 0
        self._logs = PodLogs()
        self.port = 0
        # made by the API server itself at its start, as every cluster has it
        self._objects[("namespaces", "", "kube-system")] = {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "kube-system", "uid": self.cluster_uid,
                         "resourceVersion": "1", "creationTimestamp": now_rfc3339()},
            "status": {"phase": "Active"}}

    # -- lifecycle ---------------------------------------------------------------------------

    def start(self) -> FakeApiServer:
        server = self
        with self._lock:
            self._stopping = False

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: Any) -> None:  # quiet
                pass

            def _handle(self) -> None:
                server._serve(self)

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle

        self._httpd = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """End every watch stream, then close the port: the next call is refused."""
        with self._lock:
            self._stopping = True
            self._changed.notify_all()
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def write_kubeconfig(self, path: Path, namespace: str = "default") -> Path:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {"token": "stand-in-token"}}],
            "contexts": [
                {
                    "name": "fake",
                    "context": {"cluster": "fake", "user": "fake", "namespace": namespace},
                }
            ],
            "current-context": "fake",
        }
        path.write_text(yaml.safe_dump(config))
        return path

    # -- fault injection and counting -----------------------------------------------------------

    def fail_next(
        self,
        count: int = 1,
        code: int = 503,
        match: Callable[[str, str], bool] | None = None,
        reason: str = "InternalError",
        message: str = "injected failure",
    ) -> None:
        """Answer the next ``count`` matching requests with ``code`` and a Status carrying
        ``reason`` and ``message`` (e.g. an admission webhook's denial)."""
        with self._lock:
            for _ in range(count):
                self._faults.append(
                    _Fault(code, 0.0, match or (lambda m, p: True), reason, message)
                )

    def hang_next(
        self, seconds: float, count: int = 1, match: Callable[[str, str], bool] | None = None
    ) -> None:
        """Answer the next ``count`` matching requests (method, path) only after ``seconds``."""
        with self._lock:
            for _ in range(count):
                self._faults.append(_Fault(None, seconds, match or (lambda m, p: True)))

    def reset_requests(self) -> None:
        with self._lock:
            self.requests.clear()

    def drop_watches(self) -> None:
        """End every open watch stream cleanly (as the server's own watch timeout does)."""
        with self._lock:
            self._watch_epoch += 1
            self._changed.notify_all()

    def compact(self) -> None:
        """Forget the watch history (as etcd compaction does): a watch from any resourceVersion
        seen so far is answered 410 Gone."""
        with self._lock:
            self._events.clear()
            # As if writes no watch here sees had moved the store on: every version handed out
            # so far is now too old, while a fresh list's version is not.
            self._compacted_rv = int(self._next_rv())

    @property
    def resource_version(self) -> int:
        """The newest resourceVersion handed out."""
        with self._lock:
            return self._rv

    def open_watches(self) -> int:
        with self._lock:
            return self._open_watches

    def _record(
        self,
        etype: str,
        plural: str,
        ns: str,
        obj: dict[str, Any],
        old: dict[str, Any] | None = None,
    ) -> None:
        """Keep a change for the watches (bounded history); called with the lock held."""
        self._events.append(
            _Event(
                int(obj["metadata"]["resourceVersion"]),
                etype,
                plural,
                ns,
                copy.deepcopy(obj),
                copy.deepcopy(old) if old is not None else None,
            )
        )
        while len(self._events) > self.history:
            self._compacted_rv = self._events.popleft().rv
        self._changed.notify_all()

    def _removed(self, key: tuple[str, str, str]) -> None:
        """Delete from the store and tell the watches (the DELETED object carries a new rv)."""
        obj = self._objects.pop(key)
        obj["metadata"]["resourceVersion"] = self._next_rv()
        self._record("DELETED", key[0], key[1], obj)

    # -- the store, for tests playing controllers --------------------------------------------

    def _next_rv(self) -> str:
        self._rv += 1
        return str(self._rv)

    def _validate(self, kind: str, obj: dict[str, Any]) -> None:
        if kind not in VALIDATED:
            return
        found = schemas.problems(kind, obj)
        if found:
            name = (obj.get("metadata") or {}).get("name")
            message = f"{kind} {name} violates its schema: " + "; ".join(found[:10])
            self.violations.append(message)
            raise ApiFailure(422, "Invalid", message)

    def put(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store (create or replace) an object as a controller would; validated."""
        obj = copy.deepcopy(obj)
        kind = BY_KIND[obj["kind"]]
        obj.setdefault("apiVersion", kind.api_version)
        meta = obj.setdefault("metadata", {})
        ns = meta.get("namespace", "") if kind.namespaced else ""
        with self._lock:
            old = self._objects.get((kind.plural, ns, meta["name"]))
            meta.setdefault("uid", old["metadata"]["uid"] if old else str(uuid.uuid4()))
            meta.setdefault(
                "creationTimestamp", old["metadata"]["creationTimestamp"] if old else now_rfc3339()
            )
            meta["resourceVersion"] = self._next_rv()
            try:
                self._validate(kind.kind, obj)
            except ApiFailure as err:
                raise schemas.SchemaViolation(err.message) from None
            self._objects[(kind.plural, ns, meta["name"])] = obj
            self._record("MODIFIED" if old else "ADDED", kind.plural, ns, obj, old)
            return copy.deepcopy(obj)

    def get(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        k = BY_KIND[kind]
        with self._lock:
            obj = self._objects.get((k.plural, namespace if k.namespaced else "", name))
            return copy.deepcopy(obj) if obj is not None else None

    def all(self, kind: str) -> list[dict[str, Any]]:
        k = BY_KIND[kind]
        with self._lock:
            return [copy.deepcopy(o) for (p, _, _), o in self._objects.items() if p == k.plural]

    def update(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """Merge-patch an object as a controller would (status included); validated."""
        current = self.get(kind, namespace, name)
        if current is None:
            raise KeyError(f"{kind} {namespace}/{name}")
        return self.put(merge_patch(current, patch))

    def remove(self, kind: str, namespace: str, name: str, policy: str = "Background") -> None:
        """Someone else deletes an object, with its dependents (``policy``: Background, or
        Foreground as ``kubectl delete --cascade=foreground`` does)."""
        with self._lock:
            self._delete(BY_KIND[kind], namespace, name, policy)

    def write_log(
        self,
        namespace: str,
        pod: str,
        text: str | bytes,
        *,
        container: str | None = None,
        at: datetime | str | int | None = None,
    ) -> None:
        """The pod's container printed ``text`` (stamped ``at``, default now): served by
        ``pods/{pod}/log`` for as long as the pod exists (see ``podlogs``)."""
        with self._lock:
            obj = self._objects.get(("pods", namespace, pod))
            if obj is None:
                raise KeyError(f"Pod {namespace}/{pod}")
            self._logs.write(obj, text, container=container, at=at)

    def release_node(self, node: str) -> None:
        """The node is back or deleted: pods stuck Terminating there finish deleting."""
        with self._lock:
            self.unreachable.discard(node)
            for key, obj in list(self._objects.items()):
                if key[0] == "pods" and obj["metadata"].get("deletionTimestamp"):
                    if (obj.get("spec") or {}).get("nodeName") == node:
                        self._removed(key)
            self._finish_foreground()

    # -- deletion -----------------------------------------------------------------------------

    def _dependents(self, uid: str) -> list[tuple[str, str, str]]:
        return [
            key
            for key, obj in self._objects.items()
            if any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences", []))
        ]

    def _stuck(self, key: tuple[str, str, str]) -> bool:
        obj = self._objects[key]
        return key[0] == "pods" and (obj.get("spec") or {}).get("nodeName") in self.unreachable

    def _delete(self, kind: Kind, ns: str, name: str, policy: str) -> dict[str, Any]:
        key = (kind.plural, ns, name)
        obj = self._objects[key]
        uid = obj["metadata"]["uid"]
        if policy != "Orphan":
            for dep in self._dependents(uid):
                if dep in self._objects:
                    dk = KINDS[dep[0]]
                    self._delete(
                        dk, dep[1], dep[2], "Foreground" if policy == "Foreground" else "Background"
                    )
        if self._stuck(key) or (policy == "Foreground" and self._dependents(uid)):
            old = copy.deepcopy(obj)
            obj["metadata"].setdefault("deletionTimestamp", now_rfc3339())
            if policy == "Foreground" and not self._stuck(key):
                obj["metadata"]["finalizers"] = ["foregroundDeletion"]
            obj["metadata"]["resourceVersion"] = self._next_rv()
            self._record("MODIFIED", key[0], key[1], obj, old)
            return copy.deepcopy(obj)
        self._removed(key)
        return copy.deepcopy(obj)

    def _finish_foreground(self) -> None:
        changed = True
        while changed:
            changed = False
            for key, obj in list(self._objects.items()):
                if "foregroundDeletion" in obj["metadata"].get("finalizers", []):
                    if not self._dependents(obj["metadata"]["uid"]):
                        self._removed(key)
                        changed = True

    # -- HTTP ---------------------------------------------------------------------------------

    def _serve(self, h: BaseHTTPRequestHandler) -> None:
        split = urlsplit(h.path)
        query = {k: v[-1] for k, v in parse_qs(split.query).items()}
        length = int(h.headers.get("Content-Length") or 0)
        raw = h.rfile.read(length) if length else b""
        with self._lock:
            self.requests.append(Request(h.command, split.path, query))
            fault = next((f for f in self._faults if f.match(h.command, split.path)), None)
            if fault is not None:
                self._faults.remove(fault)
        try:
            if fault is not None:
                if fault.delay_s:
                    time.sleep(fault.delay_s)
                if fault.code is not None:
                    raise ApiFailure(fault.code, fault.reason, fault.message)
            self._authorize(h.command, split.path, query)
            if query.get("watch") in ("true", "1"):
                if h.command != "GET":
                    raise ApiFailure(405, "MethodNotAllowed", f"watch with {h.command}")
                kind, ns, name = self._resolve(split.path)
                if name is not None:
                    raise ApiFailure(400, "BadRequest", "watch a collection, not one object")
                self._watch(h, kind, ns, query)
                return
            log = _LOG_PATH.match(split.path)
            if log is not None:
                self._serve_log(h, log.group("ns"), log.group("name"), query)
                return
            with self._lock:
                code, body = self._route(h.command, split.path, query, raw, h.headers)
        except ApiFailure as err:
            code, body = err.code, self._status(err.code, err.reason, err.message)
        data = json.dumps(body).encode()
        try:
            h.send_response(code)
            h.send_header("Content-Type", "application/json")
            h.send_header("Content-Length", str(len(data)))
            # One request per connection: once stop() closes the port, nothing is served.
            h.send_header("Connection", "close")
            h.close_connection = True
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _serve_log(
        self, h: BaseHTTPRequestHandler, ns: str, name: str, query: dict[str, str]
    ) -> None:
        """``pods/{name}/log``: text/plain, or a Status as the API server refuses."""
        if h.command != "GET":
            raise ApiFailure(405, "MethodNotAllowed", f"{h.command} on a pod's log")
        with self._lock:
            pod = self._objects.get(("pods", ns, name))
            if pod is None:
                raise ApiFailure(404, "NotFound", f'pods "{name}" not found')
            try:
                data = self._logs.answer(pod, query)
            except LogRefused as err:
                raise ApiFailure(err.code, err.reason, err.message) from None
        try:
            h.send_response(200)
            h.send_header("Content-Type", "text/plain")
            h.send_header("Content-Length", str(len(data)))
            h.send_header("Connection", "close")
            h.close_connection = True
            h.end_headers()
            h.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass

    # -- watch ------------------------------------------------------------------------------

    def _watch(self, h: BaseHTTPRequestHandler, kind: Kind, ns: str, query: dict[str, str]) -> None:
        """Stream events as newline-delimited JSON in HTTP chunks until timeoutSeconds, a
        dropped watch, stop(), or the client going away."""
        selector = query.get("labelSelector", "")
        fields = query.get("fieldSelector", "")
        bookmarks = query.get("allowWatchBookmarks") in ("true", "1")
        try:
            timeout = float(query.get("timeoutSeconds") or 1800)
            since = query.get("resourceVersion") or "0"
            from_rv = int(since)
        except ValueError:
            raise ApiFailure(400, "BadRequest", "bad timeoutSeconds or resourceVersion") from None
        deadline = time.monotonic() + timeout
        pending: list[dict[str, Any]] = []
        with self._lock:
            epoch = self._watch_epoch
            if from_rv == 0:  # no version: the current objects first, as ADDED
                listed = self._list(kind, ns, selector, fields)
                pending = [{"type": "ADDED", "object": o} for o in listed["items"]]
                from_rv = self._rv
            elif from_rv < self._compacted_rv:
                pending = [
                    {
                        "type": "ERROR",
                        "object": self._status(
                            410,
                            "Expired",
                            f"too old resource version: {from_rv} ({self._compacted_rv})",
                        ),
                    }
                ]
                deadline = 0.0  # the stream ends after the error, as the real server's does
            self._open_watches += 1
        try:
            h.send_response(200)
            h.send_header("Content-Type", "application/json")
            h.send_header("Transfer-Encoding", "chunked")
            h.send_header("Connection", "close")
            h.close_connection = True
            h.end_headers()
            last_bookmark = time.monotonic()
            while True:
                for event in pending:
                    line = json.dumps(event).encode() + b"\n"
                    h.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                h.wfile.flush()
                pending = []
                now = time.monotonic()
                if now >= deadline:
                    break
                with self._lock:
                    if self._stopping or self._watch_epoch != epoch:
                        break
                    news = [e for e in self._events if e.rv > from_rv]
                    if not news:
                        wait = deadline - now
                        if bookmarks:
                            wait = min(wait, max(0.0, last_bookmark + self.bookmark_s - now))
                        self._changed.wait(timeout=wait)
                        news = [e for e in self._events if e.rv > from_rv]
                    if news:
                        from_rv = news[-1].rv
                    last_seen = None
                    for e in news:
                        out = self._as_seen(e, kind, ns, selector, fields)
                        if out is not None:
                            pending.append(out)
                            last_seen = e.rv
                    # Progress this watch would not otherwise see (changes outside its
                    # selector) is told at once by a BOOKMARK, so a client knows it is current.
                    quiet = bool(news) and last_seen != news[-1].rv
                    if bookmarks and (quiet or time.monotonic() - last_bookmark >= self.bookmark_s):
                        last_bookmark = time.monotonic()
                        pending.append(
                            {
                                "type": "BOOKMARK",
                                "object": {
                                    "kind": kind.kind,
                                    "apiVersion": kind.api_version,
                                    "metadata": {"resourceVersion": str(self._rv)},
                                },
                            }
                        )
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, OSError):
            pass  # the client went away
        finally:
            with self._lock:
                self._open_watches -= 1

    @staticmethod
    def _as_seen(
        e: _Event, kind: Kind, ns: str, selector: str, fields: str = ""
    ) -> dict[str, Any] | None:
        """The event as a watch on (kind, ns, selector, fields) reports it, or None."""
        if e.plural != kind.plural or (kind.namespaced and e.namespace != ns):
            return None
        if fields and not fields_match(fields, e.obj):
            return None
        now_in = selector_matches(selector, e.obj["metadata"].get("labels") or {})
        if e.type == "MODIFIED" and e.old is not None:
            was_in = selector_matches(selector, e.old["metadata"].get("labels") or {})
            etype = {
                (True, True): "MODIFIED",
                (False, True): "ADDED",
                (True, False): "DELETED",
            }.get((was_in, now_in))
            if etype is None:
                return None
            return {"type": etype, "object": copy.deepcopy(e.obj)}
        if not now_in:
            return None
        return {"type": e.type, "object": copy.deepcopy(e.obj)}

    @staticmethod
    def _status(code: int, reason: str, message: str) -> dict[str, Any]:
        return {
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure" if code >= 300 else "Success",
            "message": message,
            "reason": reason,
            "code": code,
        }

    @staticmethod
    def _resolve(path: str) -> tuple[Kind, str, str | None]:
        m = _PATH.match(path)
        if not m or m.group("plural") not in KINDS:
            raise ApiFailure(
                404, "NotFound", f"the server could not find the requested resource {path}"
            )
        kind = KINDS[m.group("plural")]
        group, version = (m.group("g") or "", m.group("v") or m.group("cv"))
        if (group, version) != (kind.group, kind.version):
            raise ApiFailure(404, "NotFound", f"no {kind.plural} in {group}/{version}")
        ns, name = m.group("ns") or "", m.group("name")
        if kind.namespaced and not ns:
            raise ApiFailure(400, "BadRequest", "cluster-wide lists are not served by the stand-in")
        return kind, ns, name

    def forbidden_words(self, verb: str, group: str, resource: str, ns: str) -> str:
        """The API server's 403 message for this identity."""
        plural, _, sub = resource.partition("/")
        what = f'resource "{plural}"' + (f' in API group "{group}"')
        if sub:
            what = f'resource "{plural}/{sub}" in API group "{group}"'
        where = f'in the namespace "{ns}"' if ns else "at the cluster scope"
        return f'{plural} is forbidden: User "{self.user}" cannot {verb} {what} {where}'

    def _authorize(self, method: str, path: str, query: dict[str, str]) -> None:
        """403 for a request whose (verb, group, resource) the test denied."""
        if not self.denied:
            return
        found = access_of(method, path, query)
        if found is not None and found[:3] in self.denied:
            raise ApiFailure(403, "Forbidden", self.forbidden_words(*found))

    def _access_review(self, body: Any) -> dict[str, Any]:
        attrs = ((body or {}).get("spec") or {}).get("resourceAttributes") or {}
        resource = str(attrs.get("resource", ""))
        if attrs.get("subresource"):
            resource += f"/{attrs['subresource']}"
        denied = (str(attrs.get("verb", "")), str(attrs.get("group", "")), resource) in self.denied
        status: dict[str, Any] = {"allowed": not denied}
        if not denied:
            status["reason"] = 'RBAC: allowed by the stand-in'
        return {"apiVersion": "authorization.k8s.io/v1", "kind": "SelfSubjectAccessReview",
                "spec": (body or {}).get("spec"), "status": status}

    def _route(
        self, method: str, path: str, query: dict[str, str], raw: bytes, headers: Any
    ) -> tuple[int, dict[str, Any]]:
        if method == "GET" and path == "/version":
            return 200, {"major": "1", "minor": "31", "gitVersion": "v1.31.0-stand-in"}
        if path == "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews" and method == "POST":
            return 201, self._access_review(json.loads(raw) if raw else None)
        group = path.removeprefix("/apis/").rstrip("/")
        if method == "GET" and path.startswith("/apis/") and "/" not in group:
            if group not in self.api_groups:
                raise ApiFailure(404, "NotFound", "the server could not find the requested "
                                 "resource")
            versions = [{"groupVersion": f"{group}/{v}", "version": v}
                        for v in self.api_groups[group]]
            return 200, {"kind": "APIGroup", "apiVersion": "v1", "name": group,
                         "versions": versions, "preferredVersion": versions[0]}
        kind, ns, name = self._resolve(path)
        body = json.loads(raw) if raw else None
        if method == "GET" and name is None:
            return 200, self._list(
                kind, ns, query.get("labelSelector", ""), query.get("fieldSelector", ""),
                limit=int(query.get("limit") or 0), cont=query.get("continue", ""),
            )
        if method == "GET":
            return 200, self._get(kind, ns, name)
        if method == "POST" and name is None:
            # dryRun=All: validated as a create would be, nothing stored (the API server's
            # server-side dry run; admission webhooks are not modelled here).
            return 201, self._create(kind, ns, body, store=query.get("dryRun") != "All")
        if method == "PATCH" and name is not None:
            ctype = headers.get("Content-Type", "")
            if ctype != "application/merge-patch+json":
                raise ApiFailure(
                    415, "UnsupportedMediaType", f"the stand-in serves merge-patch, not {ctype}"
                )
            return 200, self._patch(kind, ns, name, body)
        if method == "DELETE" and name is not None:
            policy = (
                query.get("propagationPolicy")
                or (body or {}).get("propagationPolicy")
                or "Background"
            )
            if policy not in ("Foreground", "Background", "Orphan"):
                raise ApiFailure(400, "BadRequest", f"bad propagationPolicy {policy}")
            self._get(kind, ns, name)
            obj = self._delete(kind, ns, name, policy)
            self._finish_foreground()
            return 200, obj
        raise ApiFailure(405, "MethodNotAllowed", f"{method} {path}")

    def _list(self, kind: Kind, ns: str, selector: str, fields: str = "", *, limit: int = 0,
              cont: str = "") -> dict[str, Any]:
        """A LIST; with ``limit``, a page, and ``metadata.continue`` while more follow. The
        continue token here names the last key served and the list's resourceVersion; the
        next page is read from the objects as they are then (the real API server reads the
        same snapshot from etcd: a stand-in's simplification)."""
        after: list[str] | None = None
        rv = str(self._rv)
        if cont:
            try:
                token = json.loads(base64.urlsafe_b64decode(cont.encode()))
                after, rv = [str(k) for k in token["after"]], str(token["rv"])
            except (ValueError, KeyError, TypeError):
                raise ApiFailure(400, "BadRequest", "invalid continue token") from None
            if int(rv) < self._compacted_rv:  # its snapshot compacted away, as etcd's is
                raise ApiFailure(410, "Expired", "The provided continue parameter is too old "
                                 "to display a consistent list result. You can start a new "
                                 "list without the continue parameter.")
        keys = [key for key, obj in sorted(self._objects.items())
                if key[0] == kind.plural
                and (not kind.namespaced or key[1] == ns)
                and selector_matches(selector, obj["metadata"].get("labels") or {})
                and fields_match(fields, obj)
                and (after is None or list(key) > after)]
        more = limit > 0 and len(keys) > limit
        keys = keys[:limit] if more else keys
        meta: dict[str, Any] = {"resourceVersion": rv}
        if more:
            meta["continue"] = base64.urlsafe_b64encode(
                json.dumps({"after": list(keys[-1]), "rv": rv}).encode()).decode()
            if self.compact_after_page:
                self.compact_after_page = False
                self.compact()
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": meta,
            "items": [copy.deepcopy(self._objects[key]) for key in keys],
        }

    def _get(self, kind: Kind, ns: str, name: str) -> dict[str, Any]:
        obj = self._objects.get((kind.plural, ns, name))
        if obj is None:
            raise ApiFailure(404, "NotFound", f'{kind.plural}.{kind.group} "{name}" not found')
        return copy.deepcopy(obj)

    def _create(self, kind: Kind, ns: str, body: Any, store: bool = True) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("metadata"), dict):
            raise ApiFailure(400, "BadRequest", "a body with metadata is required")
        meta = body["metadata"]
        if body.get("kind") != kind.kind or body.get("apiVersion") != kind.api_version:
            raise ApiFailure(400, "BadRequest", f"expected {kind.api_version} {kind.kind}")
        if meta.get("namespace", ns) != ns:
            raise ApiFailure(
                400, "BadRequest", "the namespace of the object does not match the URL"
            )
        for server_set in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp"):
            if server_set in meta:
                raise ApiFailure(
                    400, "BadRequest", f"metadata.{server_set} must not be set on create"
                )
        if "status" in body:
            raise ApiFailure(400, "BadRequest", "status is set by controllers, not on create")
        name = meta.get("name")
        if (kind.plural, ns, name) in self._objects:
            raise ApiFailure(
                409, "AlreadyExists", f'{kind.plural}.{kind.group} "{name}" already exists'
            )
        obj = copy.deepcopy(body)
        obj["metadata"]["namespace"] = ns
        self._validate(kind.kind, obj)
        if not store:  # no resourceVersion spent: no event will carry one
            return copy.deepcopy(obj)
        obj["metadata"].update(
            uid=str(uuid.uuid4()),
            resourceVersion=self._next_rv(),
            creationTimestamp=now_rfc3339(),
            generation=1,
        )
        self._objects[(kind.plural, ns, name)] = obj
        self._record("ADDED", kind.plural, ns, obj)
        return copy.deepcopy(obj)

    def _patch(self, kind: Kind, ns: str, name: str, body: Any) -> dict[str, Any]:
        current = self._get(kind, ns, name)
        if not isinstance(body, dict):
            raise ApiFailure(400, "BadRequest", "a merge patch is a JSON object")
        if "status" in body:
            raise ApiFailure(400, "BadRequest", "status is a subresource; not patched here")
        patched = merge_patch(current, body)
        for keep in ("uid", "creationTimestamp", "name", "namespace"):
            if patched["metadata"].get(keep) != current["metadata"].get(keep):
                raise ApiFailure(422, "Invalid", f"metadata.{keep} is immutable")
        if patched.get("spec") != current.get("spec"):
            patched["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        self._validate(kind.kind, patched)
        patched["metadata"]["resourceVersion"] = self._next_rv()
        self._objects[(kind.plural, ns, name)] = patched
        self._record("MODIFIED", kind.plural, ns, patched, current)
        return copy.deepcopy(patched)
