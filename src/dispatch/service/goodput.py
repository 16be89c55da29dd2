"""Goodput read from the store (G1-G4 over many records): `dispatch goodput`, the status line,
/metrics and the dashboard all read it from here. Only the record is read; no scheduler."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from dispatch.core.goodput import ZERO, By, JobTime, Phase, Split, fleet, job_time, split
from dispatch.errors import BadInput, DispatchError
from dispatch.stores.base import RecordStore
from dispatch.stores.reading import fold_with_records
from dispatch.support.durations import age_seconds, quoted


def span_of(text: str, what: str = "--since") -> timedelta:
    """'7d', '12h', '30m', '90s', '2w' as a timedelta; BadInput naming ``what`` otherwise."""
    seconds = age_seconds(text, what)
    if not seconds:  # not an age, or 0
        raise BadInput(f"{what} {quoted(text)}: not a span such as 7d, 12h, 30m, 90s or 2w")
    return timedelta(seconds=seconds)


def job_times(store: RecordStore, job_ids: Sequence[str], now: datetime
              ) -> tuple[list[JobTime], dict[str, DispatchError]]:
    """Each job's time (a record that cannot be trusted is set aside with its error)."""
    folded, errors = fold_with_records(store, job_ids, now)  # the same refusals as any reader
    return [job_time(events, now) for _, events in folded], errors


def fleet_times(store: RecordStore, now: datetime
                ) -> tuple[list[JobTime], dict[str, DispatchError]]:
    """Every job's time; the window is applied by ``groups`` (the store does not know when
    a job finished, so a job created before the window may still have time in it)."""
    return job_times(store, [r.job_id for r in store.list_jobs()], now)


def hours(d: timedelta) -> float:
    return d.total_seconds() / 3600.0


# A figure's unit is the one that fits it: node-seconds under two minutes, node-minutes
# under two hours, node-hours above (issue 36: never a column of 0.00 node-h).
_UNITS = ((120.0, 1.0, "node-s"), (7200.0, 60.0, "node-min"), (float("inf"), 3600.0, "node-h"))


def _figure(v: float) -> str:
    return f"{v:.2f}" if v < 10 else f"{v:.1f}" if v < 100 else f"{v:,.0f}"


def node_time_text(seconds: float, *, nodes: bool = True) -> str:
    """``'2.80 node-s'``, ``'21.3 node-min'``, ``'1,204 node-h'``: node-time in the unit that
    fits it, with three significant figures or more (the dashboard's JS does the same);
    ``nodes=False``: plain time (``'21.3 min'``)."""
    for below, scale, unit in _UNITS:
        if seconds < below:
            return f"{_figure(seconds / scale)} {unit if nodes else unit[5:]}"
    raise AssertionError("unreachable: the last unit has no bound")


def share_text(g: float | None) -> str:
    return "-" if g is None else f"{g:.0%}"


def split_json(s: Split) -> dict[str, Any]:
    """One split as JSON: seconds and node-seconds per phase and cause, lost work and badput
    by cause, goodput (node-time and plain)."""
    parts = [{"phase": p.value, "cause": c.value, "seconds": v.total_seconds(),
              "node_seconds": s.node_parts[(p, c)].total_seconds(),
              "gpu_seconds": s.gpu_parts.get((p, c), ZERO).total_seconds()}
             for (p, c), v in sorted(s.parts.items(), key=lambda kv: (kv[0][0], kv[0][1]))]
    return {
        "jobs": s.jobs,
        "wall_seconds": s.wall.total_seconds(),
        "node_seconds": s.node_wall.total_seconds(),
        "parts": parts,
        "lost_work": [{"cause": c.value, "seconds": v.total_seconds(),
                       "node_seconds": s.node_lost[c].total_seconds(),
                       "gpu_seconds": s.gpu_lost.get(c, ZERO).total_seconds()}
                      for c, v in sorted(s.lost.items())],
        "badput": [{"cause": c.value, "node_seconds": v.total_seconds()}
                   for c, v in sorted(s.badput().items()) if v > ZERO],
        "goodput": s.goodput(),
        "goodput_unweighted": s.goodput(nodes=False),
        # issue 36: the second denominator, only the phases that hold nodes
        "allocated_node_seconds": s.allocated().total_seconds(),
        "goodput_allocated": s.allocated_goodput(),
    }


def groups(jobs: Sequence[JobTime], by: By | None, now: datetime,
           since: timedelta | None) -> dict[str, Split]:
    return fleet(jobs, by, since=now - since if since is not None else None, until=now)


def goodput_line(s: Split) -> str:
    """The status line: goodput, then the costliest causes."""
    g = s.goodput()
    if g is None:
        return "goodput: no time yet"
    bad = sorted(((v, c.value) for c, v in s.badput().items() if v > ZERO), reverse=True)
    text = (f"goodput {g:.0%} of time to result ({node_time_text(_sec(s.node_wall))}), "
            f"{share_text(s.allocated_goodput())} of allocated node-time "
            f"({node_time_text(_sec(s.allocated()))}); running "
            f"{node_time_text(_sec(s.phase(Phase.RUNNING)))}, lost work "
            f"{node_time_text(_sec(s.lost_total()))}")
    if bad:
        text += "; badput " + ", ".join(f"{c} {node_time_text(_sec(v))}" for v, c in bad[:3])
    held = s.phase(Phase.HELD, nodes=False)
    if held > ZERO:  # G2: waiting for a person is time to result, never node-time
        text += f"; held {node_time_text(_sec(held), nodes=False)} (waiting for a person)"
    return text


def _sec(d: timedelta) -> float:
    return d.total_seconds()


def durations_json(jt: JobTime) -> dict[str, float]:
    """The job page's durations: seconds per phase (queued, running, recovering, held,
    stopping) and the total wall time, from the same split as its goodput table (one
    computation: issue 36)."""
    part = split(jt)
    out = {p.value: round(part.phase(p, nodes=False).total_seconds(), 3) for p in Phase}
    out["total"] = round(part.wall.total_seconds(), 3)
    return out


def job_goodput_json(jt: JobTime) -> dict[str, Any]:
    """The dashboard's job page: the split, and its pieces and lost work as intervals."""
    return {
        "split": split_json(split(jt)),
        "durations": durations_json(jt),
        "phases": [{"start": x.start.isoformat(), "end": x.end.isoformat(),
                    "phase": x.phase.value, "cause": x.cause.value, "nodes": x.nodes}
                   for x in jt.segments],
        "lost": [{"start": x.start.isoformat(), "end": x.end.isoformat(),
                  "cause": x.cause.value, "nodes": x.nodes} for x in jt.lost],
    }


def badput_by_day(jobs: Sequence[JobTime], now: datetime, days: int) -> list[dict[str, Any]]:
    """The fleet's badput by cause for each of the last ``days`` UTC days (the last one up to
    ``now``), in node-hours: the dashboard's chart."""
    today = now.replace(hour=0, minute=0, second=0, microsecond=0)
    out = []
    for k in range(days - 1, -1, -1):
        low = today - timedelta(days=k)
        high = min(low + timedelta(days=1), now)
        total = Split()
        for part in fleet(jobs, None, since=low, until=high).values():
            total.add(part)
        out.append({"day": low.date().isoformat(),
                    "badput": {c.value: round(hours(v), 6)
                               for c, v in sorted(total.badput().items()) if v > ZERO},
                    "goodput": total.goodput()})
    return out

