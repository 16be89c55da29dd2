"""``GET /metrics``: what ``dispatch serve`` knows, in Prometheus' text format.

Two sources:

- the record, read at scrape time (``RecordCollector``): jobs by state, committed outcomes,
  recoveries and escalations by cause kind, budget used by the unfinished jobs, and whether
  each backend's scheduler could be asked (one look per backend per scrape, as ``ls`` does);
- the process (``ServeMetrics``): supervisor tick duration and count, ticks that met an
  unreachable scheduler, and every call made to a backend (by backend and contract call,
  plus by scheduler tool where the backend counts them: Slurm's ``sbatch``/``squeue``/...).
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry, Histogram
from prometheus_client import Counter as PromCounter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dispatch.backends.base import Backend
from dispatch.core.model import CauseKind, State
from dispatch.http.versions import JobVersions
from dispatch.service import Service
from dispatch.service.views import SCHEDULER_UNREACHABLE, JobView
from dispatch.supervise.loop import TickReport

# The backend contract's calls that reach a scheduler (or the local runner).
COUNTED = ("submit", "discover", "stop", "cancel", "open_gate", "logs")


class SchedulerCalls:
    """Calls made to backends by every Service and supervisor of this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.calls: Counter[tuple[str, str]] = Counter()  # (backend, contract call)
        self.tools: Counter[tuple[str, str]] = Counter()  # (backend, scheduler tool)

    def wrap(self, make: Callable[[str], Backend]) -> Callable[[str], Backend]:
        """A backend factory whose backends count their calls here."""
        def counted(name: str) -> Backend:
            return _Counted(make(name), self)
        return counted

    def add(self, backend: str, call: str, tools: Counter[str]) -> None:
        with self._lock:
            self.calls[(backend, call)] += 1
            for tool, n in tools.items():
                self.tools[(backend, tool)] += n

    def snapshot(self) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        with self._lock:
            return dict(self.calls), dict(self.tools)


class _Counted:
    """A backend whose contract calls (and the scheduler tools they ran) are counted."""

    def __init__(self, inner: Backend, sink: SchedulerCalls) -> None:
        self._inner = inner
        self._sink = sink
        self._tools_seen: Counter[str] = Counter()

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._inner, attr)
        if attr not in COUNTED:
            return value

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return value(*args, **kwargs)
            finally:
                self._sink.add(self._inner.name, attr, self._new_tool_calls())
        return call

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
        return [by_call, by_tool]


@dataclass(frozen=True, slots=True)
class _Tally:
    """What one job adds to the record's metrics (a finished job's never changes)."""

    state: str | None  # None: the record cannot be used
    outcomes: tuple[tuple[str, str], ...] = ()
    recoveries: tuple[str, ...] = ()
    escalations: tuple[str, ...] = ()
    app_error: str | None = None
    budget: tuple[tuple[str, str, int], ...] = ()  # (scope, rule, used) of an unfinished job
    backend: str = ""
    unreachable: bool = False
    live: bool = False


def _tally(v: JobView) -> _Tally:
    s = v.status
    if s is None:
        return _Tally(state=None)
    outcomes, recoveries = [], []
    for t in s.history:
        if t.state is State.RECOVERING and t.cause is not None:
            recoveries.append(t.cause.kind.value)
        elif t.state.terminal and t.cause is not None:
            outcomes.append((t.state.value, t.cause.kind.value))
    live = not s.state.terminal
    return _Tally(
        state=s.state.value, outcomes=tuple(outcomes), recoveries=tuple(recoveries),
        escalations=tuple(x.cause.kind.value if x.cause is not None else "none"
                          for x in s.escalations),
        # the kind only: never the words
        app_error=(s.cause.kind.value if s.settled and s.error is not None
                   and s.cause is not None else None),
        budget=tuple((s.scope or s.backend, rule, n) for rule, n in s.budget_used.items())
        if live else (),
        backend=s.backend, unreachable=v.scheduler == SCHEDULER_UNREACHABLE, live=live)


