"""A list+watch cache (an informer) of the objects the kubeflow backend's discover() reads.

Per watched collection (a kind in a namespace, with a label selector) one ``Reflector`` thread:
one LIST, then a WATCH from the list's resourceVersion, applying ADDED / MODIFIED / DELETED to an
in-memory map. A watch the server ends cleanly (its timeoutSeconds) is reopened from the last
resourceVersion seen; ``410 Gone`` (the version is older than the server keeps) leads to a fresh
LIST; a lost connection, a 5xx or a timeout marks the collection *broken* and it re-LISTs, with
backoff, until it gets through (a re-LIST, not a re-WATCH, so the cache is never a mix of before
and after a gap). A refusal (403, a CRD not installed) is remembered as *refused*.

What discover() may do with a collection (``Informer.view``), so that R3 holds (never a
transition on missing information):

- never listed yet: wait for the first outcome, bounded; still nothing: SchedulerUnreachable;
- listed and connected, or broken for at most ``stale_after_s``: answer from the cache (the
  same staleness a poll interval has);
- broken for longer, or never listed because the API server cannot be reached:
  SchedulerUnreachable, never an answer from a stale cache;
- refused: the caller's look is incomplete for that namespace, as with per-tick lists;
- every watch silent (no event, no bookmark, no list) for more than ``stall_after_s``: the API
  server is asked ``GET /version`` once; no answer and the look raises SchedulerUnreachable and
  every collection re-LISTs. A quiet watch is normal (the API server's cache sends a bookmark
  about once a minute only when the resource kind has changed somewhere in the cluster: a
  TrainJob watch on a cluster where no TrainJob changes hears nothing for minutes), so silence
  alone is not a failure; a stopped API server (SIGSTOP, a stall) keeps every connection open
  and answers nothing, which only a request can tell.

Reading your own writes: after the backend creates, deletes or ungates a TrainJob it registers an
*expectation* (this uid is present / is being deleted or gone / is no longer suspended). The
watch event that meets it, or a LIST that started after it, clears it. discover() waits, bounded,
for the outstanding expectations; if the watch is that far behind it asks for a re-LIST and
answers that tick with plain lists instead, so a TrainJob it has just created is never reported
gone because its ADDED event was still on the wire.

Threads only touch the cache under one lock (a Condition, so waiters wake on every change).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dispatch.backends.kubeflow.changes import Touched
from dispatch.backends.kubeflow.client import (
    BACKEND,
    ApiAnswer,
    KubeClient,
    ResourceType,
    WatchExpired,
    WatchStream,
)
from dispatch.backends.kubeflow.projection import project
from dispatch.core.model import SchedulerUnreachable

Predicate = Callable[[str, dict[str, Any]], bool]  # (event type, object) -> the write is seen
# (collection, a deleted object) -> what to keep of it (None: nothing), shown with the cache
KeepGone = Callable[["Watched", dict[str, Any]], dict[str, Any] | None]
# (collection, the cached version, the next version) -> the next version as the cache keeps it
# (what only an earlier version said, carried: when a pod's deletion was first asked)
Carry = Callable[["Watched", dict[str, Any], dict[str, Any]], dict[str, Any]]
GONE_KEPT = 4096


@dataclass(frozen=True)
class Watched:
    """One collection: a kind, its namespace (None: cluster-wide), a label selector (a value
    None means 'the label exists')."""

    res: ResourceType
    namespace: str | None
    labels: tuple[tuple[str, str | None], ...] = ()
    fields: tuple[tuple[str, str], ...] = ()  # a field selector (equality only)

    @property
    def what(self) -> str:
        return f"{self.res._api_info.resource.kind} in {self.namespace or 'cluster'}"


@dataclass(frozen=True)
class InformerSettings:
    stale_after_s: float = 10.0  # broken for longer: SchedulerUnreachable, not the cache
    sync_timeout_s: float = 30.0  # how long discover() waits for a first LIST
    settle_s: float = 2.0  # how long discover() waits for its own writes to be seen
    watch_timeout_s: int = 300  # asked of the server (timeoutSeconds); then re-WATCH
    backoff_s: float = 0.2  # first wait before a re-LIST after a failure
    max_backoff_s: float = 5.0
    stall_after_s: float = 10.0  # every watch silent this long: ask the API server if it lives


@dataclass
class _Expectation:
    namespace: str
    name: str
    seen: Predicate
    since: float  # monotonic: a LIST started after this reflects the write


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    meta = obj.get("metadata")
    return meta if isinstance(meta, dict) else {}


class Reflector:
    """LIST then WATCH one collection in a daemon thread, into ``items`` (name -> object)."""

    def __init__(self, informer: Informer, watched: Watched) -> None:
        self.watched = watched
        self._informer = informer
        self.items: dict[str, dict[str, Any]] = {}
        # What the cache keeps of each object: the fields dispatch reads (projection.py);
        # managedFields, templates, specs nothing reads are dropped as the object arrives.
        self.kind = watched.res._api_info.resource.kind
        # What deleted objects said, as ``keep_gone`` keeps it (a pod's failure evidence,
        # M2: the Job controller deletes pods past backoffLimit), newest GONE_KEPT kept.
        self.gone: dict[str, dict[str, Any]] = {}
        self.synced = False  # listed at least once
        self.outcome = False  # a first LIST has succeeded or failed
        self.refused: ApiAnswer | None = None
        self.broken_since: float | None = None  # monotonic
        self.error = ""
        self.listed_at = -1.0  # monotonic start of the last successful LIST
        self.lists = 0
        self._resource_version = ""
        self._relist = False
        self._stream: WatchStream | None = None
        self._thread = threading.Thread(
            target=self._run, name=f"informer {watched.what}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    @property
    def resource_version(self) -> str:
        """The last resourceVersion this collection has seen (list, event or bookmark)."""
        return self._resource_version

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    # -- called with the informer's lock held ------------------------------------------------

    def resync(self) -> None:
        """Drop the watch and LIST again (the cache is suspected behind)."""
        self._relist = True
        if self._stream is not None:
            self._stream.abort()

    def abort(self) -> None:
        if self._stream is not None:
            self._stream.abort()

    # -- the thread --------------------------------------------------------------------------

    def _run(self) -> None:
        inf = self._informer
        w = self.watched
        labels = dict(w.labels)
        fields = dict(w.fields)
        need_list = True
        failures = 0
        while not inf.stopping.is_set():
            try:
                if need_list:
                    started = time.monotonic()
                    # each object projected as its page arrives: only what is kept stays
                    items, rv = inf.kube.list_versioned(
                        w.res, w.namespace, labels, fields, keep=self._project)
                    kept = {str(_meta(o).get("name")): o for o in items}
                    del items
                    with inf.cond:
                        self.items = kept
                        self._resource_version = rv
                        self.synced = self.outcome = True
                        self.refused = None
                        self.broken_since = None
                        self.error = ""
                        self.listed_at = started
                        self.lists += 1
                        self._relist = False
                        inf.heard()
                        inf.relisted(self, started)
                        if inf.touched is not None:
                            inf.touched.relisted(w)
                        inf.cond.notify_all()
                    need_list = False
                    failures = 0
                stream = inf.kube.open_watch(
                    w.res, w.namespace, labels, self._resource_version,
                    inf.settings.watch_timeout_s, fields,
                )
                with inf.cond:
                    if inf.stopping.is_set() or self._relist:
                        stream.abort()
                    self._stream = stream
                    inf.heard()
                try:
                    for etype, obj in stream.events():
                        with inf.cond:
                            self._apply(etype, obj)
                finally:
                    with inf.cond:
                        self._stream = None
                if self._relist:
                    need_list = True
            except WatchExpired:
                need_list = True  # 410 Gone: LIST again, at once
            except ApiAnswer as err:
                if not need_list:  # listed, then the watch was refused
                    err.verb = "watch"
                need_list = True
                failures += 1
                with inf.cond:
                    self.refused = err
                    self.outcome = True
                    self.error = str(err)
                    inf.cond.notify_all()
                self._pause(failures)
            except SchedulerUnreachable as err:
                need_list = True
                if self._relist or inf.stopping.is_set():
                    continue  # we cut the stream ourselves: not a failure
                failures += 1
                with inf.cond:
                    if self.broken_since is None:
                        self.broken_since = time.monotonic()
                    self.outcome = True
                    self.error = err.reason
                    inf.cond.notify_all()
                self._pause(failures)
            except Exception as err:  # noqa: BLE001 - a bug must not kill the thread silently
                need_list = True
                failures += 1
                with inf.cond:
                    if self.broken_since is None:
                        self.broken_since = time.monotonic()
                    self.outcome = True
                    self.error = f"{w.what}: {type(err).__name__}: {err}"
                    inf.cond.notify_all()
                self._pause(failures)

    def _pause(self, failures: int) -> None:
        s = self._informer.settings
        delay = min(s.max_backoff_s, s.backoff_s * (2 ** (failures - 1)))
        self._informer.stopping.wait(delay)

    def _project(self, obj: dict[str, Any]) -> dict[str, Any]:
        return project(self.kind, obj)

    def _apply(self, etype: str, obj: dict[str, Any]) -> None:
        rv = _meta(obj).get("resourceVersion")
        if isinstance(rv, str) and rv:
            self._resource_version = rv
        self._informer.heard()
        if etype == "BOOKMARK":
            return
        name = str(_meta(obj).get("name"))
        keep = self._informer.keep_gone
        obj = project(self.kind, obj)  # what the cache keeps: the fields read
        carry, before = self._informer.carry, self.items.get(name)
        if carry is not None and before is not None and etype in ("MODIFIED", "DELETED"):
            obj = carry(self.watched, before, obj)
        touched = self._informer.touched
        if etype == "DELETED":
            # the object as it was known, else as it went (a delete of one never listed)
            last = self.items.pop(name, None) or obj
            if touched is not None:
                touched.changed(self.watched, last, None)
            kept = keep(self.watched, obj) if keep is not None else None
            if kept is not None:
                self.gone[name] = kept
                if len(self.gone) > GONE_KEPT:
                    evicted = self.gone.pop(next(iter(self.gone)))
                    if touched is not None:
                        touched.changed(self.watched, evicted, None)
        elif etype in ("ADDED", "MODIFIED"):
            old = self.items.get(name)
            self.items[name] = obj
            was_gone = self.gone.pop(name, None)
            if touched is not None:
                if was_gone is not None:
                    touched.changed(self.watched, was_gone, None)
                touched.changed(self.watched, old, obj)
        else:
            return  # an event type this client does not know: ignored, the next LIST corrects
        self._informer.observed(self, etype, obj)
        self._informer.cond.notify_all()


@dataclass
class View:
    """What discover() may read of some collections, at one instant."""

    objects: dict[Watched, list[dict[str, Any]]] = field(default_factory=dict)
    refused: dict[Watched, ApiAnswer] = field(default_factory=dict)
    # What changed since the previous view, taken with these objects (informer ``touched``)
    touched: Touched | None = None


class Informer:
    """The reflectors of one backend, made on first use of each collection."""

    def __init__(
        self,
        kube: KubeClient,
        settings: InformerSettings = InformerSettings(),
        keep_gone: KeepGone | None = None,
        carry: Carry | None = None,
        touched: Touched | None = None,
    ) -> None:
        self.kube = kube
        self.keep_gone = keep_gone
        self.carry = carry
        # Told of every LIST and every change to a cached object, under the lock (changes.py)
        self.touched = touched
        self.settings = settings
        self.cond = threading.Condition()
        self.stopping = threading.Event()
        self._reflectors: dict[Watched, Reflector] = {}
        self._expected: list[_Expectation] = []
        self._heard = time.monotonic()  # the API server's last word on any watch or list
        self.probes = 0  # GET /version asked because every watch was silent (tests, benches)

    # -- for the reflector threads (lock held) -----------------------------------------------

    def heard(self) -> None:
        self._heard = time.monotonic()

    def relisted(self, reflector: Reflector, started: float) -> None:
        if reflector.watched.res._api_info.resource.kind != "TrainJob":
            return
        ns = reflector.watched.namespace
        self._expected = [e for e in self._expected if e.namespace != ns or e.since >= started]

    def observed(self, reflector: Reflector, etype: str, obj: dict[str, Any]) -> None:
        if reflector.watched.res._api_info.resource.kind != "TrainJob" or not self._expected:
            return
        ns, name = reflector.watched.namespace, _meta(obj).get("name")
        self._expected = [
            e
            for e in self._expected
            if not (e.namespace == ns and e.name == name and e.seen(etype, obj))
        ]

    # -- for the backend ---------------------------------------------------------------------

    def reflector(self, watched: Watched) -> Reflector:
        with self.cond:
            found = self._reflectors.get(watched)
            if found is None:
                found = self._reflectors[watched] = Reflector(self, watched)
                found.start()
            return found

    def expect(self, trainjobs: Watched, name: str, seen: Predicate) -> None:
        """After a write to TrainJob ``name``: discover() must not answer from a cache that does
        not show it yet. ``seen`` says whether an event (or the cached object) shows it."""
        with self.cond:
            reflector = self._reflectors.get(trainjobs)
            if reflector is None:
                return  # its first LIST comes after the write
            cached = reflector.items.get(name)
            if reflector.synced and seen("ADDED" if cached else "DELETED", cached or {}):
                return  # already there
            assert trainjobs.namespace is not None
            self._expected.append(_Expectation(trainjobs.namespace, name, seen, time.monotonic()))

    def view(self, collections: Iterable[Watched]) -> View | None:
        """The cached objects of ``collections`` (starting any not yet watched), or None when
        the cache does not yet show this process's own writes (the caller lists instead).
        Raises SchedulerUnreachable as the module docstring says."""
        wanted = list(dict.fromkeys(collections))
        reflectors = [self.reflector(w) for w in wanted]
        s = self.settings
        self._check_not_stalled()
        with self.cond:
            deadline = time.monotonic() + s.sync_timeout_s
            while not all(r.outcome for r in reflectors):
                left = deadline - time.monotonic()
                if left <= 0:
                    waiting = [r.watched.what for r in reflectors if not r.outcome]
                    raise SchedulerUnreachable(
                        BACKEND, f"no first list within {s.sync_timeout_s}s: {', '.join(waiting)}"
                    )
                self.cond.wait(left)
            deadline = time.monotonic() + s.settle_s
            while self._expected:
                left = deadline - time.monotonic()
                if left <= 0:
                    behind = {e.namespace for e in self._expected}
                    for r in reflectors:
                        if (
                            r.watched.namespace in behind
                            and r.watched.res._api_info.resource.kind == "TrainJob"
                        ):
                            r.resync()
                    return None
                self.cond.wait(left)
            now = time.monotonic()
            out = View()
            for w, r in zip(wanted, reflectors, strict=True):
                if r.refused is not None:
                    out.refused[w] = r.refused
                    continue
                if not r.synced:
                    raise SchedulerUnreachable(BACKEND, r.error or f"{w.what}: not listed yet")
                if r.broken_since is not None and now - r.broken_since > s.stale_after_s:
                    raise SchedulerUnreachable(
                        BACKEND,
                        f"watch broken for more than {s.stale_after_s}s: {r.error}",
                    )
                out.objects[w] = [*r.items.values(), *r.gone.values()]
            if self.touched is not None:
                out.touched = self.touched.take()
            return out

    def _check_not_stalled(self) -> None:
        """Every watch silent for more than ``stall_after_s``: one ``GET /version``. No answer:
        every collection re-LISTs (a stalled connection may never speak again) and this look
        raises SchedulerUnreachable, so nothing is decided from a cache that may have stopped."""
        with self.cond:
            silent = time.monotonic() - self._heard
            if silent <= self.settings.stall_after_s:
                return
            self.probes += 1
        try:
            self.kube.probe()
        except SchedulerUnreachable as err:
            with self.cond:
                for r in self._reflectors.values():
                    r.resync()
            raise SchedulerUnreachable(
                BACKEND,
                f"no watch event or bookmark for {silent:.0f}s and the API server does not "
                f"answer: {err.reason}",
            ) from None
        with self.cond:
            self.heard()

    def resource_versions(self) -> list[str]:
        """Where each collection's cache stands (for tests that wait for a write to arrive)."""
        with self.cond:
            return [r.resource_version for r in self._reflectors.values()]

    def lists(self) -> int:
        """LIST calls made so far, all collections together (for tests and benchmarks)."""
        with self.cond:
            return sum(r.lists for r in self._reflectors.values())

    def close(self) -> None:
        self.stopping.set()
        with self.cond:
            reflectors = list(self._reflectors.values())
            for r in reflectors:
                r.abort()
            self.cond.notify_all()
        for r in reflectors:
            r.join(1.0)
