"""/metrics for goodput (G1-G4): node-seconds per phase and cause, and lost work per cause,
summed over every job's record at scrape time.

Counters, derived from committed events only: a job's time is counted up to the boundary
its latest event closed (the segment still running to ``now`` is left out until an event
closes it), so a value never goes down and a restart of ``serve`` reads the same totals
from the same record: nothing is counted twice.

Each job's time is kept between scrapes with the version it was read at (a job's counted
time depends on its committed events only), so a scrape reads only the jobs written to
since the last one: at 10,000 jobs a scrape is one query over the jobs table (issue 36)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from datetime import timedelta

from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from dispatch.core.goodput import ZERO, JobTime
from dispatch.http.versions import JobVersions
from dispatch.service import Service
from dispatch.support.clock import utcnow


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
            rows = {j: v for j, (v, _) in self._versions.refresh(service.store).items()}
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
            for s in jt.segments[:jt.closed]:
                key = (s.phase.value, s.cause.value, jt.backend)
                phases[key] = phases.get(key, ZERO) + (s.end - s.start) * s.nodes
            for s in jt.lost:
                lkey = (s.cause.value, jt.backend)
                lost[lkey] = lost.get(lkey, ZERO) + (s.end - s.start) * s.nodes
        family = CounterMetricFamily(
            "dispatch_job_seconds", "Node-seconds of jobs' wall time by phase (queued, "
            "running, recovering, held, stopping), cause and backend, up to each job's "
            "latest committed event (G1, G2).", labels=["phase", "cause", "backend"])
        for (phase, cause, backend), v in sorted(phases.items()):
            family.add_metric([phase, cause, backend], v.total_seconds())
        yield family
        family = CounterMetricFamily(
            "dispatch_lost_work_seconds", "Node-seconds of running lost since the last "
            "durable checkpoint, by the cause of the end (G3).", labels=["cause", "backend"])
        for (cause, backend), v in sorted(lost.items()):
            family.add_metric([cause, backend], v.total_seconds())
        yield family