class RecordCollector(Collector):
    """Jobs, outcomes, recoveries, escalations and budget, from the record at scrape time.

    A finished job's part is kept between scrapes with the version it was read at (its
    outcome never changes), so a scrape folds only the unfinished jobs and those written
    to since: one look per backend for the live ones, as ``ls`` does (issue 36). Every
    series is by state, cause, scope, rule or backend: never one per job."""

    def __init__(self, open_service: Callable[[], Service]) -> None:
        self.open_service = open_service
        self._lock = threading.Lock()
        self._done: dict[str, tuple[int, _Tally]] = {}
        self._versions = JobVersions()

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not read the record or ask a scheduler

    def _tallies(self) -> list[_Tally]:
        with self._lock, self.open_service() as service:
            rows = self._versions.refresh(service.store)
            versions = {j: v for j, (v, _) in rows.items()}
            stale = [j for j, (v, done) in rows.items()
                     if done and self._done.get(j, (-1,))[0] != v]
            for v in service.views(stale, ask_scheduler=False):
                t = _tally(v)
                if t.state is not None and not t.live:
                    self._done[v.job] = (versions[v.job], t)
            for gone in self._done.keys() - versions.keys():
                del self._done[gone]
            others = [j for j in rows if j not in self._done]
            return ([t for _, t in self._done.values()]
                    + [_tally(v) for v in service.views(others)])

    def collect(self) -> Iterator[Metric]:
        tallies = self._tallies()
        jobs = GaugeMetricFamily("dispatch_jobs", "Jobs by state (finished ones included).",
                                 labels=["state"])
        by_state = Counter(t.state for t in tallies if t.state is not None)
        for state in State:
            jobs.add_metric([state.value], by_state.get(state.value, 0))
        yield jobs
        broken = GaugeMetricFamily("dispatch_jobs_record_unusable",
                                   "Jobs whose record cannot be used.")
        broken.add_metric([], sum(1 for t in tallies if t.state is None))
        yield broken

        outcomes: Counter[tuple[str, str]] = Counter()
        recoveries: Counter[str] = Counter()
        escalations: Counter[str] = Counter()
        app_errors: Counter[str] = Counter()
        # Summed by scope and rule: a series per job would grow with the fleet (issue 36).
        budget_used: Counter[tuple[str, str]] = Counter()
        unreachable: dict[str, int] = {}
        for t in tallies:
            outcomes.update(t.outcomes)
            recoveries.update(t.recoveries)
            escalations.update(t.escalations)
            if t.app_error is not None:
                app_errors[t.app_error] += 1
            for scope, rule, n in t.budget:
                budget_used[(scope, rule)] += n
            if t.live:
                unreachable[t.backend] = max(unreachable.get(t.backend, 0), int(t.unreachable))
        family = CounterMetricFamily("dispatch_outcomes", "Committed outcomes by state and "
                                     "cause kind.", labels=["state", "cause"])
        for (outcome, cause), n in sorted(outcomes.items()):
            family.add_metric([outcome, cause], n)
        yield family
        family = CounterMetricFamily("dispatch_recoveries", "Recoveries started, by the "
                                     "cause recovered from.", labels=["cause"])
        for kind in CauseKind:
            if recoveries.get(kind.value):
                family.add_metric([kind.value], recoveries[kind.value])
        yield family
        family = CounterMetricFamily("dispatch_escalations", "Escalations raised, by cause "
                                     "kind.", labels=["cause"])
        for cause, n in sorted(escalations.items()):
            family.add_metric([cause], n)
        yield family
        family = CounterMetricFamily("dispatch_application_errors", "Committed outcomes whose "
                                     "end carries the application's own error (its first "
                                     "failing rank's words), by cause kind.", labels=["cause"])
        for cause, n in sorted(app_errors.items()):
            family.add_metric([cause], n)
        yield family
        budget = GaugeMetricFamily("dispatch_budget_used", "Recoveries spent per policy rule "
                                   "by the unfinished jobs, summed by scope and rule.",
                                   labels=["scope", "rule"])
        for (scope, rule), n in sorted(budget_used.items()):
            budget.add_metric([scope, rule], n)
        yield budget
        gauge = GaugeMetricFamily("dispatch_scheduler_unreachable",
                                  "1 when a backend's scheduler could not be asked at this "
                                  "scrape (backends with unfinished jobs).",
                                  labels=["backend"])
        for backend, flag in sorted(unreachable.items()):
            gauge.add_metric([backend], flag)
        yield gauge
