"""``GET /metrics``: what ``dispatch serve`` knows, in Prometheus' text format.

Two sources:

- the record (``RecordCollector``): jobs by state, committed outcomes, recoveries and
  escalations by cause kind, budget used by the unfinished jobs and goodput, kept as totals
  that a scrape changes by the jobs written to since the last one; and whether each
  backend's scheduler can be asked (one look per backend per scrape, about one of its jobs);
- the process (``ServeMetrics``): supervisor tick duration and count, ticks that met an
  unreachable scheduler, and every call made to a backend (by backend and contract call,
  plus by scheduler tool where the backend counts them: Slurm's ``sbatch``/``squeue``/...).
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from contextlib import nullcontext
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dispatch.backends.base import Backend
from dispatch.core.model import CauseKind, State
from dispatch.http.fleet_tally import UNUSABLE, Part, Totals, part_of
from dispatch.http.goodput_metrics import goodput_families
from dispatch.http.kept_parts import PartWriter, cached_parts
from dispatch.http.versions import EVERY_JOB, JobVersions
from dispatch.service import Service
from dispatch.stores.reading import fold_with_records
from dispatch.stores.snapshot import fold_with_snapshots
from dispatch.supervise.discovery import UNREACHABLE, look_all
from dispatch.supervise.loop import TickReport
from dispatch.support.gc_pause import gc_paused

log = logging.getLogger(__name__)

# The backend contract's calls that reach a scheduler (or the local runner).
COUNTED = ("submit", "discover", "stop", "cancel", "open_gate", "logs")


class SchedulerCalls:
    """Calls made to backends by every Service and supervisor of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[tuple[str, str]] = Counter()  # (backend, contract call)
        self.tools: Counter[tuple[str, str]] = Counter()  # (backend, scheduler tool)
        # (backend, resource): times the scheduler began refusing a read of it (RBAC)
        self.refused: Counter[tuple[str, str]] = Counter()

    def wrap(self, make: Callable[[str], Backend]) -> Callable[[str], Backend]:
        """A backend factory whose backends count their calls here."""
        def counted(name: str) -> Backend:
            return _Counted(make(name), self)
        return counted

    def add(self, backend: str, call: str, tools: Counter[str],
            refused: Counter[str] | None = None) -> None:
        with self._lock:
            self.calls[(backend, call)] += 1
            for tool, n in tools.items():
                self.tools[(backend, tool)] += n
            for resource, n in (refused or Counter()).items():
                self.refused[(backend, resource)] += n

    def snapshot(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        with self._lock:
            return dict(self.calls), dict(self.tools)

    def refusals(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self.refused)


class _Counted:
    """A backend whose contract calls (and the scheduler tools they ran) are counted."""

    def __init__(self, inner: Backend, sink: SchedulerCalls) -> None:
        self._inner = inner
        self._sink = sink
        self._tools_seen: Counter[str] = Counter()
        self._refused_seen: Counter[str] = Counter()

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr not in COUNTED:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return value(*args, **kwargs)
            finally:
                self._sink.add(self._inner.name, attr, self._new_tool_calls(),
                               self._new_refusals())
        return call

    def _new_refusals(self) -> Counter[str]:
        """Refusals the backend counted since the last call (the kubeflow backend's
        ``refusals.counts``: a read the API server began to refuse, by resource)."""
        counts = getattr(getattr(self._inner, "refusals", None), "counts", None)
        if not isinstance(counts, Counter):
            return Counter()
        new = counts - self._refused_seen
        self._refused_seen = Counter(counts)
        return new

    def _new_tool_calls(self) -> Counter[str]:
        tools = getattr(self._inner, "calls", None)
        if not isinstance(tools, Counter):
            return Counter()
        new = tools - self._tools_seen
        self._tools_seen = Counter(tools)
        return new


class ServeMetrics:
    """The process's own metrics, registered in ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.tick_seconds = Histogram(
            "dispatch_tick_duration_seconds", "Duration of one supervisor tick.",
            buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30), registry=registry)
        self.ticks = PromCounter("dispatch_ticks", "Supervisor ticks made.",
                                 registry=registry)
        self.unreachable_ticks = PromCounter(
            "dispatch_tick_scheduler_unreachable",
            "Supervisor ticks in which a scheduler could not be asked.", registry=registry)
        self.tick_errors = PromCounter("dispatch_tick_errors",
                                       "Supervisor ticks that reported errors.",
                                       registry=registry)
        self.scheduler = SchedulerCalls()
        registry.register(_CallsCollector(self.scheduler))

    def observe(self, report: TickReport, seconds: float) -> None:
        self.tick_seconds.observe(seconds)
        self.ticks.inc()
        if report.unreachable:
            self.unreachable_ticks.inc()
        if report.errors:
            self.tick_errors.inc()


class _CallsCollector(Collector):
    def __init__(self, calls: SchedulerCalls) -> None:
        self.calls = calls

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not collect

    def collect(self) -> Iterable[Metric]:
        calls, tools = self.calls.snapshot()
        by_call = CounterMetricFamily("dispatch_scheduler_calls",
                                      "Backend calls made, by backend and contract call.",
                                      labels=["backend", "call"])
        for (backend, call), n in sorted(calls.items()):
            by_call.add_metric([backend, call], n)
        by_tool = CounterMetricFamily("dispatch_scheduler_tool_calls",
                                      "Scheduler tools run, by backend and tool "
                                      "(where the backend counts them).",
                                      labels=["backend", "tool"])
        for (backend, tool), n in sorted(tools.items()):
            by_tool.add_metric([backend, tool], n)
        refused = CounterMetricFamily("dispatch_scheduler_refusals",
                                      "Times the scheduler began refusing a read dispatch "
                                      "needs (RBAC), by backend and resource; the supervisor "
                                      "logs each with the scheduler's words.",
                                      labels=["backend", "resource"])
        for (backend, resource), n in sorted(self.calls.refusals().items()):
            refused.add_metric([backend, resource], n)
        return [by_call, by_tool, refused]


class RecordCollector(Collector):
    """Jobs, outcomes, recoveries, escalations, budget and goodput, from the record.

    The fleet's totals are kept between scrapes as the sum of each job's part (http/
    fleet_tally.py), each part with the version it was read at: a scrape asks the store
    which jobs were written to since the last one (one indexed query) and reads only those
    (issue 36). Every series is by state, cause, scope, rule, phase or backend: never one per
    job. ``dispatch_scheduler_unreachable`` asks each backend with unfinished jobs about one
    of them at every scrape. ``warm`` builds the totals in the background when serve starts;
    until they are built a scrape does not wait: it answers only what the store counts in
    one query (``dispatch_jobs_stored``) with ``dispatch_record_totals_ready`` 0, and the
    families the totals give are absent, never 0 (issue 49)."""

    def __init__(self, open_service: Callable[[], Service]) -> None:
        self.open_service = open_service
        self._lock = threading.Lock()
        self._parts: dict[str, tuple[int, Part]] = {}  # job -> (version read, its part)
        self._totals = Totals()
        self._versions = JobVersions()
        self._unusable: set[str] = set()  # jobs whose record could not be used: read again
        self._ready = threading.Event()  # the totals were built once
        self._warming = False  # the background build runs: a scrape does not wait for it
        self.parts_writer = PartWriter(open_service)  # the parts computed, kept in the store

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not read the record or ask a scheduler

    def warm(self, after: threading.Thread | None = None) -> threading.Thread:
        """Build the totals in a background thread; a scrape meanwhile answers what the
        store counts (``collect``). ``after``: a build to let finish first (serve's held
        index): two builds at once share one interpreter lock, so each would take the time
        of both."""
        def build() -> None:
            if after is not None:
                after.join()
            try:
                with self._lock, self.open_service() as service:
                    self._refresh(service)
                    self._ready.set()
            except Exception:  # noqa: BLE001 - the next scrape builds them
                log.exception("the /metrics totals could not be built in the background")
            finally:
                self._warming = False
        self._warming = True
        thread = threading.Thread(target=build, name="metrics-totals", daemon=True)
        thread.start()
        return thread

    def _refresh(self, service: Service) -> None:
        """Fold the parts of the jobs written to since the last look into the totals."""
        rows, changed = self._versions.refresh(service.store)
        whole = changed is None
        if changed is None:  # read whole: a job may have been taken out (pruned)
            for gone in self._parts.keys() - rows.keys():
                self._totals.take(gone, self._parts.pop(gone)[1])
            changed = set(rows)
        parts = self._parts
        stale = [j for j in (changed | self._unusable) if j in rows
                 and (j not in parts or parts[j][0] != rows[j][0])]
        if not stale:
            return
        now = service.clock()
        # Reading every record (the first build, or the table read whole): the cyclic
        # collector would cost about as much CPU as the reading (support/gc_pause.py).
        with gc_paused() if whole else nullcontext():
            # A cold collector takes the parts the store keeps at each job's version
            # (stores/part_cache.py) and reads only the other records.
            fresh = cached_parts(service.store, rows) if whole and not self._parts else {}
            # In the tables' key order: ids are random, and reading them in any other order
            # touched the tables' pages all over (its SQL: 1.13 s against 0.46 s of CPU at
            # 100,000 jobs). In one read, not in chunks: chunks lowered the peak, but the
            # parts kept from each chunk pinned the memory of its freed events (a resident
            # set of 4.4 KB a live job after serve's builds, against 2.8 KB).
            todo = sorted(j for j in stale if j not in fresh)
            folded, errors = fold_with_records(service.store, todo, now)
            computed = [(job, part_of(job, events, now)) for job, events in folded]
            for job, part in computed:
                fresh[job.id] = (rows[job.id][0], part)
        for job_id in errors:
            fresh[job_id] = (-1, UNUSABLE)  # read again at the next scrape
        self._unusable = set(errors)
        for job_id in stale:
            old = self._parts.pop(job_id, None)
            if old is not None:
                self._totals.take(job_id, old[1])
            new = fresh.get(job_id)
            if new is not None:
                self._parts[job_id] = new
                self._totals.add(job_id, new[1])
        self.parts_writer.put(computed)  # kept in the store, off the scrape's path

    def _unreachable(self, service: Service) -> dict[str, int]:
        """1 for each backend with unfinished jobs whose scheduler cannot be asked now: one
        look per backend, about one of its submitted jobs (a backend none of whose jobs was
        submitted has nothing to be asked)."""
        probes = self._totals.probes()
        asked = [j for j in probes.values() if j is not None]
        looks = {}
        if asked:
            now = service.clock()
            jobs, _ = fold_with_snapshots(service.store, asked, now)
            looks = look_all(jobs, service.backends, now, deadline_s=service.read_deadline_s)
        return {backend: int(backend in looks and looks[backend].scheduler == UNREACHABLE)
                for backend in probes}

    def totals(self, service: Service) -> Totals:
        """The totals, brought up to what ``service``'s store holds now (for a reader that
        renders them before another scrape changes them: tests, benchmarks)."""
        with self._lock:
            self._refresh(service)
            return self._totals

    def collect(self) -> Iterator[Metric]:
        if self._warming and not self._ready.is_set():
            with self.open_service() as service:  # never waits for the build
                families = [ready_family(False),
                            stored_family(service.store.count_jobs(EVERY_JOB))]
            yield from families
            return
        with self._lock, self.open_service() as service:
            self._refresh(service)
            self._ready.set()
            families = [*record_families(self._totals, self._unreachable(service)),
                        *goodput_families(self._totals), ready_family(True),
                        stored_family(self._versions.counts)]
        yield from families


def ready_family(ready: bool) -> Metric:
    gauge = GaugeMetricFamily("dispatch_record_totals_ready",
                              "1 once the record's totals are built; 0 while serve builds "
                              "them at start: this scrape then holds only what the store "
                              "counts (dispatch_jobs_stored), the other families of the "
                              "record are absent.")
    gauge.add_metric([], int(ready))
    return gauge


def stored_family(counts: dict[str | None, int]) -> Metric:
    """Jobs by the store's own columns (``counts``: the store's ``count_jobs`` of every job,
    one indexed count and no record read): a finished job by its outcome column
    (``finished`` for one that ended before the store kept outcomes), ``unfinished`` for
    the others. A record that cannot be used still counts here by its column, while
    ``dispatch_jobs`` counts it as unusable. Once the totals are built, the counts are those
    their refresh took to catch a prune (http/versions.py): one count per scrape."""
    gauge = GaugeMetricFamily("dispatch_jobs_stored", "Jobs by the state the store's "
                              "columns hold (the outcome of a finished job, 'unfinished' "
                              "for the others): known at once, no record read.",
                              labels=["state"])
    for state in State:
        if state.terminal:
            gauge.add_metric([state.value], counts.get(state.value, 0))
    gauge.add_metric(["unfinished"], counts.get("", 0))
    if counts.get(None):
        gauge.add_metric(["finished"], counts[None])
    return gauge


def record_families(t: Totals, unreachable: dict[str, int]) -> Iterator[Metric]:
    """The record's families from the fleet's totals."""
    jobs = GaugeMetricFamily("dispatch_jobs", "Jobs by state (finished ones included), as "
                             "their records say.", labels=["state"])
    for state in State:
        jobs.add_metric([state.value], t.states.get(state.value, 0))
    yield jobs
    broken = GaugeMetricFamily("dispatch_jobs_record_unusable",
                               "Jobs whose record cannot be used.")
    broken.add_metric([], t.unusable)
    yield broken
    family = CounterMetricFamily("dispatch_outcomes", "Committed outcomes by state and "
                                 "cause kind.", labels=["state", "cause"])
    for (outcome, cause), n in t.outcomes.items():
        family.add_metric([outcome, cause], n)
    yield family
    family = CounterMetricFamily("dispatch_recoveries", "Recoveries started, by the "
                                 "cause recovered from.", labels=["cause"])
    recoveries = dict(t.recoveries.items())
    for kind in CauseKind:
        if recoveries.get(kind.value):
            family.add_metric([kind.value], recoveries[kind.value])
    yield family
    family = CounterMetricFamily("dispatch_escalations", "Escalations raised, by cause "
                                 "kind.", labels=["cause"])
    for cause, n in t.escalations.items():
        family.add_metric([cause], n)
    yield family
    family = CounterMetricFamily("dispatch_application_errors", "Committed outcomes whose "
                                 "end carries the application's own error (its first "
                                 "failing rank's words), by cause kind.", labels=["cause"])
    for cause, n in t.app_errors.items():
        family.add_metric([cause], n)
    yield family
    # Summed by scope and rule: a series per job would grow with the fleet (issue 36).
    budget = GaugeMetricFamily("dispatch_budget_used", "Recoveries spent per policy rule "
                               "by the unfinished jobs, summed by scope and rule.",
                               labels=["scope", "rule"])
    for (scope, rule), n in t.budget.items():
        budget.add_metric([scope, rule], n)
    yield budget
    gauge = GaugeMetricFamily("dispatch_scheduler_unreachable",
                              "1 when a backend's scheduler could not be asked at this "
                              "scrape (backends with unfinished jobs).",
                              labels=["backend"])
    for backend, flag in sorted(unreachable.items()):
        gauge.add_metric([backend], flag)
    yield gauge
