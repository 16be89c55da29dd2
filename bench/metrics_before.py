"""The /metrics record collectors as they were before issue 36's kept totals (commit
fb9837c), for bench_scale to time in the same process as today's: each live job projected
with one look per backend at every scrape, finished jobs' parts and goodput kept by version.
A benchmark's reference only: nothing in dispatch imports it."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import timedelta

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dispatch.core.goodput import ZERO, JobTime
from dispatch.core.model import CauseKind, State
from dispatch.http.versions import JobVersions
from dispatch.service import Service
from dispatch.service.views import SCHEDULER_UNREACHABLE, JobView
from dispatch.support.clock import utcnow


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
        state=s.state.value,
        outcomes=tuple(outcomes),
        recoveries=tuple(recoveries),
        escalations=tuple(
            x.cause.kind.value if x.cause is not None else "none" for x in s.escalations
        ),
        # the kind only: never the words
        app_error=(
            s.cause.kind.value
            if s.settled and s.error is not None and s.cause is not None
            else None
        ),
        budget=tuple((s.scope or s.backend, rule, n) for rule, n in s.budget_used.items())
        if live
        else (),
        backend=s.backend,
        unreachable=v.scheduler == SCHEDULER_UNREACHABLE,
        live=live,
    )


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
            rows = self._versions.refresh(service.store)[0]  # today: (rows, changed)
            versions = {j: v for j, (v, _) in rows.items()}
            stale = [
                j for j, (v, done) in rows.items() if done and self._done.get(j, (-1,))[0] != v
            ]
            for v in service.views(stale, ask_scheduler=False):
                t = _tally(v)
                if t.state is not None and not t.live:
                    self._done[v.job] = (versions[v.job], t)
            for gone in self._done.keys() - versions.keys():
                del self._done[gone]
            others = [j for j in rows if j not in self._done]
            return [t for _, t in self._done.values()] + [_tally(v) for v in service.views(others)]

    def collect(self) -> Iterator[Metric]:
        tallies = self._tallies()
        jobs = GaugeMetricFamily(
            "dispatch_jobs", "Jobs by state (finished ones included).", labels=["state"]
        )
        by_state = Counter(t.state for t in tallies if t.state is not None)
        for state in State:
            jobs.add_metric([state.value], by_state.get(state.value, 0))
        yield jobs
        broken = GaugeMetricFamily(
            "dispatch_jobs_record_unusable", "Jobs whose record cannot be used."
        )
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
        family = CounterMetricFamily(
            "dispatch_outcomes",
            "Committed outcomes by state and cause kind.",
            labels=["state", "cause"],
        )
        for (outcome, cause), n in sorted(outcomes.items()):
            family.add_metric([outcome, cause], n)
        yield family
        family = CounterMetricFamily(
            "dispatch_recoveries",
            "Recoveries started, by the cause recovered from.",
            labels=["cause"],
        )
        for kind in CauseKind:
            if recoveries.get(kind.value):
                family.add_metric([kind.value], recoveries[kind.value])
        yield family
        family = CounterMetricFamily(
            "dispatch_escalations", "Escalations raised, by cause kind.", labels=["cause"]
        )
        for cause, n in sorted(escalations.items()):
            family.add_metric([cause], n)
        yield family
        family = CounterMetricFamily(
            "dispatch_application_errors",
            "Committed outcomes whose "
            "end carries the application's own error (its first "
            "failing rank's words), by cause kind.",
            labels=["cause"],
        )
        for cause, n in sorted(app_errors.items()):
            family.add_metric([cause], n)
        yield family
        budget = GaugeMetricFamily(
            "dispatch_budget_used",
            "Recoveries spent per policy rule by the unfinished jobs, summed by scope and rule.",
            labels=["scope", "rule"],
        )
        for (scope, rule), n in sorted(budget_used.items()):
            budget.add_metric([scope, rule], n)
        yield budget
        gauge = GaugeMetricFamily(
            "dispatch_scheduler_unreachable",
            "1 when a backend's scheduler could not be asked at this "
            "scrape (backends with unfinished jobs).",
            labels=["backend"],
        )
        for backend, flag in sorted(unreachable.items()):
            gauge.add_metric([backend], flag)
        yield gauge


class GoodputCollector(Collector):
    def __init__(self, open_service: Callable[[], Service]) -> None:
        self.open_service = open_service
        self._lock = threading.Lock()
        self._times: dict[str, tuple[int, JobTime]] = {}  # job -> (version read, its time)
        self._versions = JobVersions()

    def describe(self) -> Iterable[Metric]:
        return []  # registering must not read the record

    def collect(self) -> Iterator[Metric]:
        from dispatch.service.goodput import job_times

        with self._lock, self.open_service() as service:
            rows = {j: v for j, (v, _) in self._versions.refresh(service.store)[0].items()}
            stale = [j for j, v in rows.items() if self._times.get(j, (-1,))[0] != v]
            fresh, _ = job_times(service.store, stale, utcnow())
            for jt in fresh:
                self._times[jt.job_id] = (rows[jt.job_id], jt)
            for gone in self._times.keys() - rows.keys():
                del self._times[gone]
            found = [jt for _, jt in self._times.values()]
        phases: dict[tuple[str, str, str], timedelta] = {}
        lost: dict[tuple[str, str], timedelta] = {}
        for jt in found:
            for s in jt.segments[: jt.closed]:
                key = (s.phase.value, s.cause.value, jt.backend)
                phases[key] = phases.get(key, ZERO) + (s.end - s.start) * s.nodes
            for s in jt.lost:
                lkey = (s.cause.value, jt.backend)
                lost[lkey] = lost.get(lkey, ZERO) + (s.end - s.start) * s.nodes
        family = CounterMetricFamily(
            "dispatch_job_seconds",
            "Node-seconds of jobs' wall time by phase (queued, "
            "running, recovering, held, stopping), cause and backend, up to each job's "
            "latest committed event (G1, G2).",
            labels=["phase", "cause", "backend"],
        )
        for (phase, cause, backend), v in sorted(phases.items()):
            family.add_metric([phase, cause, backend], v.total_seconds())
        yield family
        family = CounterMetricFamily(
            "dispatch_lost_work_seconds",
            "Node-seconds of running lost since the last "
            "durable checkpoint, by the cause of the end (G3).",
            labels=["cause", "backend"],
        )
        for (cause, backend), v in sorted(lost.items()):
            family.add_metric([cause, backend], v.total_seconds())
        yield family
