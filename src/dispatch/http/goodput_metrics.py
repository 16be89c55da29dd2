"""/metrics for goodput (G1-G4): node-seconds per phase and cause, and lost work per cause,
summed over every job's record.

Counters, derived from committed events only: a job's time is counted up to the boundary
its latest event closed (the segment still running to ``now`` is left out until an event
closes it), so a value never goes down and a restart of ``serve`` reads the same totals
from the same record: nothing is counted twice.

The sums are the fleet's totals kept by ``RecordCollector`` (http/metrics.py): each job's
part is read once per version of its record and a scrape reads only the jobs written to
since the last one (issue 36)."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, Metric

from dispatch.http.fleet_tally import Totals


def goodput_families(t: Totals) -> Iterator[Metric]:
    family = CounterMetricFamily(
        "dispatch_job_seconds", "Node-seconds of jobs' wall time by phase (queued, "
        "running, recovering, held, stopping, settling; held carries none), cause and "
        "backend, up to each job's latest committed event (G1, G2).",
        labels=["phase", "cause", "backend"])
    for (phase, cause, backend), v in t.seconds.items():
        family.add_metric([phase, cause, backend], v.total_seconds())
    yield family
    family = CounterMetricFamily(
        "dispatch_lost_work_seconds", "Node-seconds of running lost since the last "
        "durable checkpoint, by the cause of the end (G3).", labels=["cause", "backend"])
    for (cause, backend), v in t.lost.items():
        family.add_metric([cause, backend], v.total_seconds())
    yield family
